// Pad host kernel (onnx/docs/Operators.md, Pad-2 / Pad-11 / Pad-13), every element type, element
// copies (runtime/host_kernels/movement.h).
// * Pad-2: `pads` and the float `value` attributes (value converted to the element type with
//   ONNX Cast semantics, device::Tensor::CastTo). Pad-11+: `pads` input (int64) and the optional
//   `constant_value` input, a scalar of the data's element type (absent or empty: 0).
// * pads = [x1_begin, x2_begin, ..., x1_end, x2_end, ...]. Negative pads remove elements; they
//   apply first, and reflect / edge then read the cropped tensor — as onnxruntime does
//   (onnxruntime/core/providers/cpu/tensor/padbase.h, SeparateNegativeToSlices: the negative
//   pads become a slice taken before padding); the operator text does not order the two.
// * Modes: constant; edge (the nearest border element); reflect (mirror without repeating the
//   border, periodic beyond one reflection as np.pad 'reflect'; a dim of 1 repeats its element).
//   edge / reflect padding of a dim that is empty after cropping is INVALID_ARGUMENT (np.pad
//   raises too).
// Memory: the padded output, 8-byte elements — exact before opset 11; from 11 on the pads are
// input VALUES, so the estimate is the input's size (its unpadded case) — plus the per-dim index
// tables (8 bytes per output index of each dim).
#include <algorithm>
#include <limits>

#include "runtime/host_kernels/movement.h"

namespace kiln::runtime::host_kernels {

namespace {

namespace fe = onnx_fe;
using device::DataType;

// The fill element: Pad-11's constant_value input or Pad-2's `value` attribute, as x's type.
Result<Tensor> FillValue(const fe::Node& n, const Tensor& x, const HostKernelInputs& in) {
  if (n.opset_version >= 11) {
    const Tensor* v = In(in, 2);
    if (v == nullptr || v->num_elements() == 0) return Make({1}, x.dtype());
    if (v->dtype() != x.dtype()) {
      return Err(n, std::string("constant_value is ") + device::DataTypeName(v->dtype()) + ", the data " +
                        device::DataTypeName(x.dtype()));
    }
    if (v->num_elements() != 1) return Err(n, "constant_value must be a scalar");
    return *v;
  }
  auto value = n.GetFloat("value", 0.0f);
  if (!value.ok()) return value.status();
  const float f = *value;
  auto t = Tensor::FromFloats({1}, std::span<const float>(&f, 1));
  if (!t.ok()) return t.status();
  return t->CastTo(x.dtype());
}

Out Pad(const fe::Node& n, const Tensor& x, const HostKernelInputs& in, const HostKernelContext& ctx) {
  std::vector<int64_t> pads;
  if (n.opset_version >= 11) {
    const Tensor* p = In(in, 1);
    if (p == nullptr) return Err(n, "pads input missing");
    if (p->dtype() != DataType::kInt64) return Err(n, std::string("pads must be int64, got ") + device::DataTypeName(p->dtype()));
    pads = IntsOf(*p);
  } else {
    auto p = n.GetInts("pads");
    if (!p.ok()) return Err(n, p.status().message());
    pads = *p;
  }
  auto mode = n.GetString("mode", "constant");
  if (!mode.ok()) return mode.status();
  const bool constant = *mode == "constant", edge = *mode == "edge", reflect = *mode == "reflect";
  if (!constant && !edge && !reflect) return Err(n, "unsupported mode '" + *mode + "'");
  const int r = x.rank();
  if (static_cast<int>(pads.size()) != 2 * r) {
    return Err(n, "pads has " + std::to_string(pads.size()) + " values for an input of rank " + std::to_string(r));
  }
  auto fill = FillValue(n, x, in);
  if (!fill.ok()) return fill.status();
  const std::vector<int64_t> xs = RowMajorStrides(x.shape());
  // Per dim: crop first (negative pads), then pad the kept range [lo[d], lo[d] + len[d]).
  Shape out(r), lo(r), len(r), before(r);
  for (int d = 0; d < r; ++d) {
    const int64_t dim = x.dim(d), pb = pads[d], pe = pads[d + r];
    lo[d] = pb < 0 ? -pb : 0;
    const int64_t hi = pe < 0 ? -pe : 0;
    before[d] = std::max<int64_t>(pb, 0);
    const int64_t after = std::max<int64_t>(pe, 0);
    if (pb == std::numeric_limits<int64_t>::min() || pe == std::numeric_limits<int64_t>::min() || lo[d] > dim ||
        hi > dim - lo[d] || __builtin_add_overflow(dim - lo[d] - hi, before[d], &out[d]) ||
        __builtin_add_overflow(out[d], after, &out[d])) {
      return Err(n, "pads " + std::to_string(pb) + ", " + std::to_string(pe) + " invalid for a dim of " +
                        std::to_string(dim));
    }
    len[d] = dim - lo[d] - hi;
    if (!constant && len[d] == 0 && out[d] > 0) return Err(n, "cannot " + *mode + "-pad an empty dim");
  }
  auto y = Make(out, x.dtype());  // before the tables: an oversized output fails here
  if (!y.ok()) return y.status();
  std::vector<DimMap> maps(r);
  for (int d = 0; d < r; ++d) {
    std::vector<int64_t>& t = maps[d].table;
    t.resize(static_cast<size_t>(out[d]));
    for (int64_t o = 0; o < out[d]; ++o) {
      int64_t k = o - before[d];  // index into the kept range
      if (k < 0 || k >= len[d]) {
        if (constant) {
          t[o] = kFill;
          continue;
        }
        if (edge || len[d] == 1) {
          k = std::clamp<int64_t>(k, 0, len[d] - 1);
        } else {
          const int64_t period = 2 * (len[d] - 1);
          k = ((k % period) + period) % period;
          if (k >= len[d]) k = period - k;
        }
      }
      t[o] = (lo[d] + k) * xs[d];
    }
  }
  KILN_RETURN_IF_ERROR(MoveElements(x, 0, std::move(maps), fill->raw().data(), *y, ctx.cancel));
  return Outputs(std::move(*y));
}

int64_t PadBytes(const fe::Node& n, const std::vector<Shape>& s) {
  if (s.empty()) return 0;
  Shape out = s[0];
  if (n.opset_version < 11) {
    auto pads = n.GetInts("pads", {});
    if (pads.ok() && pads->size() == 2 * out.size()) {
      for (size_t d = 0; d < out.size(); ++d) out[d] += (*pads)[d] + (*pads)[d + out.size()];
    }
  }
  int64_t tables = 0;
  for (int64_t d : out) tables = AddBytes(tables, TensorBytes({d}, 8));
  return AddBytes(AnyTypeBytes(out), tables);
}

}  // namespace

void RegisterHostKernels_pad(HostKernelRegistry& r) {
  r.Add({{"Pad"}, PadBytes,
         [](const fe::Node& n, const HostKernelInputs& in, const HostKernelContext& ctx) -> Out {
           auto x = Required(n, in, 0, "data input");
           if (!x.ok()) return x.status();
           return Pad(n, **x, in, ctx);
         },
         AllDTypes(KernelPath::kTyped)});
}

}  // namespace kiln::runtime::host_kernels
