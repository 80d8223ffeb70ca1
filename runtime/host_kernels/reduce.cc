// Reductions (ONNX operator definitions, onnx/docs/Operators.md): ReduceSum, ReduceMean, ReduceMax,
// ReduceMin, ReduceL2. Axes: the `axes` attribute (ReduceSum before opset 13, the others before
// 18) or the optional int64 input 1 (ReduceSum from 13, the others from 18); negative axes count
// from the end; absent or empty axes reduce every axis, unless noop_with_empty_axes = 1 (input
// form), which returns the input unchanged. keepdims (default 1) keeps reduced axes as 1.
// Paths: float32 (float16 / bfloat16 in float32) through oneDNN 2.6 reduction (sum, mean, max,
// min, norm_lp_sum with p = 2 for L2), chunked along axis 0 when it is kept; float64 and integer
// types typed (double / 64-bit integer accumulation; integer Mean truncates toward zero like onnx's
// reference `np.mean(...).astype(dtype)`). A reduction that shrinks no axis (every reduced axis
// has size 1) is typed too: oneDNN's reduction wants at least one reduced dimension.
// Memory: the output (at most the input's size).
#include <algorithm>
#include <cmath>
#include <limits>

#include "device/dtype_dispatch.h"
#include "runtime/host_kernels/kernel_util.h"
#include "runtime/host_kernels/onednn_util.h"

namespace kiln::runtime::host_kernels {

namespace {

namespace fe = onnx_fe;
using device::DataType;

enum class R { kSum, kMean, kMax, kMin, kL2 };

struct Plan {
  std::vector<bool> reduced;  // per input axis
  Shape kept;                 // input shape with reduced axes set to 1
  Shape out;                  // the output shape (keepdims applied)
  bool noop = false;
};

bool AxesFromInput(const fe::Node& n) {
  return n.op_type == "ReduceSum" ? n.opset_version >= 13 : n.opset_version >= 18;
}

Result<Plan> MakePlan(const fe::Node& n, const Shape& shape, const HostKernelInputs& in) {
  std::vector<int64_t> axes;
  bool noop = false;
  if (AxesFromInput(n)) {
    const Tensor* a = In(in, 1);
    if (a != nullptr) axes = IntsOf(*a);
    auto nz = n.GetInt("noop_with_empty_axes", 0);
    if (!nz.ok()) return nz.status();
    noop = *nz != 0 && axes.empty();
  } else {
    auto a = n.GetInts("axes", {});
    if (!a.ok()) return a.status();
    axes = *a;
  }
  auto kd = n.GetInt("keepdims", 1);
  if (!kd.ok()) return kd.status();
  const int64_t rank = static_cast<int64_t>(shape.size());
  Plan p;
  p.noop = noop;
  p.reduced.assign(shape.size(), axes.empty() && !noop);
  for (int64_t ax : axes) {
    const int64_t a = NormAxis(ax, rank);
    if (a < 0 || a >= rank) return Err(n, "axis " + std::to_string(ax) + " out of range for rank " + std::to_string(rank));
    p.reduced[static_cast<size_t>(a)] = true;
  }
  for (size_t d = 0; d < shape.size(); ++d) {
    p.kept.push_back(p.reduced[d] ? 1 : shape[d]);
    if (!p.reduced[d] || *kd != 0) p.out.push_back(p.reduced[d] ? 1 : shape[d]);
  }
  if (noop) p.out = shape;
  return p;
}

// Typed reduction into `y` (shape p.kept, row-major) from `x`; accumulation type A.
template <typename T>
Status TypedReduce(R op, const Tensor& x, const Plan& p, Tensor& y, const device::CancelToken* cancel) {
  using A = std::conditional_t<std::is_floating_point_v<T>, double,
                               std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>>;
  const int64_t out_n = y.num_elements();
  std::vector<A> acc(static_cast<size_t>(out_n), A{0});
  std::vector<bool> seen(static_cast<size_t>(out_n), false);
  const std::vector<int64_t> ost = BroadcastStrides(p.kept, x.shape());
  std::vector<int64_t> idx(x.shape().size(), 0);
  const T* px = x.data<T>();
  CancelPoll poll(cancel);
  for (int64_t i = 0; i < x.num_elements(); ++i) {
    int64_t o = 0;
    for (size_t d = 0; d < idx.size(); ++d) o += idx[d] * ost[d];
    const A v = static_cast<A>(px[i]);
    A& a = acc[static_cast<size_t>(o)];
    switch (op) {
      case R::kSum: case R::kMean: a += v; break;
      case R::kL2: a += v * v; break;
      case R::kMax: a = seen[o] ? std::max(a, v) : v; break;
      case R::kMin: a = seen[o] ? std::min(a, v) : v; break;
    }
    seen[o] = true;
    NextIndex(idx, x.shape());
    KILN_RETURN_IF_ERROR(poll.Tick(1));
  }
  const int64_t count = out_n == 0 ? 0 : x.num_elements() / out_n;
  T* py = y.data<T>();
  for (int64_t o = 0; o < out_n; ++o) {
    A a = acc[static_cast<size_t>(o)];
    if (op == R::kMean && count > 0) a = static_cast<A>(a / static_cast<A>(count));
    if (op == R::kL2) a = static_cast<A>(std::sqrt(static_cast<double>(a)));
    if ((op == R::kMax || op == R::kMin) && !seen[o]) {
      a = op == R::kMax ? static_cast<A>(std::numeric_limits<T>::lowest()) : static_cast<A>(std::numeric_limits<T>::max());
    }
    py[o] = static_cast<T>(a);
  }
  return Status::Ok();
}

dnnl::algorithm DnnAlg(R op) {
  switch (op) {
    case R::kSum: return dnnl::algorithm::reduction_sum;
    case R::kMean: return dnnl::algorithm::reduction_mean;
    case R::kMax: return dnnl::algorithm::reduction_max;
    case R::kMin: return dnnl::algorithm::reduction_min;
    case R::kL2: return dnnl::algorithm::reduction_norm_lp_sum;
  }
  return dnnl::algorithm::reduction_sum;
}

template <R op>
Out Reduce(const fe::Node& n, const HostKernelInputs& in, const HostKernelContext& ctx) {
  auto xr = Required(n, in, 0, "first input");
  if (!xr.ok()) return xr.status();
  const Tensor& x = **xr;
  auto plan = MakePlan(n, x.shape(), in);
  if (!plan.ok()) return plan.status();
  const Plan& p = *plan;
  if (p.noop) return Outputs(Tensor(x));
  const bool shrinks = p.kept != x.shape() && x.num_elements() > 0;
  if (IsDnnFloat(x.dtype()) && shrinks) {
    Tensor h;
    auto xf = AsFloat32(x, h);
    if (!xf.ok()) return xf.status();
    auto y = Make(p.kept);
    if (!y.ok()) return y.status();
    const Shape& s = x.shape();
    int64_t row = 1, orow = 1;
    for (size_t d = 1; d < s.size(); ++d) {
      row *= s[d];
      orow *= p.kept[d];
    }
    const bool split = !p.reduced[0];
    const float* px = (*xf)->data<float>();
    float* py = y->data<float>();
    KILN_RETURN_IF_ERROR(DnnGuard(n, [&] {
      return ForRowChunks(split ? s[0] : 1, split ? row : x.num_elements(), ctx.cancel, [&](int64_t r0, int64_t cnt) {
        Shape si = s, so = p.kept;
        if (split) si[0] = so[0] = cnt;
        const auto mi = DnnDesc(si), mo = DnnDesc(so);
        const float pw = op == R::kL2 ? 2.f : 0.f;
        dnnl::reduction::desc d(DnnAlg(op), mi, mo, pw, 0.f);
        dnnl::reduction prim(dnnl::reduction::primitive_desc(d, DnnEngine()));
        DnnExecute(prim, {{DNNL_ARG_SRC, DnnMem(mi, px + r0 * row)}, {DNNL_ARG_DST, DnnMem(mo, py + r0 * orow)}});
        return Status::Ok();
      });
    }));
    auto back = FromFloat32(std::move(*y), x.dtype());
    if (!back.ok()) return back.status();
    auto r = back->Reshaped(p.out);
    if (!r.ok()) return r.status();
    return Outputs(std::move(*r));
  }
  Tensor h;
  const Tensor* src = &x;
  if (x.dtype() == DataType::kFloat16 || x.dtype() == DataType::kBFloat16) {
    auto xf = AsFloat32(x, h);
    if (!xf.ok()) return xf.status();
    src = *xf;
  }
  auto y = Make(p.kept, src->dtype());
  if (!y.ok()) return y.status();
  Status st = device::VisitDataType(src->dtype(), [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    constexpr DataType kT = decltype(tag)::kType;
    if constexpr (kT == DataType::kFloat16 || kT == DataType::kBFloat16 || kT == DataType::kBool) {
      return Err(n, "unsupported element type");
    } else {
      return TypedReduce<T>(op, *src, p, *y, ctx.cancel);
    }
  });
  KILN_RETURN_IF_ERROR(st);
  auto back = FromFloat32(std::move(*y), x.dtype());
  if (!back.ok()) return back.status();
  auto r = back->Reshaped(p.out);
  if (!r.ok()) return r.status();
  return Outputs(std::move(*r));
}

// The output: at most the input's size (fp32 bound, kernel_util.h).
int64_t ReduceBytes(const fe::Node& n, const std::vector<Shape>& s) { return SameAsInput0Bytes(n, s); }

std::vector<DTypePath> Paths(bool small_ints) {
  std::vector<DTypePath> v = DTypes({DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16}, KernelPath::kOneDnn);
  for (DataType t : {DataType::kFloat64, DataType::kInt32, DataType::kInt64, DataType::kUInt32, DataType::kUInt64}) {
    v.push_back({t, KernelPath::kTyped});
  }
  if (small_ints) {
    v.push_back({DataType::kInt8, KernelPath::kTyped});
    v.push_back({DataType::kUInt8, KernelPath::kTyped});
  }
  return v;
}

}  // namespace

void RegisterHostKernels_reduce(HostKernelRegistry& r) {
  r.Add({{"ReduceSum"}, ReduceBytes, Reduce<R::kSum>, Paths(false)});
  r.Add({{"ReduceMean"}, ReduceBytes, Reduce<R::kMean>, Paths(false)});
  r.Add({{"ReduceMax"}, ReduceBytes, Reduce<R::kMax>, Paths(true)});
  r.Add({{"ReduceMin"}, ReduceBytes, Reduce<R::kMin>, Paths(true)});
  r.Add({{"ReduceL2"}, ReduceBytes, Reduce<R::kL2>, Paths(false)});
}

}  // namespace kiln::runtime::host_kernels
