// Index host kernels (onnx/docs/Operators.md):
// * Gather-1/11/13: data of every element type, int32 / int64 indices along `axis` (negative axis
//   and indices count from the end; an index outside [-n, n-1] is INVALID_ARGUMENT naming the node
//   and the index); output shape data[:axis] + indices.shape + data[axis+1:]. Element copies
//   (runtime/host_kernels/movement.h).
// * ArgMax / ArgMin-1/11/12/13: every numeric type (float16 / bfloat16 compared as float),
//   `axis`, `keepdims`, `select_last_index` (12+); int64 output. NaN counts as the largest value
//   for ArgMax and the smallest for ArgMin, as numpy's argmax / argmin (onnx's reference) treat
//   it: the first NaN wins (the last with select_last_index). An empty axis is INVALID_ARGUMENT.
// * TopK-1/10/11: K from the `k` attribute (opset 1) or the int64 input 1 (10+), 0 <= K <= the
//   axis size; `axis` (negative from 11), `largest` (default 1), `sorted` (results are always
//   sorted, which sorted = 0 allows). Equal values keep the lower index first (the operator
//   definition); NaN sorts above every number, so it comes first with largest = 1 and last with
//   largest = 0, as numpy's sort / argsort place it. Outputs: Values of the input's type, Indices
//   int64.
// Memory: the output (Gather: 8-byte elements, the type is not known from shapes; ArgMax: int64;
// TopK: its largest case K = the axis size, values and indices, plus one slice of scratch).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "common/float16.h"
#include "device/dtype_dispatch.h"
#include "runtime/host_kernels/movement.h"

namespace kiln::runtime::host_kernels {

namespace {

namespace fe = onnx_fe;
using device::DataType;

Out Gather(const fe::Node& n, const Tensor& x, const Tensor& indices, const HostKernelContext& ctx) {
  if (indices.dtype() != DataType::kInt32 && indices.dtype() != DataType::kInt64) {
    return Err(n, std::string("indices must be int32 or int64, got ") + device::DataTypeName(indices.dtype()));
  }
  auto axis = n.GetInt("axis", 0);
  if (!axis.ok()) return axis.status();
  const int r = x.rank();
  const int64_t a = NormAxis(*axis, r);
  if (a < 0 || a >= r) return Err(n, "axis " + std::to_string(*axis) + " out of range for rank " + std::to_string(r));
  const int64_t dim = x.dim(static_cast<int>(a));
  const std::vector<int64_t> xs = RowMajorStrides(x.shape());
  const std::vector<int64_t> idx = IntsOf(indices);
  DimMap pick;
  pick.table.reserve(idx.size());
  for (int64_t i : idx) {
    if (i < -dim || i >= dim) {
      return Err(n, "index " + std::to_string(i) + " out of range [" + std::to_string(-dim) + ", " +
                        std::to_string(dim - 1) + "] on axis " + std::to_string(a));
    }
    pick.table.push_back((i < 0 ? i + dim : i) * xs[a]);
  }
  Shape out(x.shape().begin(), x.shape().begin() + a);
  out.insert(out.end(), indices.shape().begin(), indices.shape().end());
  out.insert(out.end(), x.shape().begin() + a + 1, x.shape().end());
  // The copy views the output as data[:axis] + [indices count] + data[axis+1:].
  Shape view = x.shape();
  view[a] = static_cast<int64_t>(idx.size());
  std::vector<DimMap> maps = StridedMaps(xs);
  maps[a] = std::move(pick);
  auto y = Make(out, x.dtype());
  if (!y.ok()) return y.status();
  KILN_RETURN_IF_ERROR(MoveElements(x, 0, std::move(maps), view, nullptr, *y, ctx.cancel));
  return Outputs(std::move(*y));
}

int64_t GatherBytes(const fe::Node& n, const std::vector<Shape>& s) {
  if (s.size() < 2) return 0;
  const int64_t r = static_cast<int64_t>(s[0].size());
  auto axis = n.GetInt("axis", 0);
  const int64_t a = axis.ok() ? NormAxis(*axis, r) : 0;
  if (a < 0 || a >= r) return 0;
  Shape out(s[0].begin(), s[0].begin() + a);
  out.insert(out.end(), s[1].begin(), s[1].end());
  out.insert(out.end(), s[0].begin() + a + 1, s[0].end());
  return AnyTypeBytes(out);
}

// ArgMax (kMax) / ArgMin over one axis.
template <bool kMax>
Out ArgExtreme(const fe::Node& n, const Tensor& x, const HostKernelContext& ctx) {
  auto axis = n.GetInt("axis", 0);
  if (!axis.ok()) return axis.status();
  auto keepdims = n.GetInt("keepdims", 1);
  if (!keepdims.ok()) return keepdims.status();
  auto last = n.GetInt("select_last_index", 0);
  if (!last.ok()) return last.status();
  const int r = x.rank();
  const int64_t a = NormAxis(*axis, r);
  if (a < 0 || a >= r) return Err(n, "axis " + std::to_string(*axis) + " out of range for rank " + std::to_string(r));
  const int64_t len = x.dim(static_cast<int>(a));
  if (len == 0) return Err(n, "axis " + std::to_string(a) + " is empty");
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < a; ++d) outer *= x.dim(static_cast<int>(d));
  for (int64_t d = a + 1; d < r; ++d) inner *= x.dim(static_cast<int>(d));
  Shape out;
  for (int64_t d = 0; d < r; ++d) {
    if (d != a) {
      out.push_back(x.dim(static_cast<int>(d)));
    } else if (*keepdims != 0) {
      out.push_back(1);
    }
  }
  auto y = Make(out, DataType::kInt64);
  if (!y.ok()) return y.status();
  int64_t* py = y->data<int64_t>();
  const bool select_last = *last != 0;
  CancelPoll poll(ctx.cancel);
  Status st = device::VisitDataType(x.dtype(), [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    constexpr DataType kT = decltype(tag)::kType;
    const T* px = x.data<T>();
    auto value = [&](int64_t i) {
      if constexpr (kT == DataType::kFloat16) {
        return HalfToFloat(px[i]);
      } else if constexpr (kT == DataType::kBFloat16) {
        return BFloat16ToFloat(px[i]);
      } else {
        return px[i];
      }
    };
    using V = decltype(value(0));
    // True when v replaces the current best b (NaN beats every number; ties go to the later
    // index only with select_last_index).
    auto better = [&](V v, V b) {
      if constexpr (std::is_floating_point_v<V>) {
        if (std::isnan(b)) return select_last && std::isnan(v);
        if (std::isnan(v)) return true;
      }
      if (select_last ? v == b : false) return true;
      return kMax ? v > b : v < b;
    };
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t i = 0; i < inner; ++i) {
        const int64_t base = o * len * inner + i;
        int64_t best = 0;
        V bv = value(base);
        for (int64_t k = 1; k < len; ++k) {
          const V v = value(base + k * inner);
          if (better(v, bv)) {
            best = k;
            bv = v;
          }
        }
        py[o * inner + i] = best;
      }
      KILN_RETURN_IF_ERROR(poll.Tick(len * inner));
    }
    return Status::Ok();
  });
  if (!st.ok()) return st;
  return Outputs(std::move(*y));
}

int64_t ArgBytes(const fe::Node& n, const std::vector<Shape>& s) {
  if (s.empty()) return 0;
  Shape out = s[0];
  auto axis = n.GetInt("axis", 0);
  const int64_t a = axis.ok() ? NormAxis(*axis, static_cast<int64_t>(out.size())) : 0;
  if (a >= 0 && a < static_cast<int64_t>(out.size())) out[a] = 1;
  return TensorBytes(out, 8);
}

Out TopK(const fe::Node& n, const Tensor& x, const HostKernelInputs& in, const HostKernelContext& ctx) {
  int64_t k = 0;
  if (n.opset_version < 10) {
    auto attr = n.GetInt("k");
    if (!attr.ok()) return Err(n, attr.status().message());
    k = *attr;
  } else {
    const Tensor* kt = In(in, 1);
    if (kt == nullptr) return Err(n, "K input missing");
    if (kt->dtype() != DataType::kInt64 || kt->num_elements() != 1) return Err(n, "K must be one int64 value");
    k = IntsOf(*kt)[0];
  }
  auto axis = n.GetInt("axis", -1);
  if (!axis.ok()) return axis.status();
  auto largest_attr = n.GetInt("largest", 1);
  if (!largest_attr.ok()) return largest_attr.status();
  const bool largest = *largest_attr != 0;
  const int r = x.rank();
  const int64_t a = NormAxis(*axis, r);
  if (a < 0 || a >= r) return Err(n, "axis " + std::to_string(*axis) + " out of range for rank " + std::to_string(r));
  const int64_t len = x.dim(static_cast<int>(a));
  if (k < 0 || k > len) return Err(n, "K " + std::to_string(k) + " out of range [0, " + std::to_string(len) + "]");
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < a; ++d) outer *= x.dim(static_cast<int>(d));
  for (int64_t d = a + 1; d < r; ++d) inner *= x.dim(static_cast<int>(d));
  Shape out = x.shape();
  out[a] = k;
  auto values = Make(out, x.dtype());
  if (!values.ok()) return values.status();
  auto indices = Make(out, DataType::kInt64);
  if (!indices.ok()) return indices.status();
  const size_t es = device::DataTypeSize(x.dtype());
  CancelPoll poll(ctx.cancel);
  Status st = device::VisitDataType(x.dtype(), [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    constexpr DataType kT = decltype(tag)::kType;
    const T* px = x.data<T>();
    auto value = [&](int64_t i) {
      if constexpr (kT == DataType::kFloat16) {
        return HalfToFloat(px[i]);
      } else if constexpr (kT == DataType::kBFloat16) {
        return BFloat16ToFloat(px[i]);
      } else {
        return px[i];
      }
    };
    using V = decltype(value(0));
    auto is_nan = [](V v) {
      if constexpr (std::is_floating_point_v<V>) {
        return std::isnan(v);
      } else {
        (void)v;
        return false;
      }
    };
    // a above b in the order where NaN is above every number.
    auto above = [&](V va, V vb) { return is_nan(va) ? !is_nan(vb) : (!is_nan(vb) && va > vb); };
    std::vector<std::pair<V, int64_t>> slice(static_cast<size_t>(len));
    auto before = [&](const std::pair<V, int64_t>& p, const std::pair<V, int64_t>& q) {
      const bool pq = largest ? above(p.first, q.first) : above(q.first, p.first);
      const bool qp = largest ? above(q.first, p.first) : above(p.first, q.first);
      return pq || (!qp && p.second < q.second);
    };
    const std::byte* src = x.raw().data();
    std::byte* pv = values->raw().data();
    int64_t* pi = indices->data<int64_t>();
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t i = 0; i < inner; ++i) {
        const int64_t base = o * len * inner + i;
        for (int64_t j = 0; j < len; ++j) slice[j] = {value(base + j * inner), j};
        std::partial_sort(slice.begin(), slice.begin() + k, slice.end(), before);
        for (int64_t j = 0; j < k; ++j) {
          const int64_t dst = (o * k + j) * inner + i;
          pi[dst] = slice[j].second;
          std::memcpy(pv + dst * static_cast<int64_t>(es), src + (base + slice[j].second * inner) * static_cast<int64_t>(es),
                      es);
        }
        KILN_RETURN_IF_ERROR(poll.Tick(len * 8));  // ~len log len comparisons
      }
    }
    return Status::Ok();
  });
  if (!st.ok()) return st;
  std::vector<Tensor> result;
  result.push_back(std::move(*values));
  result.push_back(std::move(*indices));
  return result;
}

int64_t TopKBytes(const fe::Node& n, const std::vector<Shape>& s) {
  if (s.empty()) return 0;
  Shape out = s[0];
  auto axis = n.GetInt("axis", -1);
  const int64_t a = axis.ok() ? NormAxis(*axis, static_cast<int64_t>(out.size())) : 0;
  if (n.opset_version < 10 && a >= 0 && a < static_cast<int64_t>(out.size())) {
    auto k = n.GetInt("k");
    if (k.ok() && *k >= 0 && *k <= out[a]) out[a] = *k;
  }
  const int64_t scratch = a >= 0 && a < static_cast<int64_t>(s[0].size()) ? TensorBytes({s[0][a]}, 16) : 0;
  return AddBytes(AddBytes(AnyTypeBytes(out), TensorBytes(out, 8)), scratch);
}

}  // namespace

void RegisterHostKernels_gather(HostKernelRegistry& r) {
  r.Add({{"Gather"}, GatherBytes,
         [](const fe::Node& n, const HostKernelInputs& in, const HostKernelContext& ctx) -> Out {
           auto x = Required(n, in, 0, "data input");
           if (!x.ok()) return x.status();
           auto idx = Required(n, in, 1, "indices input");
           if (!idx.ok()) return idx.status();
           return Gather(n, **x, **idx, ctx);
         },
         AllDTypes(KernelPath::kTyped)});
  r.Add({{"ArgMax"}, ArgBytes,
         [](const fe::Node& n, const HostKernelInputs& in, const HostKernelContext& ctx) -> Out {
           auto x = Required(n, in, 0, "data input");
           if (!x.ok()) return x.status();
           return ArgExtreme<true>(n, **x, ctx);
         },
         NumericDTypes(KernelPath::kTyped)});
  r.Add({{"ArgMin"}, ArgBytes,
         [](const fe::Node& n, const HostKernelInputs& in, const HostKernelContext& ctx) -> Out {
           auto x = Required(n, in, 0, "data input");
           if (!x.ok()) return x.status();
           return ArgExtreme<false>(n, **x, ctx);
         },
         NumericDTypes(KernelPath::kTyped)});
  r.Add({{"TopK"}, TopKBytes,
         [](const fe::Node& n, const HostKernelInputs& in, const HostKernelContext& ctx) -> Out {
           auto x = Required(n, in, 0, "input");
           if (!x.ok()) return x.status();
           return TopK(n, **x, in, ctx);
         },
         NumericDTypes(KernelPath::kTyped)});
}

}  // namespace kiln::runtime::host_kernels
