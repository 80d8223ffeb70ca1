// Matrix-product host kernels (ONNX Gemm-13, MatMul-13): Gemm with transA / transB / alpha / beta
// and C broadcast unidirectionally to [M, N]; MatMul with numpy batch broadcasting and 1-D
// operands promoted and squeezed as numpy.matmul does. Accumulation in double. Memory: the output
// ([M, N], or the broadcast batch times [M, N]).
#include <algorithm>

#include "runtime/host_kernels/kernel_util.h"

namespace kiln::runtime::host_kernels {

namespace {

namespace fe = onnx_fe;

Out Gemm(const fe::Node& n, const HostKernelInputs& in, const HostKernelContext& ctx) {
  const Tensor* A = In(in, 0);
  const Tensor* B = In(in, 1);
  const Tensor* C = In(in, 2);
  if (A == nullptr || B == nullptr || A->rank() != 2 || B->rank() != 2) return Err(n, "A and B must be 2-D");
  auto ta = n.GetInt("transA", 0), tb = n.GetInt("transB", 0);
  auto alpha = n.GetFloat("alpha", 1.0f), beta = n.GetFloat("beta", 1.0f);
  if (!ta.ok() || !tb.ok() || !alpha.ok() || !beta.ok()) return Err(n, "bad attributes");
  const int64_t M = *ta ? A->dim(1) : A->dim(0), K = *ta ? A->dim(0) : A->dim(1);
  const int64_t K2 = *tb ? B->dim(1) : B->dim(0), N = *tb ? B->dim(0) : B->dim(1);
  if (K != K2) return Err(n, "inner dims differ");
  auto y = Make({M, N});
  if (!y.ok()) return y.status();
  std::vector<int64_t> cs;
  if (C != nullptr) {
    auto bs = BroadcastShape(C->shape(), {M, N});
    if (!bs.ok() || *bs != Shape{M, N}) return Err(n, "C does not broadcast to [M, N]");
    cs = BroadcastStrides(C->shape(), {M, N});
  }
  const float* a = A->data<float>();
  const float* b = B->data<float>();
  float* out = y->data<float>();
  CancelPoll poll(ctx.cancel);
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t j = 0; j < N; ++j) {
      KILN_RETURN_IF_ERROR(poll.Tick(K));
      double acc = 0;
      for (int64_t k = 0; k < K; ++k) {
        const float av = *ta ? a[k * M + m] : a[m * K + k];
        const float bv = *tb ? b[j * K + k] : b[k * N + j];
        acc += static_cast<double>(av) * bv;
      }
      double v = *alpha * acc;
      if (C != nullptr) v += static_cast<double>(*beta) * C->data<float>()[m * cs[0] + j * cs[1]];
      out[m * N + j] = static_cast<float>(v);
    }
  }
  std::vector<Tensor> o;
  o.push_back(std::move(*y));
  return o;
}

Out MatMul(const fe::Node& n, const Tensor& A0, const Tensor& B0, const HostKernelContext& ctx) {
  Shape as = A0.shape(), bs = B0.shape();
  if (as.empty() || bs.empty()) return Err(n, "scalar operands");
  const bool a1 = as.size() == 1, b1 = bs.size() == 1;
  if (a1) as.insert(as.begin(), 1);
  if (b1) bs.push_back(1);
  const int64_t M = as[as.size() - 2], K = as.back(), K2 = bs[bs.size() - 2], N = bs.back();
  if (K != K2) return Err(n, "inner dims differ");
  Shape ab(as.begin(), as.end() - 2), bb(bs.begin(), bs.end() - 2);
  auto batch = BroadcastShape(ab, bb);
  if (!batch.ok()) return Err(n, batch.status().message());
  int64_t nb = 1;
  for (int64_t d : *batch) nb *= d;
  std::vector<int64_t> sa = BroadcastStrides(ab, *batch), sb = BroadcastStrides(bb, *batch);
  Shape ys = *batch;
  if (!a1) ys.push_back(M);
  if (!b1) ys.push_back(N);
  auto y = Make(ys);
  if (!y.ok()) return y.status();
  const float* a = A0.data<float>();
  const float* b = B0.data<float>();
  float* out = y->data<float>();
  std::vector<int64_t> idx(batch->size(), 0);
  CancelPoll poll(ctx.cancel);
  for (int64_t bi = 0; bi < nb; ++bi) {
    int64_t oa = 0, ob = 0;
    for (size_t d = 0; d < idx.size(); ++d) {
      oa += idx[d] * sa[d];
      ob += idx[d] * sb[d];
    }
    const float* pa = a + oa * M * K;
    const float* pb = b + ob * K * N;
    float* po = out + bi * M * N;
    for (int64_t m = 0; m < M; ++m) {
      for (int64_t j = 0; j < N; ++j) {
        KILN_RETURN_IF_ERROR(poll.Tick(K));
        double acc = 0;
        for (int64_t k = 0; k < K; ++k) acc += static_cast<double>(pa[m * K + k]) * pb[k * N + j];
        po[m * N + j] = static_cast<float>(acc);
      }
    }
    for (int d = static_cast<int>(idx.size()) - 1; d >= 0; --d) {
      if (++idx[d] < (*batch)[d]) break;
      idx[d] = 0;
    }
  }
  std::vector<Tensor> o;
  o.push_back(std::move(*y));
  return o;
}

int64_t GemmBytes(const fe::Node& n, const std::vector<Shape>& s) {
  if (s.size() < 2 || s[0].size() != 2 || s[1].size() != 2) return 0;
  auto ta = n.GetInt("transA", 0), tb = n.GetInt("transB", 0);
  const int64_t M = ta.ok() && *ta ? s[0][1] : s[0][0];
  const int64_t N = tb.ok() && *tb ? s[1][0] : s[1][1];
  return Fp32Bytes({M, N});
}

int64_t MatMulBytes(const fe::Node&, const std::vector<Shape>& s) {
  if (s.size() < 2 || s[0].empty() || s[1].empty()) return 0;
  Shape as = s[0], bs = s[1];
  if (as.size() == 1) as.insert(as.begin(), 1);
  if (bs.size() == 1) bs.push_back(1);
  auto batch = BroadcastShape(Shape(as.begin(), as.end() - 2), Shape(bs.begin(), bs.end() - 2));
  if (!batch.ok()) return 0;
  Shape out = *batch;
  out.push_back(as[as.size() - 2]);
  out.push_back(bs.back());
  return Fp32Bytes(out);
}

}  // namespace

void RegisterHostKernels_matmul(HostKernelRegistry& r) {
  r.Add({{"Gemm"}, GemmBytes, [](const fe::Node& n, const HostKernelInputs& in, const HostKernelContext& ctx) -> Out {
           auto x = Required(n, in, 0, "first input");
           if (!x.ok()) return x.status();
           return Gemm(n, in, ctx);
         }});
  r.Add({{"MatMul"}, MatMulBytes,
         [](const fe::Node& n, const HostKernelInputs& in, const HostKernelContext& ctx) -> Out {
           auto a = Required(n, in, 0, "first input");
           if (!a.ok()) return a.status();
           auto b = Required(n, in, 1, "second input");
           if (!b.ok()) return b.status();
           return MatMul(n, **a, **b, ctx);
         }});
}

}  // namespace kiln::runtime::host_kernels
