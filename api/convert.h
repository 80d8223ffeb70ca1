// Conversions between kiln.v1 messages and Kiln's domain types, both ways, and the parsers of the
// CLI's precision flags. The only place that maps these enums (server/ and cli/ call here).
#pragma once

#include <string>
#include <vector>

#include <google/protobuf/map.h>

#include "common/status.h"
#include "device/backends/backend.h"
#include "device/backends/precision.h"
#include "device/tensor.h"
#include "kiln/v1/device.pb.h"

namespace google::protobuf {
class Message;
}

namespace kiln::api {

/// Every enum field of `message`, its sub-messages and repeated fields included, holds a value its
/// enum declares. proto3 enums are open: a peer may send any int32 (RunMode 7, Arch 99), which the
/// parser keeps and a switch's default would silently map to some other value; every request is
/// checked here before it is used. INVALID_ARGUMENT naming the field path ("precision.arch: 99 is
/// not a kiln.v1.Arch value"), `prefix` prepended ("options.device").
Status CheckEnumValues(const google::protobuf::Message& message, const std::string& prefix = "");

/// kiln.v1.Tensor -> device::Tensor of its KServe-v2 datatype (every one device::ParseDataType
/// knows; "" = FP32; others INVALID_ARGUMENT), unconverted — the runtime converts it to the model's
/// element type (runtime/inputs.h). The byte count must equal product(shape) x element size (the
/// message names the tensor, the expected and the received byte counts); BOOL bytes must be 0 / 1.
Result<device::Tensor> FromProto(const kiln::v1::Tensor& t);

/// device::Tensor -> kiln.v1.Tensor (its KServe-v2 datatype, little-endian row-major raw_data).
void ToProto(const std::string& name, const device::Tensor& t, kiln::v1::Tensor* out);

/// kiln.v1.Precision -> PrecisionConfig; unset fields keep TT-NN's conv defaults
/// (PrecisionConfig::TtnnConvDefaults). INVALID_ARGUMENT for values the config rejects (e.g.
/// bfloat4_b activations).
Result<device::PrecisionConfig> FromProto(const kiln::v1::Precision& p);
/// `layer` merged over `base` field by field (protobuf MergeFrom): a field `layer` sets — an enum
/// or int other than 0, a bool true, an `optional` field present — replaces `base`'s, the rest
/// stay `base`'s. The same rule FromProto applies to a request's precision over TT-NN's defaults
/// (an unset field keeps the default), so a request's RunConvLayersRequest.layer_precision entry
/// is merged over its `precision` here, and nowhere else (kiln/v1/device.proto).
kiln::v1::Precision MergePrecision(const kiln::v1::Precision& base, const kiln::v1::Precision& layer);
/// The resolved config back as a message (every field set).
void ToProto(const device::PrecisionConfig& c, kiln::v1::Precision* out);
/// A tt-emu layer's program (backend.h ProgramReport) as the report's ConvProgram message.
void ToProto(const device::ProgramReport& p, kiln::v1::ConvProgram* out);

kiln::v1::DataType ToProto(device::DeviceDType d);
kiln::v1::MathFidelity ToProto(device::MathFidelity f);
kiln::v1::Arch ToProto(device::Arch a);

/// The precision flags of `kiln run`, as typed ("" = not given: the server's TT-NN default).
struct PrecisionFlags {
  std::string math_fidelity;                 ///< LoFi | HiFi2 | HiFi3 | HiFi4
  std::string weights_dtype, input_dtype, output_dtype;  ///< float32 | bfloat16 | bfloat8_b | bfloat4_b
  std::string arch;                          ///< wormhole_b0 | blackhole
  std::string fp32_dest_acc_en, packer_l1_acc, math_approx_mode;  ///< true | false (also 1/0, on/off)
  int act_block_w = 0;                       ///< Kiln's in0_block_w override in tiles, 0 = TT-NN's choice
  /// Conv2dConfig knobs ("" / 0 = TT-NN's default).
  std::string shard_layout;                  ///< auto | height | block | width
  int act_block_w_div = 0;
  int act_block_h_override = 0;
  std::string full_inner_dim, enable_activation_reuse, bfp8_pack_precise, host_add;  ///< true | false
  std::string input_layout;                  ///< row_major | tile
  std::string board;                         ///< n150 | n300 | p100 | p150
  std::string depthwise_program;             ///< recorded | pool_multiply | dense_conv
  std::string fp32_partial_reload;           ///< recorded | tf32 | lossless
  std::string fused_hardswish;               ///< recorded | dropped | applied
};
/// Only the given flags are set in the message. INVALID_ARGUMENT naming the flag and its value.
Result<kiln::v1::Precision> ParsePrecisionFlags(const PrecisionFlags& flags);

/// `kiln run --layer-precision LAYER:KEY=VALUE` (repeatable) as RunConvLayersRequest.layer_precision:
/// KEY is a precision flag's name in snake case (math_fidelity, weights_dtype, input_dtype,
/// output_dtype, fp32_dest_acc_en, packer_l1_acc, math_approx_mode, act_block_w, shard_layout,
/// act_block_w_div, act_block_h_override, full_inner_dim, enable_activation_reuse, input_layout,
/// bfp8_pack_precise, host_add, depthwise_program, fp32_partial_reload, fused_hardswish — the
/// whole-run arch, board and concat_k_split excepted), VALUE as that flag takes it. LAYER is
/// everything before the last ':' ahead of '=' (ONNX names may hold ':'). INVALID_ARGUMENT naming
/// the spec for a malformed one, an unknown KEY or a bad VALUE.
Result<google::protobuf::Map<std::string, kiln::v1::Precision>> ParseLayerPrecisionFlags(
    const std::vector<std::string>& specs);

}  // namespace kiln::api
