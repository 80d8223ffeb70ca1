// Shape host kernels (ONNX operator definitions, onnx/docs/Operators.md): Concat (equal ranks,
// equal dims outside `axis`), Reshape (0 = copy the input dim unless allowzero, one -1 inferred),
// Flatten (2-D at `axis`), Transpose (`perm`, default reversed), Squeeze / Unsqueeze (axes from the
// attribute before opset 13 and from input 1 from 13 on; Squeeze without axes drops every 1 dim).
// Every element type (pure data movement). Memory: one output with the input's element count
// (Concat: the sum of its inputs), 8-byte elements as the type is not known from shapes. Copies go through
// MoveElements (runtime/host_kernels/movement.h; Transpose gets its blocked 2-D path).
#include <algorithm>
#include <cstring>

#include "runtime/host_kernels/movement.h"

namespace kiln::runtime::host_kernels {

namespace {

namespace fe = onnx_fe;

Out Concat(const fe::Node& n, const HostKernelInputs& in, const HostKernelContext& ctx) {
  if (in.empty() || in[0] == nullptr) return Err(n, "no inputs");
  auto axis = n.GetInt("axis");
  if (!axis.ok()) return axis.status();
  const int64_t rank = in[0]->rank();
  const int64_t a = NormAxis(*axis, rank);
  if (a < 0 || a >= rank) return Err(n, "axis out of range");
  Shape s = in[0]->shape();
  s[a] = 0;
  for (const Tensor* t : in) {
    if (t == nullptr || t->rank() != rank) return Err(n, "inputs must have equal rank");
    for (int64_t d = 0; d < rank; ++d) {
      if (d != a && t->dim(static_cast<int>(d)) != in[0]->dim(static_cast<int>(d))) {
        return Err(n, "input shapes differ outside the concat axis");
      }
    }
    s[a] += t->dim(static_cast<int>(a));
  }
  for (const Tensor* t : in) {
    if (t->dtype() != in[0]->dtype()) return Err(n, "inputs have different element types");
  }
  auto y = Make(s, in[0]->dtype());
  if (!y.ok()) return y.status();
  const int64_t es = static_cast<int64_t>(device::DataTypeSize(in[0]->dtype()));
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < a; ++d) outer *= s[d];
  for (int64_t d = a + 1; d < rank; ++d) inner *= s[d];
  std::byte* py = y->raw().data();
  int64_t off = 0;
  CancelPoll poll(ctx.cancel);
  for (const Tensor* t : in) {
    const int64_t chunk = t->dim(static_cast<int>(a)) * inner;
    if (chunk == 0) continue;  // an empty input (its storage may be null)
    for (int64_t o = 0; o < outer; ++o) {
      std::memcpy(py + (o * s[a] * inner + off) * es, t->raw().data() + o * chunk * es,
                  static_cast<size_t>(chunk * es));
      KILN_RETURN_IF_ERROR(poll.Tick(chunk));
    }
    off += chunk;
  }
  std::vector<Tensor> out;
  out.push_back(std::move(*y));
  return out;
}

Out ReshapeTo(const Tensor& x, Shape s) {
  auto y = x.Reshaped(std::move(s));
  if (!y.ok()) return y.status();
  std::vector<Tensor> out;
  out.push_back(std::move(*y));
  return out;
}

Out Reshape(const fe::Node& n, const Tensor& x, const Tensor& shape) {
  std::vector<int64_t> s = IntsOf(shape);
  auto allowzero = n.GetInt("allowzero", 0);
  int64_t known = 1;
  int infer = -1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == 0 && !(allowzero.ok() && *allowzero != 0)) {
      if (static_cast<int>(i) >= x.rank()) return Err(n, "0 in shape beyond the input rank");
      s[i] = x.dim(static_cast<int>(i));
    }
    if (s[i] == -1) {
      if (infer >= 0) return Err(n, "more than one -1 in shape");
      infer = static_cast<int>(i);
    } else if (s[i] < 0) {
      return Err(n, "negative dim in shape");
    } else {
      known *= s[i];
    }
  }
  if (infer >= 0) {
    if (known == 0 || x.num_elements() % known != 0) return Err(n, "cannot infer the -1 dim");
    s[infer] = x.num_elements() / known;
  }
  auto r = ReshapeTo(x, s);
  if (!r.ok()) return Err(n, r.status().message());
  return r;
}

Out Flatten(const fe::Node& n, const Tensor& x) {
  auto axis = n.GetInt("axis", 1);
  if (!axis.ok()) return axis.status();
  const int64_t a = NormAxis(*axis, x.rank());
  if (a < 0 || a > x.rank()) return Err(n, "axis out of range");
  int64_t outer = 1, inner = 1;  // both products: [0, 3] flattens to [0, 3], not [0, 0]
  for (int64_t d = 0; d < x.rank(); ++d) (d < a ? outer : inner) *= x.dim(static_cast<int>(d));
  return ReshapeTo(x, {outer, inner});
}

Out Transpose(const fe::Node& n, const Tensor& x, const HostKernelContext& ctx) {
  const int r = x.rank();
  std::vector<int64_t> rev(r);
  for (int i = 0; i < r; ++i) rev[i] = r - 1 - i;
  auto perm = n.GetInts("perm", rev);
  if (!perm.ok()) return perm.status();
  std::vector<int64_t> p = perm->empty() ? rev : *perm;
  if (static_cast<int>(p.size()) != r) return Err(n, "perm has the wrong length");
  Shape s(r);
  std::vector<bool> seen(r, false);
  for (int i = 0; i < r; ++i) {
    if (p[i] < 0 || p[i] >= r || seen[p[i]]) return Err(n, "perm is not a permutation of the axes");
    seen[p[i]] = true;
    s[i] = x.dim(static_cast<int>(p[i]));
  }
  auto y = Make(s, x.dtype());
  if (!y.ok()) return y.status();
  const std::vector<int64_t> xs = RowMajorStrides(x.shape());
  std::vector<int64_t> strides(r);
  for (int i = 0; i < r; ++i) strides[i] = xs[p[i]];
  KILN_RETURN_IF_ERROR(MoveElements(x, 0, StridedMaps(strides), nullptr, *y, ctx.cancel));
  return Outputs(std::move(*y));
}

Result<std::vector<int64_t>> AxesOf(const fe::Node& n, const HostKernelInputs& in) {
  if (n.opset_version >= 13) {
    if (const Tensor* t = In(in, 1)) return IntsOf(*t);
    return std::vector<int64_t>{};
  }
  return n.GetInts("axes", std::vector<int64_t>{});
}

Out Squeeze(const fe::Node& n, const Tensor& x, const HostKernelInputs& in) {
  auto axes = AxesOf(n, in);
  if (!axes.ok()) return axes.status();
  std::vector<bool> drop(x.rank(), false);
  if (axes->empty()) {
    for (int d = 0; d < x.rank(); ++d) drop[d] = x.dim(d) == 1;
  } else {
    for (int64_t a : *axes) {
      a = NormAxis(a, x.rank());
      if (a < 0 || a >= x.rank() || x.dim(static_cast<int>(a)) != 1) return Err(n, "cannot squeeze axis " + std::to_string(a));
      drop[a] = true;
    }
  }
  Shape s;
  for (int d = 0; d < x.rank(); ++d) {
    if (!drop[d]) s.push_back(x.dim(d));
  }
  return ReshapeTo(x, s);
}

Out Unsqueeze(const fe::Node& n, const Tensor& x, const HostKernelInputs& in) {
  auto axes = AxesOf(n, in);
  if (!axes.ok()) return axes.status();
  const int64_t r = x.rank() + static_cast<int64_t>(axes->size());
  std::vector<bool> ins(r, false);
  for (int64_t a : *axes) {
    a = NormAxis(a, r);
    if (a < 0 || a >= r || ins[a]) return Err(n, "bad axes");
    ins[a] = true;
  }
  Shape s;
  int src = 0;
  for (int64_t d = 0; d < r; ++d) s.push_back(ins[d] ? 1 : x.dim(src++));
  return ReshapeTo(x, s);
}

int64_t SumOfInputsBytes(const fe::Node&, const std::vector<Shape>& s) {
  int64_t total = 0;
  for (const Shape& x : s) total = AddBytes(total, AnyTypeBytes(x));
  return total;
}

int64_t InputBytes(const fe::Node&, const std::vector<Shape>& s) { return s.empty() ? 0 : AnyTypeBytes(s[0]); }

}  // namespace

void RegisterHostKernels_shape(HostKernelRegistry& r) {
  r.Add({{"Concat"}, SumOfInputsBytes,
         [](const fe::Node& n, const HostKernelInputs& in, const HostKernelContext& ctx) -> Out {
           auto x = Required(n, in, 0, "first input");
           if (!x.ok()) return x.status();
           return Concat(n, in, ctx);
         },
         AllDTypes(KernelPath::kTyped)});
  r.Add({{"Reshape"}, InputBytes,
         [](const fe::Node& n, const HostKernelInputs& in, const HostKernelContext&) -> Out {
           auto x = Required(n, in, 0, "first input");
           if (!x.ok()) return x.status();
           auto shape = Required(n, in, 1, "shape input");
           if (!shape.ok()) return shape.status();
           return Reshape(n, **x, **shape);
         },
         AllDTypes(KernelPath::kTyped)});
  r.Add({{"Flatten"}, InputBytes,
         [](const fe::Node& n, const HostKernelInputs& in, const HostKernelContext&) -> Out {
           auto x = Required(n, in, 0, "first input");
           if (!x.ok()) return x.status();
           return Flatten(n, **x);
         },
         AllDTypes(KernelPath::kTyped)});
  r.Add({{"Transpose"}, InputBytes,
         [](const fe::Node& n, const HostKernelInputs& in, const HostKernelContext& ctx) -> Out {
           auto x = Required(n, in, 0, "first input");
           if (!x.ok()) return x.status();
           return Transpose(n, **x, ctx);
         },
         AllDTypes(KernelPath::kTyped)});
  r.Add({{"Squeeze"}, InputBytes,
         [](const fe::Node& n, const HostKernelInputs& in, const HostKernelContext&) -> Out {
           auto x = Required(n, in, 0, "first input");
           if (!x.ok()) return x.status();
           return Squeeze(n, **x, in);
         },
         AllDTypes(KernelPath::kTyped)});
  r.Add({{"Unsqueeze"}, InputBytes,
         [](const fe::Node& n, const HostKernelInputs& in, const HostKernelContext&) -> Out {
           auto x = Required(n, in, 0, "first input");
           if (!x.ok()) return x.status();
           return Unsqueeze(n, **x, in);
         },
         AllDTypes(KernelPath::kTyped)});
}

}  // namespace kiln::runtime::host_kernels
