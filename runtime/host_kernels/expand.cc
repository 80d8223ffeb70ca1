// Broadcasting host kernels (onnx/docs/Operators.md, numpy broadcasting as
// onnx/docs/Broadcasting.md), every element type, element copies (runtime/host_kernels/movement.h):
// * Expand-8/13: the output shape is the bidirectional broadcast of the input shape and the
//   `shape` input (int64), so a 1 in `shape` keeps the input's dim.
// * Tile-6/13: `repeats` input (int64, one non-negative value per input dim).
// * Where-9/16: condition (bool), X, Y broadcast together; the element type is X's (= Y's), so
//   the registry selects on input 1.
// Memory: Expand / Tile: the input's size (the output's shape depends on input values: this is its
// smallest case), Where: the broadcast output; 8-byte elements (the type is not known from shapes).
#include <cstring>

#include "runtime/host_kernels/movement.h"

namespace kiln::runtime::host_kernels {

namespace {

namespace fe = onnx_fe;
using device::DataType;

Result<std::vector<int64_t>> Int64Input(const fe::Node& n, const Tensor& t, const char* what) {
  if (t.dtype() != DataType::kInt64) {
    return Err(n, std::string(what) + " must be int64, got " + device::DataTypeName(t.dtype()));
  }
  if (t.rank() != 1) return Err(n, std::string(what) + " must be 1-D, got " + device::ShapeToString(t.shape()));
  return IntsOf(t);
}

Out Expand(const fe::Node& n, const Tensor& x, const Tensor& shape_t, const HostKernelContext& ctx) {
  auto shape = Int64Input(n, shape_t, "shape");
  if (!shape.ok()) return shape.status();
  for (int64_t d : *shape) {
    if (d < 0) return Err(n, "negative dim in shape " + device::ShapeToString(*shape));
  }
  auto out = BroadcastShape(x.shape(), *shape);
  if (!out.ok()) return Err(n, out.status().message());
  auto y = Make(*out, x.dtype());
  if (!y.ok()) return y.status();
  KILN_RETURN_IF_ERROR(MoveElements(x, 0, StridedMaps(BroadcastStrides(x.shape(), *out)), nullptr, *y, ctx.cancel));
  return Outputs(std::move(*y));
}

Out Tile(const fe::Node& n, const Tensor& x, const Tensor& repeats_t, const HostKernelContext& ctx) {
  auto repeats = Int64Input(n, repeats_t, "repeats");
  if (!repeats.ok()) return repeats.status();
  const int r = x.rank();
  if (static_cast<int>(repeats->size()) != r) {
    return Err(n, "repeats has " + std::to_string(repeats->size()) + " values for an input of rank " + std::to_string(r));
  }
  const std::vector<int64_t> xs = RowMajorStrides(x.shape());
  Shape out(r), view;
  std::vector<int64_t> strides;
  for (int d = 0; d < r; ++d) {
    const int64_t rep = (*repeats)[d];
    if (rep < 0) return Err(n, "negative repeat " + std::to_string(rep));
    if (__builtin_mul_overflow(x.dim(d), rep, &out[d])) return Err(n, "output dim overflows");
    // Output index o = k * dim + i along d reads source index i: view [rep, dim], strides [0, s].
    view.push_back(rep);
    view.push_back(x.dim(d));
    strides.push_back(0);
    strides.push_back(xs[d]);
  }
  auto y = Make(out, x.dtype());
  if (!y.ok()) return y.status();
  KILN_RETURN_IF_ERROR(MoveElements(x, 0, StridedMaps(strides), view, nullptr, *y, ctx.cancel));
  return Outputs(std::move(*y));
}

template <size_t ES>
Status Select(const uint8_t* c, const std::byte* a, const std::byte* b, std::byte* o, const Shape& out,
              const std::vector<int64_t>& cs, const std::vector<int64_t>& as, const std::vector<int64_t>& bs,
              CancelPoll& poll) {
  const size_t r = out.size();
  const int64_t n = r == 0 ? 1 : out[r - 1];
  const int64_t ci = r == 0 ? 0 : cs[r - 1], ai = r == 0 ? 0 : as[r - 1], bi = r == 0 ? 0 : bs[r - 1];
  Shape outer(out.begin(), out.end() - (r == 0 ? 0 : 1));
  int64_t rows = 1;
  for (int64_t d : outer) rows *= d;
  std::vector<int64_t> idx(outer.size(), 0);
  for (int64_t row = 0; row < rows; ++row) {
    int64_t co = 0, ao = 0, bo = 0;
    for (size_t d = 0; d < outer.size(); ++d) {
      co += idx[d] * cs[d];
      ao += idx[d] * as[d];
      bo += idx[d] * bs[d];
    }
    std::byte* dst = o + row * n * static_cast<int64_t>(ES);
    for (int64_t k = 0; k < n; ++k) {
      const std::byte* src = c[co + k * ci] != 0 ? a + (ao + k * ai) * static_cast<int64_t>(ES)
                                                 : b + (bo + k * bi) * static_cast<int64_t>(ES);
      std::memcpy(dst + k * static_cast<int64_t>(ES), src, ES);
    }
    KILN_RETURN_IF_ERROR(poll.Tick(n));
    NextIndex(idx, outer);
  }
  return Status::Ok();
}

Out Where(const fe::Node& n, const Tensor& c, const Tensor& a, const Tensor& b, const HostKernelContext& ctx) {
  if (c.dtype() != DataType::kBool) {
    return Err(n, std::string("condition must be bool, got ") + device::DataTypeName(c.dtype()));
  }
  if (a.dtype() != b.dtype()) {
    return Err(n, std::string("X and Y have different element types (") + device::DataTypeName(a.dtype()) + ", " +
                      device::DataTypeName(b.dtype()) + ")");
  }
  auto ab = BroadcastShape(a.shape(), b.shape());
  if (!ab.ok()) return Err(n, ab.status().message());
  auto out = BroadcastShape(c.shape(), *ab);
  if (!out.ok()) return Err(n, out.status().message());
  auto y = Make(*out, a.dtype());
  if (!y.ok()) return y.status();
  if (y->num_elements() == 0) return Outputs(std::move(*y));
  CancelPoll poll(ctx.cancel);
  const auto cs = BroadcastStrides(c.shape(), *out), as = BroadcastStrides(a.shape(), *out),
             bs = BroadcastStrides(b.shape(), *out);
  const uint8_t* pc = c.data<uint8_t>();
  const std::byte* pa = a.raw().data();
  const std::byte* pb = b.raw().data();
  std::byte* po = y->raw().data();
  Status st;
  switch (device::DataTypeSize(a.dtype())) {
    case 1: st = Select<1>(pc, pa, pb, po, *out, cs, as, bs, poll); break;
    case 2: st = Select<2>(pc, pa, pb, po, *out, cs, as, bs, poll); break;
    case 4: st = Select<4>(pc, pa, pb, po, *out, cs, as, bs, poll); break;
    default: st = Select<8>(pc, pa, pb, po, *out, cs, as, bs, poll); break;
  }
  if (!st.ok()) return st;
  return Outputs(std::move(*y));
}

int64_t InputBytes(const fe::Node&, const std::vector<Shape>& s) { return s.empty() ? 0 : AnyTypeBytes(s[0]); }

int64_t WhereBytes(const fe::Node&, const std::vector<Shape>& s) {
  if (s.size() < 3) return 0;
  auto ab = BroadcastShape(s[1], s[2]);
  if (!ab.ok()) return 0;
  auto out = BroadcastShape(s[0], *ab);
  return out.ok() ? AnyTypeBytes(*out) : 0;
}

}  // namespace

void RegisterHostKernels_expand(HostKernelRegistry& r) {
  r.Add({{"Expand"}, InputBytes,
         [](const fe::Node& n, const HostKernelInputs& in, const HostKernelContext& ctx) -> Out {
           auto x = Required(n, in, 0, "input");
           if (!x.ok()) return x.status();
           auto shape = Required(n, in, 1, "shape input");
           if (!shape.ok()) return shape.status();
           return Expand(n, **x, **shape, ctx);
         },
         AllDTypes(KernelPath::kTyped)});
  r.Add({{"Tile"}, InputBytes,
         [](const fe::Node& n, const HostKernelInputs& in, const HostKernelContext& ctx) -> Out {
           auto x = Required(n, in, 0, "input");
           if (!x.ok()) return x.status();
           auto repeats = Required(n, in, 1, "repeats input");
           if (!repeats.ok()) return repeats.status();
           return Tile(n, **x, **repeats, ctx);
         },
         AllDTypes(KernelPath::kTyped)});
  r.Add({{"Where"}, WhereBytes,
         [](const fe::Node& n, const HostKernelInputs& in, const HostKernelContext& ctx) -> Out {
           auto c = Required(n, in, 0, "condition");
           if (!c.ok()) return c.status();
           auto a = Required(n, in, 1, "X");
           if (!a.ok()) return a.status();
           auto b = Required(n, in, 2, "Y");
           if (!b.ok()) return b.status();
           return Where(n, **c, **a, **b, ctx);
         },
         AllDTypes(KernelPath::kTyped), /*type_input=*/1});
}

}  // namespace kiln::runtime::host_kernels
