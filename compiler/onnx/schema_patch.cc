#include "compiler/onnx/schema_patch.h"

#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "onnx/defs/schema.h"
#include "onnx/defs/shape_inference.h"

namespace kiln::onnx_fe::internal {
namespace {

using onnx::InferenceContext;
using onnx::OpSchema;

std::vector<int64_t> Ints(InferenceContext& ctx, const char* name) {
  const auto* a = ctx.getAttribute(name);
  if (a == nullptr) return {};
  return {a->ints().begin(), a->ints().end()};
}

// Recomputes the spatial output dims of a pool with ceil_mode=1 by the corrected rule, mirroring
// onnx 1.12's convPoolShapeInference (onnx/defs/nn/defs.cc) for everything else.
void FixCeilModePool(InferenceContext& ctx, bool use_dilation) {
  const auto* ceil_attr = ctx.getAttribute("ceil_mode");
  if (ceil_attr == nullptr || ceil_attr->i() != 1) return;
  if (ctx.getNumInputs() < 1 || ctx.getNumOutputs() < 1) return;
  const auto* in_type = ctx.getInputType(0);
  if (in_type == nullptr || !in_type->tensor_type().has_shape()) return;
  const auto& in_shape = in_type->tensor_type().shape();
  auto* out_type = ctx.getOutputType(0);
  if (out_type == nullptr || !out_type->tensor_type().has_shape()) return;
  auto* out_shape = out_type->mutable_tensor_type()->mutable_shape();
  if (in_shape.dim_size() < 2 || out_shape->dim_size() != in_shape.dim_size()) return;
  const size_t n = static_cast<size_t>(in_shape.dim_size() - 2);

  std::vector<int64_t> kernel = Ints(ctx, "kernel_shape");
  if (kernel.size() != n) return;
  std::vector<int64_t> strides = Ints(ctx, "strides");
  if (strides.empty()) strides.assign(n, 1);
  std::vector<int64_t> dilations = use_dilation ? Ints(ctx, "dilations") : std::vector<int64_t>{};
  if (dilations.empty()) dilations.assign(n, 1);
  if (strides.size() != n || dilations.size() != n) return;
  for (size_t i = 0; i < n; ++i) {
    if (strides[i] <= 0 || dilations[i] <= 0 || kernel[i] <= 0) return;
  }
  std::vector<int64_t> pads = Ints(ctx, "pads");
  if (pads.empty()) {
    pads.assign(2 * n, 0);
    const auto* auto_pad = ctx.getAttribute("auto_pad");
    if (auto_pad != nullptr && (auto_pad->s() == "SAME_UPPER" || auto_pad->s() == "SAME_LOWER")) {
      for (size_t i = 0; i < n; ++i) {
        const int64_t eff_k = (kernel[i] - 1) * dilations[i] + 1;
        int64_t residual = 0;
        if (strides[i] > 1) {
          if (!in_shape.dim(2 + i).has_dim_value()) continue;
          residual = in_shape.dim(2 + i).dim_value() % strides[i];
        }
        int64_t total = residual == 0 ? eff_k - strides[i] : eff_k - residual;
        if (total < 0) total = 0;
        const int64_t small = total >> 1, big = total - small;
        pads[i] = auto_pad->s() == "SAME_UPPER" ? small : big;
        pads[i + n] = auto_pad->s() == "SAME_UPPER" ? big : small;
      }
    }
  }
  if (pads.size() != 2 * n) return;
  for (size_t i = 0; i < n; ++i) {
    const auto& d = in_shape.dim(static_cast<int>(2 + i));
    if (!d.has_dim_value()) continue;
    const long long out =
        PooledSize(d.dim_value(), pads[i], pads[i + n], kernel[i], strides[i], dilations[i], /*ceil_mode=*/true);
    out_shape->mutable_dim(static_cast<int>(2 + i))->set_dim_value(out);
  }
  if (ctx.getNumOutputs() > 1) {
    auto* second = ctx.getOutputType(1);
    if (second != nullptr) *second->mutable_tensor_type()->mutable_shape() = *out_shape;
  }
}

void RequireTypedInputs(const OpSchema& schema, InferenceContext& ctx) {
  const auto& formals = schema.inputs();
  for (size_t i = 0; i < ctx.getNumInputs(); ++i) {
    OpSchema::FormalParameterOption opt = OpSchema::Single;
    if (i < formals.size()) {
      opt = formals[i].GetOption();
    } else if (!formals.empty()) {
      opt = formals.back().GetOption();
    }
    if (opt == OpSchema::Optional) continue;  // null is how an absent optional input looks
    const auto* t = ctx.getInputType(i);
    if (t == nullptr || t->value_case() == onnx::TypeProto::VALUE_NOT_SET) {
      fail_type_inference("input ", i, " has no known type (it is produced by a node whose type "
                                "inference failed, or it is an untyped value)");
    }
  }
}

// onnx 1.12's convPoolShapeInference / convTransposeShapeInference (onnx/defs/nn/defs.cc) index
// dilations/strides/pads by the kernel rank taken from W without checking it against the input
// rank (an out-of-bounds read, found by fuzzing). Check the ranks before they run.
void CheckConvPoolRanks(InferenceContext& ctx, int w_index) {
  const auto* x = ctx.getNumInputs() > 0 ? ctx.getInputType(0) : nullptr;
  if (x == nullptr || !x->tensor_type().has_shape()) return;
  const int rank = x->tensor_type().shape().dim_size();
  if (rank < 3) {
    fail_shape_inference("input X has rank ", rank, "; it must be at least 3 (N x C x D1 ...)");
  }
  const size_t spatial = static_cast<size_t>(rank - 2);
  if (w_index >= 0 && ctx.getNumInputs() > static_cast<size_t>(w_index)) {
    const auto* w = ctx.getInputType(static_cast<size_t>(w_index));
    if (w != nullptr && w->tensor_type().has_shape() && w->tensor_type().shape().dim_size() != rank) {
      fail_shape_inference("weight W has rank ", w->tensor_type().shape().dim_size(), " but input X has rank ", rank);
    }
  }
  for (const char* name : {"kernel_shape", "strides", "dilations"}) {
    const auto* a = ctx.getAttribute(name);
    if (a != nullptr && static_cast<size_t>(a->ints_size()) != spatial) {
      fail_shape_inference("attribute ", name, " has ", a->ints_size(), " values; input X has ", spatial,
                           " spatial dims");
    }
  }
  const auto* pads = ctx.getAttribute("pads");
  if (pads != nullptr && static_cast<size_t>(pads->ints_size()) != 2 * spatial) {
    fail_shape_inference("attribute pads has ", pads->ints_size(), " values; expected ", 2 * spatial);
  }
}

// Input index of W for ops that go through the conv/pool inference helpers; -1: no W.
int ConvPoolWeightIndex(const std::string& domain, const std::string& name) {
  if (!domain.empty()) return -2;
  if (name == "Conv" || name == "ConvTranspose" || name == "ConvInteger") return 1;
  if (name == "QLinearConv") return 3;
  if (name == "MaxPool" || name == "AveragePool" || name == "LpPool" || name == "MaxUnpool") return -1;
  return -2;
}

}  // namespace

long long PooledSize(long long input, long long pad_begin, long long pad_end, long long kernel, long long stride,
                     long long dilation, bool ceil_mode) {
  const long long eff_in = input + pad_begin + pad_end;
  const long long eff_k = (kernel - 1) * dilation + 1;
  long long out = (eff_in - eff_k + (ceil_mode ? stride - 1 : 0)) / stride + 1;
  if (ceil_mode && (out - 1) * stride >= input + pad_begin) --out;
  return out;
}

void InstallSchemaPatches() {
  static std::once_flag once;
  std::call_once(once, [] {
    std::set<std::tuple<std::string, std::string, int>> keys;
    for (const OpSchema& s : onnx::OpSchemaRegistry::get_all_schemas_with_history()) {
      keys.emplace(s.Name(), s.domain(), s.SinceVersion());
    }
    for (const auto& [name, domain, version] : keys) {
      const OpSchema* found = onnx::OpSchemaRegistry::Schema(name, version, domain);
      if (found == nullptr || found->SinceVersion() != version) continue;
      // The registry owns non-const OpSchema objects and only hands out const pointers; the
      // patch runs once, before any inference, under call_once.
      auto* schema = const_cast<OpSchema*>(found);
      const bool is_pool = domain.empty() && (name == "MaxPool" || name == "AveragePool");
      const bool use_dilation = name == "MaxPool";
      const int w_index = ConvPoolWeightIndex(domain, name);
      if (schema->has_type_and_shape_inference_function()) {
        auto original = schema->GetTypeAndShapeInferenceFunction();
        schema->TypeAndShapeInferenceFunction([schema, original, is_pool, use_dilation, w_index](InferenceContext& ctx) {
          RequireTypedInputs(*schema, ctx);
          if (w_index != -2) CheckConvPoolRanks(ctx, w_index);
          original(ctx);
          if (is_pool) FixCeilModePool(ctx, use_dilation);
        });
      } else if (!schema->HasFunction()) {
        schema->TypeAndShapeInferenceFunction([name = name](InferenceContext&) {
          fail_type_inference("onnx 1.12 has no type inference for operator ", name,
                                    ", so the types after it cannot be known");
        });
      }
    }
  });
}

}  // namespace kiln::onnx_fe::internal
