// Matrix-product host kernels (ONNX Gemm-13, MatMul-13) through oneDNN 2.6's matmul primitive:
// Gemm with transA / transB (strided views, no copies), alpha (oneDNN output scale) and beta·C
// with C broadcast unidirectionally to [M, N] (added after the product in our own loop); MatMul
// with numpy batch broadcasting and 1-D operands promoted and squeezed as numpy.matmul does.
// Element types: float32 on oneDNN; float16 / bfloat16 converted to float32 and back; float64
// and int32 / int64 / uint32 / uint64 in our own typed loop (float64 accumulated in double,
// integers wrap as numpy's matmul does).
// Cancellation: a product of at most ~kMatMulChunkMacs multiply-adds is one oneDNN call; a larger
// one runs per batch matrix in chunks of rows of A, each call's multiply-adds reported to a
// CancelPoll (kernel_util.h); the typed loop uses CancelPoll per output element.
// Memory (estimate_bytes): the output ([M, N], or the broadcast batch times [M, N]) at 4 bytes per
// element (the registry's convention for a shape-only estimate, kernel_util.h Fp32Bytes; float64 /
// 64-bit outputs take twice that, and float16 / bfloat16 operands add their float32 copies).
#include <algorithm>
#include <map>

#include "runtime/host_kernels/kernel_util.h"
#include "runtime/host_kernels/onednn_exec.h"

namespace kiln::runtime::host_kernels {

namespace {

namespace fe = onnx_fe;
using device::DataType;
using dnnl::memory;
using dt = dnnl::memory::data_type;

constexpr int64_t kMatMulChunkMacs = int64_t{1} << 26;

// One 2-D (or batched) product y = alpha · op(A) · op(B) as plain strided views.
struct Product {
  int64_t M = 0, K = 0, N = 0;
  int64_t a_rs = 0, a_cs = 0, b_rs = 0, b_cs = 0;  // element strides of op(A) [M, K], op(B) [K, N]
  float alpha = 1.f;
};

// y rows [m0, m0 + mc) = alpha · A[m0:m0+mc] · B via oneDNN (y row-major [M, N]).
Status DnnlProduct(const fe::Node& n, const Product& p, const float* a, const float* b, float* y, CancelPoll& poll) {
  const int64_t per_row = std::max<int64_t>(1, p.K * p.N);
  const int64_t rows = std::max<int64_t>(1, kMatMulChunkMacs / per_row);
  return onednn::Guard(n, [&]() -> Status {
    dnnl::engine& eng = onednn::Engine();
    dnnl::stream s(eng);
    std::map<int64_t, dnnl::matmul> prims;
    const memory::desc bd = onednn::Plain({p.K, p.N}, dt::f32, {p.b_rs, p.b_cs});
    for (int64_t m0 = 0; m0 < p.M; m0 += rows) {
      const int64_t mc = std::min(rows, p.M - m0);
      const memory::desc ad = onednn::Plain({mc, p.K}, dt::f32, {p.a_rs, p.a_cs});
      const memory::desc yd = onednn::Plain({mc, p.N}, dt::f32);
      auto it = prims.find(mc);
      if (it == prims.end()) {
        dnnl::primitive_attr attr;
        if (p.alpha != 1.f) attr.set_output_scales(0, {p.alpha});
        dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(ad, bd, yd), attr, eng);
        it = prims.emplace(mc, dnnl::matmul(pd)).first;
      }
      memory am(ad, eng, const_cast<float*>(a) + m0 * p.a_rs);
      memory bm(bd, eng, const_cast<float*>(b));
      memory ym(yd, eng, y + m0 * p.N);
      it->second.execute(s, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, ym}});
      s.wait();
      KILN_RETURN_IF_ERROR(poll.Tick(mc * per_row));
    }
    return Status::Ok();
  });
}

// The typed loop: y = alpha · op(A) · op(B), accumulated in Acc.
template <typename T, typename Acc>
Status TypedProduct(const Product& p, const T* a, const T* b, T* y, Acc alpha, CancelPoll& poll) {
  for (int64_t m = 0; m < p.M; ++m) {
    for (int64_t j = 0; j < p.N; ++j) {
      KILN_RETURN_IF_ERROR(poll.Tick(p.K));
      Acc acc = 0;
      for (int64_t k = 0; k < p.K; ++k) {
        acc += static_cast<Acc>(a[m * p.a_rs + k * p.a_cs]) * static_cast<Acc>(b[k * p.b_rs + j * p.b_cs]);
      }
      y[m * p.N + j] = static_cast<T>(alpha * acc);
    }
  }
  return Status::Ok();
}

bool IsTyped(DataType t) {
  return t == DataType::kFloat64 || t == DataType::kInt32 || t == DataType::kInt64 || t == DataType::kUInt32 ||
         t == DataType::kUInt64;
}

// Calls f(T, Acc tag values) for the typed element types.
template <typename F>
Status VisitTyped(DataType t, F&& f) {
  switch (t) {
    case DataType::kFloat64: return f(double{}, double{});
    case DataType::kInt32: return f(int32_t{}, int64_t{});
    case DataType::kInt64: return f(int64_t{}, int64_t{});
    case DataType::kUInt32: return f(uint32_t{}, uint64_t{});
    case DataType::kUInt64: return f(uint64_t{}, uint64_t{});
    default: return Internal("matmul: not a typed element type");
  }
}

Result<Tensor> CastBack(Tensor y, DataType type) {
  if (type == DataType::kFloat32) return y;
  return y.CastTo(type);
}

Out Gemm(const fe::Node& n, const HostKernelInputs& in, const HostKernelContext& ctx) {
  auto ap = Required(n, in, 0, "A");
  if (!ap.ok()) return ap.status();
  auto bp = Required(n, in, 1, "B");
  if (!bp.ok()) return bp.status();
  const Tensor* C = In(in, 2);
  const Tensor &A = **ap, &B = **bp;
  if (A.rank() != 2 || B.rank() != 2) return Err(n, "A and B must be 2-D");
  const DataType type = A.dtype();
  if (B.dtype() != type || (C != nullptr && C->dtype() != type)) return Err(n, "A, B and C must have one element type");
  auto ta = n.GetInt("transA", 0), tb = n.GetInt("transB", 0);
  auto alpha = n.GetFloat("alpha", 1.0f), beta = n.GetFloat("beta", 1.0f);
  if (!ta.ok() || !tb.ok() || !alpha.ok() || !beta.ok()) return Err(n, "bad attributes");
  Product p;
  p.M = *ta ? A.dim(1) : A.dim(0);
  p.K = *ta ? A.dim(0) : A.dim(1);
  const int64_t K2 = *tb ? B.dim(1) : B.dim(0);
  p.N = *tb ? B.dim(0) : B.dim(1);
  if (p.K != K2) return Err(n, "inner dims differ: " + device::ShapeToString(A.shape()) + ", " + device::ShapeToString(B.shape()));
  p.a_rs = *ta ? 1 : p.K;
  p.a_cs = *ta ? p.M : 1;
  p.b_rs = *tb ? 1 : p.N;
  p.b_cs = *tb ? p.K : 1;
  p.alpha = *alpha;
  std::vector<int64_t> cs;
  if (C != nullptr) {
    auto bs = BroadcastShape(C->shape(), {p.M, p.N});
    if (!bs.ok() || *bs != Shape{p.M, p.N}) return Err(n, "C " + device::ShapeToString(C->shape()) + " does not broadcast to [M, N]");
    cs = BroadcastStrides(C->shape(), {p.M, p.N});
  }
  auto y = Make({p.M, p.N}, type);
  if (!y.ok()) return y.status();
  if (y->num_elements() == 0) return Outputs(std::move(*y), 1);
  if (IsTyped(type)) {
    CancelPoll poll(ctx.cancel);
    KILN_RETURN_IF_ERROR(VisitTyped(type, [&](auto t, auto acc) -> Status {
      using T = decltype(t);
      using Acc = decltype(acc);
      T* yd = y->data<T>();
      if (p.K > 0) KILN_RETURN_IF_ERROR((TypedProduct<T, Acc>(p, A.data<T>(), B.data<T>(), yd, static_cast<Acc>(*alpha), poll)));
      if (C != nullptr) {
        const T* c = C->data<T>();
        for (int64_t m = 0; m < p.M; ++m)
          for (int64_t j = 0; j < p.N; ++j)
            yd[m * p.N + j] = static_cast<T>(static_cast<Acc>(yd[m * p.N + j]) +
                                             static_cast<Acc>(*beta) * static_cast<Acc>(c[m * cs[0] + j * cs[1]]));
      }
      return Status::Ok();
    }));
    return Outputs(std::move(*y), 1);
  }
  Tensor ao, bo, co;
  auto af = onednn::AsFloat32(A, ao);
  if (!af.ok()) return af.status();
  auto bf = onednn::AsFloat32(B, bo);
  if (!bf.ok()) return bf.status();
  auto yf = Make({p.M, p.N});
  if (!yf.ok()) return yf.status();
  float* yd = yf->data<float>();
  CancelPoll poll(ctx.cancel);
  if (p.K > 0) KILN_RETURN_IF_ERROR(DnnlProduct(n, p, (*af)->data<float>(), (*bf)->data<float>(), yd, poll));
  if (C != nullptr) {
    auto cf = onednn::AsFloat32(*C, co);
    if (!cf.ok()) return cf.status();
    const float* c = (*cf)->data<float>();
    for (int64_t m = 0; m < p.M; ++m)
      for (int64_t j = 0; j < p.N; ++j) yd[m * p.N + j] += *beta * c[m * cs[0] + j * cs[1]];
  }
  auto out = CastBack(std::move(*yf), type);
  if (!out.ok()) return out.status();
  return Outputs(std::move(*out), 1);
}

// numpy.matmul shapes: the broadcast batch, M, K, N, and the output shape.
struct MatMulShape {
  Shape batch, a_batch, b_batch, y;
  int64_t M = 0, K = 0, N = 0;
};

Result<MatMulShape> ResolveMatMul(const fe::Node& n, Shape as, Shape bs) {
  if (as.empty() || bs.empty()) return Err(n, "MatMul operands must have rank >= 1");
  MatMulShape r;
  const bool a1 = as.size() == 1, b1 = bs.size() == 1;
  if (a1) as.insert(as.begin(), 1);
  if (b1) bs.push_back(1);
  r.M = as[as.size() - 2];
  r.K = as.back();
  r.N = bs.back();
  if (bs[bs.size() - 2] != r.K) return Err(n, "inner dims differ: " + device::ShapeToString(as) + ", " + device::ShapeToString(bs));
  r.a_batch.assign(as.begin(), as.end() - 2);
  r.b_batch.assign(bs.begin(), bs.end() - 2);
  auto batch = BroadcastShape(r.a_batch, r.b_batch);
  if (!batch.ok()) return Err(n, batch.status().message());
  r.batch = *batch;
  r.y = r.batch;
  if (!a1) r.y.push_back(r.M);
  if (!b1) r.y.push_back(r.N);
  return r;
}

// The whole batched product in one oneDNN call (operands' batch dims broadcast by oneDNN).
Status DnnlBatched(const fe::Node& n, const MatMulShape& s, const float* a, const float* b, float* y) {
  return onednn::Guard(n, [&]() -> Status {
    dnnl::engine& eng = onednn::Engine();
    dnnl::stream st(eng);
    const size_t nd = s.batch.size() + 2;
    auto full = [&](const Shape& batch, int64_t r, int64_t c) {
      Shape d(nd - 2 - batch.size(), 1);
      d.insert(d.end(), batch.begin(), batch.end());
      d.push_back(r);
      d.push_back(c);
      return d;
    };
    const memory::desc ad = onednn::Plain(full(s.a_batch, s.M, s.K), dt::f32);
    const memory::desc bd = onednn::Plain(full(s.b_batch, s.K, s.N), dt::f32);
    const memory::desc yd = onednn::Plain(full(s.batch, s.M, s.N), dt::f32);
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(ad, bd, yd), eng);
    memory am(ad, eng, const_cast<float*>(a)), bm(bd, eng, const_cast<float*>(b)), ym(yd, eng, y);
    dnnl::matmul(pd).execute(st, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, ym}});
    st.wait();
    return Status::Ok();
  });
}

Out MatMul(const fe::Node& n, const HostKernelInputs& in, const HostKernelContext& ctx) {
  auto ap = Required(n, in, 0, "A");
  if (!ap.ok()) return ap.status();
  auto bp = Required(n, in, 1, "B");
  if (!bp.ok()) return bp.status();
  const Tensor &A = **ap, &B = **bp;
  const DataType type = A.dtype();
  if (B.dtype() != type) return Err(n, "A and B must have one element type");
  auto sh = ResolveMatMul(n, A.shape(), B.shape());
  if (!sh.ok()) return sh.status();
  const MatMulShape& s = *sh;
  int64_t nb = 1;
  for (int64_t d : s.batch) nb *= d;
  const std::vector<int64_t> sa = BroadcastStrides(s.a_batch, s.batch), sb = BroadcastStrides(s.b_batch, s.batch);
  Product p;
  p.M = s.M;
  p.K = s.K;
  p.N = s.N;
  p.a_rs = s.K;
  p.a_cs = 1;
  p.b_rs = s.N;
  p.b_cs = 1;
  // Visits every batch matrix: (output offset, A offset, B offset) in elements.
  auto for_each_batch = [&](auto&& fn) -> Status {
    std::vector<int64_t> idx(s.batch.size(), 0);
    for (int64_t bi = 0; bi < nb; ++bi) {
      int64_t oa = 0, ob = 0;
      for (size_t d = 0; d < idx.size(); ++d) {
        oa += idx[d] * sa[d];
        ob += idx[d] * sb[d];
      }
      KILN_RETURN_IF_ERROR(fn(bi * s.M * s.N, oa * s.M * s.K, ob * s.K * s.N));
      NextIndex(idx, s.batch);
    }
    return Status::Ok();
  };
  auto y = Make(s.y, type);
  if (!y.ok()) return y.status();
  if (y->num_elements() == 0 || s.K == 0) return Outputs(std::move(*y), 1);
  if (IsTyped(type)) {
    CancelPoll poll(ctx.cancel);
    KILN_RETURN_IF_ERROR(VisitTyped(type, [&](auto t, auto acc) -> Status {
      using T = decltype(t);
      using Acc = decltype(acc);
      const T* a = A.data<T>();
      const T* b = B.data<T>();
      T* yd = y->data<T>();
      return for_each_batch([&](int64_t oy, int64_t oa, int64_t ob) {
        return TypedProduct<T, Acc>(p, a + oa, b + ob, yd + oy, Acc{1}, poll);
      });
    }));
    return Outputs(std::move(*y), 1);
  }
  Tensor ao, bo;
  auto af = onednn::AsFloat32(A, ao);
  if (!af.ok()) return af.status();
  auto bf = onednn::AsFloat32(B, bo);
  if (!bf.ok()) return bf.status();
  auto yf = Make(s.y);
  if (!yf.ok()) return yf.status();
  const float* a = (*af)->data<float>();
  const float* b = (*bf)->data<float>();
  float* yd = yf->data<float>();
  const double macs = static_cast<double>(nb) * static_cast<double>(s.M) * static_cast<double>(s.K) * static_cast<double>(s.N);
  if (macs <= static_cast<double>(kMatMulChunkMacs) && s.batch.size() + 2 <= DNNL_MAX_NDIMS) {
    KILN_RETURN_IF_ERROR(DnnlBatched(n, s, a, b, yd));
  } else {
    CancelPoll poll(ctx.cancel);
    KILN_RETURN_IF_ERROR(for_each_batch([&](int64_t oy, int64_t oa, int64_t ob) {
      return DnnlProduct(n, p, a + oa, b + ob, yd + oy, poll);
    }));
  }
  auto out = CastBack(std::move(*yf), type);
  if (!out.ok()) return out.status();
  return Outputs(std::move(*out), 1);
}

int64_t GemmBytes(const fe::Node& n, const std::vector<Shape>& s) {
  if (s.size() < 2 || s[0].size() != 2 || s[1].size() != 2) return 0;
  auto ta = n.GetInt("transA", 0), tb = n.GetInt("transB", 0);
  const int64_t M = ta.ok() && *ta ? s[0][1] : s[0][0];
  const int64_t N = tb.ok() && *tb ? s[1][0] : s[1][1];
  return Fp32Bytes({M, N});
}

int64_t MatMulBytes(const fe::Node& n, const std::vector<Shape>& s) {
  if (s.size() < 2) return 0;
  auto r = ResolveMatMul(n, s[0], s[1]);
  if (!r.ok()) return 0;
  return Fp32Bytes(r->y);
}

std::vector<DTypePath> ProductTypes() {
  std::vector<DTypePath> v = DTypes({DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16}, KernelPath::kOneDnn);
  for (DataType t : {DataType::kFloat64, DataType::kInt32, DataType::kInt64, DataType::kUInt32, DataType::kUInt64}) {
    v.push_back({t, KernelPath::kTyped});
  }
  return v;
}

}  // namespace

void RegisterHostKernels_matmul(HostKernelRegistry& r) {
  r.Add({{"Gemm"}, GemmBytes, Gemm, ProductTypes()});
  r.Add({{"MatMul"}, MatMulBytes, MatMul, ProductTypes()});
}

}  // namespace kiln::runtime::host_kernels
