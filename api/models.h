// Model summaries: store metadata as kiln.v1.Model (ModelService's Get/List/Upload answers), and
// the one rule for every string that comes from a model into a proto3 `string` field.
#pragma once

#include <string>
#include <string_view>

#include <google/protobuf/message.h>

#include "common/status.h"
#include "kiln/v1/model.pb.h"
#include "store/model_store.h"

namespace kiln::api {

/// Shortest id prefix that ResolveModelRef resolves (hex digits).
inline constexpr size_t kMinModelIdPrefix = 8;
/// Most candidates an ambiguous prefix's error lists.
inline constexpr size_t kMaxPrefixCandidates = 5;

/// The model reference every RPC that takes one (a `model_id` field: GetModel, ReadModel,
/// DeleteModel, CompileAi8x, RunConvLayers, SubmitRun; ListJobs' filter) resolves once, before it looks the model
/// up: a model id or a name is returned as it is (an exact name wins over a prefix; a name keeps
/// its meaning, e.g. DeleteModel of a name removes only that name); otherwise 8..63 lowercase hex
/// digits that begin exactly one stored id resolve to that id. Errors: NOT_FOUND (no model with
/// that id, name or id prefix), INVALID_ARGUMENT for an ambiguous prefix, naming up to
/// kMaxPrefixCandidates of the ids it begins (and how many more there are).
Result<std::string> ResolveModelRef(const store::ModelStore& store, const std::string& ref);

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
