// Model summaries: store metadata as kiln.v1.Model (ModelService's Get/List/Upload answers), and
// the one rule for every string that comes from a model into a proto3 `string` field.
#pragma once

#include <string>
#include <string_view>

#include <google/protobuf/message.h>

#include "kiln/v1/model.pb.h"
#include "store/model_store.h"

namespace kiln::api {

/// Fills a kiln.v1.Model from store metadata (strings made valid UTF-8, as by EnsureUtf8).
void ToProto(const store::ModelInfo& info, kiln::v1::Model* out);

/// `s` with each byte that is not part of a well-formed UTF-8 sequence (RFC 3629: no overlong
/// forms, no surrogates, nothing above U+10FFFF) replaced by U+FFFD; valid text is unchanged.
std::string ValidUtf8(std::string_view s);

/// Makes every `string` field of `message`, nested messages and repeated fields included, valid
/// UTF-8 (ValidUtf8); `bytes` fields are left alone. proto3 requires valid UTF-8 in `string`
/// fields and the C++ runtime refuses to serialize anything else, so one model with a name like
/// "\xff\xfe" (which onnx.checker accepts) would otherwise fail every answer that carries it.
/// Every answer that carries strings taken from a model passes through here (models.cc,
/// run_conv.cc, compile_ai8x.cc).
void EnsureUtf8(google::protobuf::Message* message);

}  // namespace kiln::api
