// Slice and Split host kernels (onnx/docs/Operators.md), every element type (element copies,
// runtime/host_kernels/movement.h).
// * Slice-1: starts / ends / axes attributes; Slice-10+: inputs starts, ends, axes?, steps?
//   (int32 / int64). Axes default to 0..len-1 and may be negative; repeated axes and zero steps
//   are INVALID_ARGUMENT. Per axis of size n: negative start / end count from the end, then
//   step > 0 clamps start and end to [0, n], step < 0 clamps start to [0, n-1] and end to
//   [-1, n-1]; the length is max(0, ceil((end - start) / step)) (Slice-13's definition, which
//   Slice-1's "larger than n means n" is the positive-step case of).
// * Split-1: `split` attribute or input 1; Split-2..12: `split` attribute; Split-13: input 1.
//   Without it the axis splits into equal parts (the dim must divide by the output count).
// Memory: Slice, Split: the input's size (outputs never exceed it), 8-byte elements.
#include <algorithm>
#include <limits>

#include "runtime/host_kernels/movement.h"

namespace kiln::runtime::host_kernels {

namespace {

namespace fe = onnx_fe;

// Control values from input `i`, or absent (empty optional) when the input is omitted.
Result<std::vector<int64_t>> IntsInput(const fe::Node& n, const HostKernelInputs& in, size_t i, const char* what) {
  const Tensor* t = In(in, i);
  if (t == nullptr) return Err(n, std::string(what) + " missing");
  if (t->dtype() != device::DataType::kInt32 && t->dtype() != device::DataType::kInt64) {
    return Err(n, std::string(what) + " must be int32 or int64, got " + device::DataTypeName(t->dtype()));
  }
  return IntsOf(*t);
}

Out Slice(const fe::Node& n, const Tensor& x, const HostKernelInputs& in, const HostKernelContext& ctx) {
  std::vector<int64_t> starts, ends, axes, steps;
  if (n.opset_version < 10) {
    auto s = n.GetInts("starts");
    if (!s.ok()) return Err(n, s.status().message());
    auto e = n.GetInts("ends");
    if (!e.ok()) return Err(n, e.status().message());
    auto a = n.GetInts("axes", {});
    if (!a.ok()) return a.status();
    starts = *s, ends = *e, axes = *a;
  } else {
    auto s = IntsInput(n, in, 1, "starts");
    if (!s.ok()) return s.status();
    auto e = IntsInput(n, in, 2, "ends");
    if (!e.ok()) return e.status();
    starts = *s, ends = *e;
    if (In(in, 3) != nullptr) {
      auto a = IntsInput(n, in, 3, "axes");
      if (!a.ok()) return a.status();
      axes = *a;
    }
    if (In(in, 4) != nullptr) {
      auto st = IntsInput(n, in, 4, "steps");
      if (!st.ok()) return st.status();
      steps = *st;
    }
  }
  const size_t k = starts.size();
  if (ends.size() != k) return Err(n, "starts and ends have different lengths");
  if (axes.empty()) {
    for (size_t i = 0; i < k; ++i) axes.push_back(static_cast<int64_t>(i));
  }
  if (steps.empty()) steps.assign(k, 1);
  if (axes.size() != k || steps.size() != k) return Err(n, "axes / steps must have the length of starts");
  const int r = x.rank();
  Shape out = x.shape();
  const std::vector<int64_t> xs = RowMajorStrides(x.shape());
  std::vector<int64_t> strides = xs;
  std::vector<bool> seen(r, false);
  int64_t base = 0;
  for (size_t i = 0; i < k; ++i) {
    const int64_t a = NormAxis(axes[i], r);
    if (a < 0 || a >= r) return Err(n, "axis " + std::to_string(axes[i]) + " out of range for rank " + std::to_string(r));
    if (seen[a]) return Err(n, "axis " + std::to_string(axes[i]) + " repeated");
    seen[a] = true;
    const int64_t step = steps[i];
    if (step == 0) return Err(n, "step 0 on axis " + std::to_string(axes[i]));
    const int64_t dim = x.dim(static_cast<int>(a));
    int64_t start = starts[i], end = ends[i];
    if (start < 0) start += dim;  // no overflow: dim >= 0 and start < 0
    if (end < 0) end += dim;
    int64_t len = 0;
    if (step > 0) {
      start = std::clamp<int64_t>(start, 0, dim);
      end = std::clamp<int64_t>(end, 0, dim);
      len = end > start ? (end - start - 1) / step + 1 : 0;  // ceil without overflow
    } else if (dim > 0) {
      start = std::clamp<int64_t>(start, 0, dim - 1);
      end = std::clamp<int64_t>(end, -1, dim - 1);
      // start - end - 1 < dim < -step when step is INT64_MIN (whose negation overflows)
      if (start > end) len = (step == std::numeric_limits<int64_t>::min() ? 0 : (start - end - 1) / -step) + 1;
    }
    out[a] = len;
    if (len > 0) base += start * xs[a];
    strides[a] = len > 1 ? step * xs[a] : 0;  // len <= 1: the step is never taken (and may be huge)
  }
  auto y = Make(out, x.dtype());
  if (!y.ok()) return y.status();
  KILN_RETURN_IF_ERROR(MoveElements(x, base, StridedMaps(strides), nullptr, *y, ctx.cancel));
  return Outputs(std::move(*y));
}

Out Split(const fe::Node& n, const Tensor& x, const HostKernelInputs& in, const HostKernelContext& ctx) {
  auto axis = n.GetInt("axis", 0);
  if (!axis.ok()) return axis.status();
  const int r = x.rank();
  const int64_t a = NormAxis(*axis, r);
  if (a < 0 || a >= r) return Err(n, "axis " + std::to_string(*axis) + " out of range for rank " + std::to_string(r));
  const size_t outputs = n.outputs.size();
  if (outputs == 0) return Err(n, "no outputs");
  std::vector<int64_t> split;
  if ((n.opset_version >= 13 || n.opset_version < 2) && In(in, 1) != nullptr) {
    auto s = IntsInput(n, in, 1, "split");
    if (!s.ok()) return s.status();
    split = *s;
  } else if (n.opset_version < 13) {
    auto s = n.GetInts("split", {});
    if (!s.ok()) return s.status();
    split = *s;
  }
  const int64_t dim = x.dim(static_cast<int>(a));
  if (split.empty()) {
    if (dim % static_cast<int64_t>(outputs) != 0) {
      return Err(n, "axis of size " + std::to_string(dim) + " does not split into " + std::to_string(outputs) +
                        " equal parts");
    }
    split.assign(outputs, dim / static_cast<int64_t>(outputs));
  }
  if (split.size() != outputs) {
    return Err(n, "split has " + std::to_string(split.size()) + " values for " + std::to_string(outputs) + " outputs");
  }
  int64_t total = 0;
  for (int64_t s : split) {
    if (s < 0 || s > dim) return Err(n, "split value " + std::to_string(s) + " out of range");
    total += s;
  }
  if (total != dim) return Err(n, "split sums to " + std::to_string(total) + ", the axis has " + std::to_string(dim));
  const std::vector<int64_t> xs = RowMajorStrides(x.shape());
  std::vector<Tensor> result;
  int64_t start = 0;
  for (int64_t s : split) {
    Shape shape = x.shape();
    shape[a] = s;
    auto y = Make(shape, x.dtype());
    if (!y.ok()) return y.status();
    KILN_RETURN_IF_ERROR(MoveElements(x, start * xs[a], StridedMaps(xs), nullptr, *y, ctx.cancel));
    result.push_back(std::move(*y));
    start += s;
  }
  return result;
}

int64_t InputBytes(const fe::Node&, const std::vector<Shape>& s) { return s.empty() ? 0 : AnyTypeBytes(s[0]); }

}  // namespace

void RegisterHostKernels_slice(HostKernelRegistry& r) {
  r.Add({{"Slice"}, InputBytes,
         [](const fe::Node& n, const HostKernelInputs& in, const HostKernelContext& ctx) -> Out {
           auto x = Required(n, in, 0, "data input");
           if (!x.ok()) return x.status();
           return Slice(n, **x, in, ctx);
         },
         AllDTypes(KernelPath::kTyped)});
  r.Add({{"Split"}, InputBytes,
         [](const fe::Node& n, const HostKernelInputs& in, const HostKernelContext& ctx) -> Out {
           auto x = Required(n, in, 0, "input");
           if (!x.ok()) return x.status();
           return Split(n, **x, in, ctx);
         },
         AllDTypes(KernelPath::kTyped)});
}

}  // namespace kiln::runtime::host_kernels
