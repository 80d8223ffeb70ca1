#include "api/convert.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>

namespace kiln::api {

Status CheckEnumValues(const google::protobuf::Message& message, const std::string& prefix) {
  namespace pb = google::protobuf;
  const pb::Descriptor* d = message.GetDescriptor();
  const pb::Reflection* r = message.GetReflection();
  auto bad = [](const std::string& path, const pb::EnumDescriptor* e, int v) {
    return InvalidArgument(path + ": " + std::to_string(v) + " is not a " + e->full_name() + " value");
  };
  for (int i = 0; i < d->field_count(); ++i) {
    const pb::FieldDescriptor* f = d->field(i);
    const std::string path = prefix.empty() ? f->name() : prefix + "." + f->name();
    if (f->type() == pb::FieldDescriptor::TYPE_ENUM) {
      const pb::EnumDescriptor* e = f->enum_type();
      if (f->is_repeated()) {
        for (int j = 0; j < r->FieldSize(message, f); ++j) {
          const int v = r->GetRepeatedEnumValue(message, f, j);
          if (e->FindValueByNumber(v) == nullptr) return bad(path + "[" + std::to_string(j) + "]", e, v);
        }
      } else {
        const int v = r->GetEnumValue(message, f);
        if (e->FindValueByNumber(v) == nullptr) return bad(path, e, v);
      }
    } else if (f->type() == pb::FieldDescriptor::TYPE_MESSAGE) {
      if (f->is_map()) {  // map<string, Message | enum> (layer_precision): path "field[key]"
        const pb::FieldDescriptor* kf = f->message_type()->map_key();
        const pb::FieldDescriptor* vf = f->message_type()->map_value();
        for (int j = 0; j < r->FieldSize(message, f); ++j) {
          const pb::Message& entry = r->GetRepeatedMessage(message, f, j);
          const pb::Reflection* er = entry.GetReflection();
          const std::string key = kf->type() == pb::FieldDescriptor::TYPE_STRING ? er->GetString(entry, kf)
                                                                                 : std::to_string(j);
          const std::string epath = path + "[" + key + "]";
          if (vf->type() == pb::FieldDescriptor::TYPE_MESSAGE) {
            KILN_RETURN_IF_ERROR(CheckEnumValues(er->GetMessage(entry, vf), epath));
          } else if (vf->type() == pb::FieldDescriptor::TYPE_ENUM) {
            const int v = er->GetEnumValue(entry, vf);
            if (vf->enum_type()->FindValueByNumber(v) == nullptr) return bad(epath, vf->enum_type(), v);
          }
        }
      } else if (f->is_repeated()) {
        for (int j = 0; j < r->FieldSize(message, f); ++j) {
          KILN_RETURN_IF_ERROR(CheckEnumValues(r->GetRepeatedMessage(message, f, j), path + "[" + std::to_string(j) + "]"));
        }
      } else if (r->HasField(message, f)) {
        KILN_RETURN_IF_ERROR(CheckEnumValues(r->GetMessage(message, f), path));
      }
    }
  }
  return Status::Ok();
}

Result<device::Tensor> FromProto(const kiln::v1::Tensor& t) {
  auto dtype = device::ParseDataType(t.datatype().empty() ? "FP32" : t.datatype());
  if (!dtype.ok()) return dtype.status().WithContext("input tensor '" + t.name() + "'");
  std::vector<int64_t> shape(t.shape().begin(), t.shape().end());
  auto count = device::ShapeElementCount(shape);
  if (!count.ok()) return count.status().WithContext("input tensor '" + t.name() + "'");
  // Checked before the multiply: [2^62] FP32 would wrap to 0 bytes and match an empty raw_data.
  const uint64_t esize = device::DataTypeSize(*dtype);
  if (static_cast<uint64_t>(*count) > device::kMaxTensorBytes / esize) {
    return InvalidArgument("input tensor '" + t.name() + "' (" + t.datatype() + " " + device::ShapeToString(shape) +
                           ") is over the " + std::to_string(device::kMaxTensorBytes) + "-byte tensor limit");
  }
  uint64_t expected = static_cast<uint64_t>(*count) * esize;
  if (t.raw_data().size() != expected) {
    return InvalidArgument("input tensor '" + t.name() + "' (" + t.datatype() + " " +
                           device::ShapeToString(shape) + ") needs " + std::to_string(expected) +
                           " bytes of raw_data, got " + std::to_string(t.raw_data().size()));
  }
  auto tensor = device::Tensor::FromBytes(
      shape, *dtype,
      std::span<const std::byte>(reinterpret_cast<const std::byte*>(t.raw_data().data()),
                                 t.raw_data().size()));
  if (!tensor.ok()) return tensor.status().WithContext("input tensor '" + t.name() + "'");
  if (*dtype == device::DataType::kBool) {
    for (std::byte b : tensor->raw()) {
      if (b != std::byte{0} && b != std::byte{1}) {
        return InvalidArgument("input tensor '" + t.name() + "' (BOOL) holds a byte other than 0 or 1");
      }
    }
  }
  return tensor;  // converted to the model's element type by the runtime (runtime/inputs.h)
}

void ToProto(const std::string& name, const device::Tensor& t, kiln::v1::Tensor* out) {
  out->set_name(name);
  out->set_datatype(device::KServeDataTypeName(t.dtype()));
  for (int64_t d : t.shape()) out->add_shape(d);
  auto raw = t.raw();
  out->set_raw_data(reinterpret_cast<const char*>(raw.data()), raw.size());
}

namespace {

Result<device::DeviceDType> DType(kiln::v1::DataType d, device::DeviceDType fallback) {
  switch (d) {
    case kiln::v1::DATA_TYPE_UNSPECIFIED: return fallback;
    case kiln::v1::FLOAT32: return device::DeviceDType::kFloat32;
    case kiln::v1::BFLOAT16: return device::DeviceDType::kBFloat16;
    case kiln::v1::BFLOAT8_B: return device::DeviceDType::kBFloat8B;
    case kiln::v1::BFLOAT4_B: return device::DeviceDType::kBFloat4B;
    default: return InvalidArgument("unknown DataType " + std::to_string(static_cast<int>(d)));
  }
}

}  // namespace

kiln::v1::DataType ToProto(device::DeviceDType d) {
  switch (d) {
    case device::DeviceDType::kFloat32: return kiln::v1::FLOAT32;
    case device::DeviceDType::kBFloat16: return kiln::v1::BFLOAT16;
    case device::DeviceDType::kBFloat8B: return kiln::v1::BFLOAT8_B;
    case device::DeviceDType::kBFloat4B: return kiln::v1::BFLOAT4_B;
  }
  return kiln::v1::DATA_TYPE_UNSPECIFIED;
}

kiln::v1::MathFidelity ToProto(device::MathFidelity f) {
  switch (f) {
    case device::MathFidelity::kLoFi: return kiln::v1::LOFI;
    case device::MathFidelity::kHiFi2: return kiln::v1::HIFI2;
    case device::MathFidelity::kHiFi3: return kiln::v1::HIFI3;
    case device::MathFidelity::kHiFi4: return kiln::v1::HIFI4;
  }
  return kiln::v1::MATH_FIDELITY_UNSPECIFIED;
}

kiln::v1::Arch ToProto(device::Arch a) {
  return a == device::Arch::kBlackhole ? kiln::v1::BLACKHOLE : kiln::v1::WORMHOLE_B0;
}

Result<device::PrecisionConfig> FromProto(const kiln::v1::Precision& p) {
  device::PrecisionConfig c = device::PrecisionConfig::TtnnConvDefaults();
  switch (p.math_fidelity()) {
    case kiln::v1::MATH_FIDELITY_UNSPECIFIED: break;
    case kiln::v1::LOFI: c.math_fidelity = device::MathFidelity::kLoFi; break;
    case kiln::v1::HIFI2: c.math_fidelity = device::MathFidelity::kHiFi2; break;
    case kiln::v1::HIFI3: c.math_fidelity = device::MathFidelity::kHiFi3; break;
    case kiln::v1::HIFI4: c.math_fidelity = device::MathFidelity::kHiFi4; break;
    default: return InvalidArgument("unknown math_fidelity");
  }
  auto in = DType(p.input_dtype(), c.input_dtype);
  if (!in.ok()) return in.status().WithContext("input_dtype");
  c.input_dtype = *in;
  // Unset weights / output dtypes stay unset: TT-NN's defaults depend on the tensors (precision.h).
  if (p.weights_dtype() != kiln::v1::DATA_TYPE_UNSPECIFIED) {
    auto w = DType(p.weights_dtype(), device::DeviceDType::kFloat32);
    if (!w.ok()) return w.status().WithContext("weights_dtype");
    c.weights_dtype = *w;
  }
  if (p.output_dtype() != kiln::v1::DATA_TYPE_UNSPECIFIED) {
    auto out = DType(p.output_dtype(), device::DeviceDType::kFloat32);
    if (!out.ok()) return out.status().WithContext("output_dtype");
    c.output_dtype = *out;
  }
  if (p.has_fp32_dest_acc_en()) c.fp32_dest_acc_en = p.fp32_dest_acc_en();
  if (p.has_packer_l1_acc()) c.packer_l1_acc = p.packer_l1_acc();
  if (p.has_math_approx_mode()) c.math_approx_mode = p.math_approx_mode();
  if (p.arch() == kiln::v1::BLACKHOLE) c.arch = device::Arch::kBlackhole;
  c.act_block_w = p.act_block_w();
  switch (p.shard_layout()) {
    case kiln::v1::SHARD_LAYOUT_AUTO: c.shard_layout = device::ShardLayout::kAuto; break;
    case kiln::v1::HEIGHT_SHARDED: c.shard_layout = device::ShardLayout::kHeight; break;
    case kiln::v1::BLOCK_SHARDED: c.shard_layout = device::ShardLayout::kBlock; break;
    case kiln::v1::WIDTH_SHARDED: c.shard_layout = device::ShardLayout::kWidth; break;
    default: return InvalidArgument("unknown shard_layout");
  }
  c.act_block_w_div = std::max(1, p.act_block_w_div());
  c.act_block_h_override = p.act_block_h_override();
  c.full_inner_dim = p.full_inner_dim();
  c.enable_activation_reuse = p.enable_activation_reuse();
  c.input_layout = p.input_layout() == kiln::v1::TILE ? device::InputLayout::kTile : device::InputLayout::kRowMajor;
  c.bfp8_pack_precise = p.bfp8_pack_precise();
  switch (p.board()) {
    case kiln::v1::BOARD_UNSPECIFIED: c.board = device::Board::kDefault; break;
    case kiln::v1::N150: c.board = device::Board::kN150; break;
    case kiln::v1::N300: c.board = device::Board::kN300; break;
    case kiln::v1::P100: c.board = device::Board::kP100; break;
    case kiln::v1::P150: c.board = device::Board::kP150; break;
    default: return InvalidArgument("unknown board");
  }
  c.host_add = p.host_add();
  switch (p.depthwise_program()) {
    case kiln::v1::DEPTHWISE_POOL_MULTIPLY: c.depthwise_program = device::DepthwiseProgram::kPoolMultiply; break;
    case kiln::v1::DEPTHWISE_DENSE_CONV: c.depthwise_program = device::DepthwiseProgram::kDenseConv; break;
    default: c.depthwise_program = device::DepthwiseProgram::kRecorded; break;
  }
  switch (p.fp32_partial_reload()) {
    case kiln::v1::RELOAD_TF32: c.fp32_partial_reload = device::PartialReload::kTf32; break;
    case kiln::v1::RELOAD_LOSSLESS: c.fp32_partial_reload = device::PartialReload::kLossless; break;
    default: c.fp32_partial_reload = device::PartialReload::kRecorded; break;
  }
  switch (p.fused_hardswish()) {
    case kiln::v1::HARDSWISH_DROPPED: c.fused_hardswish = device::FusedHardswish::kDropped; break;
    case kiln::v1::HARDSWISH_APPLIED: c.fused_hardswish = device::FusedHardswish::kApplied; break;
    default: c.fused_hardswish = device::FusedHardswish::kRecorded; break;
  }
  KILN_RETURN_IF_ERROR(c.Validate());
  return c;
}

// The device enums and the proto enums share their numbering (proto/kiln/v1/device.proto), so the
// conversions below are casts; these pin it.
static_assert(static_cast<int>(device::ShardLayout::kWidth) == kiln::v1::WIDTH_SHARDED);
static_assert(static_cast<int>(device::ShardLayout::kAuto) == kiln::v1::SHARD_LAYOUT_AUTO);
static_assert(static_cast<int>(device::Board::kP150) == kiln::v1::P150);
static_assert(static_cast<int>(device::DepthwiseProgram::kDenseConv) == kiln::v1::DEPTHWISE_DENSE_CONV);
static_assert(static_cast<int>(device::PartialReload::kLossless) == kiln::v1::RELOAD_LOSSLESS);
static_assert(static_cast<int>(device::FusedHardswish::kApplied) == kiln::v1::HARDSWISH_APPLIED);

void ToProto(const device::ProgramReport& p, kiln::v1::ConvProgram* out) {
  out->set_path(p.path);
  out->set_kernel_stride_folded(p.kernel_stride_folded);
  out->set_shard_layout(static_cast<kiln::v1::ShardLayout>(static_cast<int>(p.shard_layout)));
  out->set_shard_layout_auto(p.shard_layout_auto);
  out->set_board(static_cast<kiln::v1::Board>(static_cast<int>(p.board)));
  out->set_grid_x(p.grid_x);
  out->set_grid_y(p.grid_y);
  out->set_num_cores(p.num_cores);
  out->set_num_cores_nhw(p.num_cores_nhw);
  out->set_num_cores_c(p.num_cores_c);
  out->set_cin_align(p.cin_align);
  out->set_cin_padded(p.cin_padded);
  out->set_k_blocks(p.k_blocks);
  out->set_act_block_h_ntiles(p.act_block_h_ntiles);
  out->set_act_block_w_ntiles(p.act_block_w_ntiles);
  out->set_l1_acc_effective(p.l1_acc_effective);
  out->set_partials_dtype(ToProto(p.partials_dtype));
  out->set_pack_src_dtype(ToProto(p.pack_src_dtype));
  out->set_act_dtype(ToProto(p.act_dtype));
  out->set_l1_bytes_per_core(p.l1_bytes_per_core);
  for (const auto& n : p.notes) out->add_notes(n);
}

kiln::v1::Precision MergePrecision(const kiln::v1::Precision& base, const kiln::v1::Precision& layer) {
  kiln::v1::Precision merged = base;
  merged.MergeFrom(layer);  // proto3: set (non-zero / present) fields of `layer` replace base's
  return merged;
}

void ToProto(const device::PrecisionConfig& c, kiln::v1::Precision* out) {
  out->set_math_fidelity(ToProto(c.math_fidelity));
  out->set_weights_dtype(ToProto(c.EffectiveWeightsDType()));
  out->set_input_dtype(ToProto(c.input_dtype));
  out->set_output_dtype(ToProto(c.EffectiveOutputDType()));
  out->set_fp32_dest_acc_en(c.EffectiveFp32DestAcc());
  out->set_packer_l1_acc(c.packer_l1_acc);
  out->set_math_approx_mode(c.math_approx_mode);
  out->set_arch(ToProto(c.arch));
  out->set_act_block_w(c.act_block_w);
  out->set_shard_layout(static_cast<kiln::v1::ShardLayout>(static_cast<int>(c.shard_layout)));
  out->set_act_block_w_div(c.act_block_w_div);
  out->set_act_block_h_override(c.act_block_h_override);
  out->set_full_inner_dim(c.full_inner_dim);
  out->set_enable_activation_reuse(c.enable_activation_reuse);
  out->set_input_layout(c.input_layout == device::InputLayout::kTile ? kiln::v1::TILE : kiln::v1::ROW_MAJOR);
  out->set_bfp8_pack_precise(c.bfp8_pack_precise);
  out->set_board(static_cast<kiln::v1::Board>(static_cast<int>(c.board)));
  out->set_host_add(c.host_add);
  out->set_depthwise_program(static_cast<kiln::v1::DepthwiseProgram>(static_cast<int>(c.depthwise_program)));
  out->set_fp32_partial_reload(static_cast<kiln::v1::PartialReload>(static_cast<int>(c.fp32_partial_reload)));
  out->set_fused_hardswish(static_cast<kiln::v1::FusedHardswish>(static_cast<int>(c.fused_hardswish)));
}

namespace {

Result<bool> ParseBool(const std::string& flag, const std::string& v) {
  if (v == "true" || v == "1" || v == "on") return true;
  if (v == "false" || v == "0" || v == "off") return false;
  return InvalidArgument(flag + " expects true or false, got '" + v + "'");
}

Result<kiln::v1::DataType> DTypeFlag(const std::string& flag, const std::string& v) {
  if (v.empty()) return kiln::v1::DATA_TYPE_UNSPECIFIED;
  auto d = device::ParseDeviceDType(v);
  if (!d.ok()) return d.status().WithContext(flag);
  return ToProto(*d);
}

}  // namespace

Result<kiln::v1::Precision> ParsePrecisionFlags(const PrecisionFlags& f) {
  kiln::v1::Precision p;
  if (!f.math_fidelity.empty()) {
    auto v = device::ParseMathFidelity(f.math_fidelity);
    if (!v.ok()) return v.status().WithContext("--math-fidelity");
    p.set_math_fidelity(ToProto(*v));
  }
  auto w = DTypeFlag("--weights-dtype", f.weights_dtype);
  auto i = DTypeFlag("--input-dtype", f.input_dtype);
  auto o = DTypeFlag("--output-dtype", f.output_dtype);
  for (const auto* r : {&w, &i, &o}) {
    if (!r->ok()) return r->status();
  }
  p.set_weights_dtype(*w);
  p.set_input_dtype(*i);
  p.set_output_dtype(*o);
  if (!f.arch.empty()) {
    auto arch = device::ParseArch(f.arch);
    if (!arch.ok()) return arch.status().WithContext("--arch");
    p.set_arch(ToProto(*arch));
  }
  struct BoolFlag {
    const char* flag;
    const std::string& value;
    void (kiln::v1::Precision::*set)(bool);
  };
  for (const BoolFlag& b : {BoolFlag{"--fp32-dest-acc-en", f.fp32_dest_acc_en, &kiln::v1::Precision::set_fp32_dest_acc_en},
                            BoolFlag{"--packer-l1-acc", f.packer_l1_acc, &kiln::v1::Precision::set_packer_l1_acc},
                            BoolFlag{"--math-approx-mode", f.math_approx_mode, &kiln::v1::Precision::set_math_approx_mode},
                            BoolFlag{"--full-inner-dim", f.full_inner_dim, &kiln::v1::Precision::set_full_inner_dim},
                            BoolFlag{"--enable-activation-reuse", f.enable_activation_reuse,
                                     &kiln::v1::Precision::set_enable_activation_reuse},
                            BoolFlag{"--bfp8-pack-precise", f.bfp8_pack_precise, &kiln::v1::Precision::set_bfp8_pack_precise},
                            BoolFlag{"--host-add", f.host_add, &kiln::v1::Precision::set_host_add}}) {
    if (b.value.empty()) continue;
    auto v = ParseBool(b.flag, b.value);
    if (!v.ok()) return v.status();
    (p.*b.set)(*v);
  }
  p.set_act_block_w(f.act_block_w);
  p.set_act_block_w_div(f.act_block_w_div);
  p.set_act_block_h_override(f.act_block_h_override);
  if (!f.shard_layout.empty()) {
    auto v = device::ParseShardLayout(f.shard_layout);
    if (!v.ok()) return v.status().WithContext("--shard-layout");
    p.set_shard_layout(static_cast<kiln::v1::ShardLayout>(static_cast<int>(*v)));
  }
  if (!f.input_layout.empty()) {
    auto v = device::ParseInputLayout(f.input_layout);
    if (!v.ok()) return v.status().WithContext("--input-layout");
    p.set_input_layout(*v == device::InputLayout::kTile ? kiln::v1::TILE : kiln::v1::ROW_MAJOR);
  }
  if (!f.board.empty()) {
    auto v = device::ParseBoard(f.board);
    if (!v.ok()) return v.status().WithContext("--board");
    p.set_board(static_cast<kiln::v1::Board>(static_cast<int>(*v)));
  }
  // The tree-version switches: "recorded" or one of the two behaviours (proto enum order).
  struct Switch {
    const char* flag;
    const std::string& value;
    const char* first;
    const char* second;
    int* out;
  };
  int dw = 0, rl = 0, hs = 0;
  for (const Switch& s : {Switch{"--depthwise-program", f.depthwise_program, "pool_multiply", "dense_conv", &dw},
                          Switch{"--fp32-partial-reload", f.fp32_partial_reload, "tf32", "lossless", &rl},
                          Switch{"--fused-hardswish", f.fused_hardswish, "dropped", "applied", &hs}}) {
    if (s.value.empty() || s.value == "recorded") continue;
    if (s.value == s.first) {
      *s.out = 1;
    } else if (s.value == s.second) {
      *s.out = 2;
    } else {
      return InvalidArgument(std::string(s.flag) + " expects recorded, " + s.first + " or " + s.second + ", got '" +
                             s.value + "'");
    }
  }
  p.set_depthwise_program(static_cast<kiln::v1::DepthwiseProgram>(dw));
  p.set_fp32_partial_reload(static_cast<kiln::v1::PartialReload>(rl));
  p.set_fused_hardswish(static_cast<kiln::v1::FusedHardswish>(hs));
  return p;
}

Result<google::protobuf::Map<std::string, kiln::v1::Precision>> ParseLayerPrecisionFlags(
    const std::vector<std::string>& specs) {
  using F = PrecisionFlags;
  static const std::map<std::string, std::string F::*> kText = {
      {"math_fidelity", &F::math_fidelity},
      {"weights_dtype", &F::weights_dtype},
      {"input_dtype", &F::input_dtype},
      {"output_dtype", &F::output_dtype},
      {"fp32_dest_acc_en", &F::fp32_dest_acc_en},
      {"packer_l1_acc", &F::packer_l1_acc},
      {"math_approx_mode", &F::math_approx_mode},
      {"shard_layout", &F::shard_layout},
      {"full_inner_dim", &F::full_inner_dim},
      {"enable_activation_reuse", &F::enable_activation_reuse},
      {"bfp8_pack_precise", &F::bfp8_pack_precise},
      {"host_add", &F::host_add},
      {"input_layout", &F::input_layout},
      {"depthwise_program", &F::depthwise_program},
      {"fp32_partial_reload", &F::fp32_partial_reload},
      {"fused_hardswish", &F::fused_hardswish},
  };
  static const std::map<std::string, int F::*> kInt = {
      {"act_block_w", &F::act_block_w},
      {"act_block_w_div", &F::act_block_w_div},
      {"act_block_h_override", &F::act_block_h_override},
  };
  std::map<std::string, PrecisionFlags> layers;
  for (const std::string& spec : specs) {
    const std::string ctx = "--layer-precision " + spec;
    const size_t eq = spec.find('=');
    const size_t colon = eq == std::string::npos ? std::string::npos : spec.rfind(':', eq);
    if (eq == std::string::npos || colon == std::string::npos || colon == 0 || colon + 1 == eq) {
      return InvalidArgument(ctx + ": expected LAYER:KEY=VALUE (e.g. conv1:math_fidelity=LoFi)");
    }
    const std::string layer = spec.substr(0, colon), key = spec.substr(colon + 1, eq - colon - 1),
                      value = spec.substr(eq + 1);
    PrecisionFlags& f = layers[layer];
    if (auto t = kText.find(key); t != kText.end()) {
      f.*(t->second) = value;
    } else if (auto n = kInt.find(key); n != kInt.end()) {
      char* end = nullptr;
      const long v = std::strtol(value.c_str(), &end, 10);
      if (value.empty() || *end != '\0' || v < 0 || v > (1 << 20)) {
        return InvalidArgument(ctx + ": " + key + " expects a non-negative integer");
      }
      f.*(n->second) = static_cast<int>(v);
    } else {
      std::string names;
      for (const auto& [k, m] : kText) names += (names.empty() ? "" : ", ") + k;
      for (const auto& [k, m] : kInt) names += ", " + k;
      return InvalidArgument(ctx + ": unknown key '" + key + "' (one of " + names + ")");
    }
    // Checked per spec, so the error names the one that is wrong.
    PrecisionFlags one;
    if (auto t = kText.find(key); t != kText.end()) one.*(t->second) = value;
    if (auto p = ParsePrecisionFlags(one); !p.ok()) return p.status().WithContext(ctx);
  }
  google::protobuf::Map<std::string, kiln::v1::Precision> out;
  for (const auto& [layer, f] : layers) {
    auto p = ParsePrecisionFlags(f);
    if (!p.ok()) return p.status().WithContext("--layer-precision " + layer);
    out[layer] = std::move(p).value();
  }
  return out;
}

}  // namespace kiln::api
