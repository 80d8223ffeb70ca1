#include "compiler/convplan/host_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>

#include "device/backends/conv_geometry.h"

namespace kiln::convplan {

namespace fe = onnx_fe;
using device::Tensor;

namespace {

using Shape = std::vector<int64_t>;
using Out = Result<std::vector<Tensor>>;

Status Err(const fe::Node& n, const std::string& msg) { return InvalidArgument(n.Describe() + ": " + msg); }

Result<Tensor> Make(Shape shape) { return Tensor::Zeros(std::move(shape)); }

const Tensor* In(const std::vector<const Tensor*>& in, size_t i) { return i < in.size() ? in[i] : nullptr; }

std::vector<int64_t> IntsOf(const Tensor& t) {
  std::vector<int64_t> v;
  for (float f : t.span<float>()) v.push_back(static_cast<int64_t>(std::llround(f)));
  return v;
}

int64_t NormAxis(int64_t axis, int64_t rank) { return axis < 0 ? axis + rank : axis; }

// Advances the row-major multi-index `idx` over `shape` (last axis fastest; wraps to all zeros).
void NextIndex(std::vector<int64_t>& idx, const Shape& shape) {
  for (size_t d = idx.size(); d-- > 0;) {
    if (++idx[d] < shape[d]) return;
    idx[d] = 0;
  }
}

std::vector<int64_t> RowMajorStrides(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (int i = static_cast<int>(s.size()) - 2; i >= 0; --i) st[i] = st[i + 1] * s[i + 1];
  return st;
}

// ---- element-wise

Out Unary(const fe::Node& n, const Tensor& x, const std::function<float(float)>& f) {
  auto y = Make(x.shape());
  if (!y.ok()) return y.status();
  const float* a = x.data<float>();
  float* b = y->data<float>();
  for (int64_t i = 0; i < x.num_elements(); ++i) b[i] = f(a[i]);
  std::vector<Tensor> out;
  out.push_back(std::move(*y));
  for (size_t k = 1; k < n.outputs.size(); ++k) out.emplace_back();
  return out;
}

Result<Shape> BroadcastShape(const Shape& a, const Shape& b) {
  const size_t r = std::max(a.size(), b.size());
  Shape out(r);
  for (size_t i = 0; i < r; ++i) {
    const int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    const int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (da != db && da != 1 && db != 1) {
      return InvalidArgument("shapes " + device::ShapeToString(a) + " and " + device::ShapeToString(b) +
                             " do not broadcast");
    }
    out[i] = da == 1 ? db : da;
  }
  return out;
}

// Strides of `s` viewed in broadcast shape `out` (0 on broadcast dims).
std::vector<int64_t> BroadcastStrides(const Shape& s, const Shape& out) {
  std::vector<int64_t> st = RowMajorStrides(s);
  std::vector<int64_t> r(out.size(), 0);
  const size_t off = out.size() - s.size();
  for (size_t i = 0; i < s.size(); ++i) r[off + i] = s[i] == 1 ? 0 : st[i];
  return r;
}

Out Binary(const fe::Node& n, const Tensor& a, const Tensor& b, float (*f)(float, float)) {
  auto shape = BroadcastShape(a.shape(), b.shape());
  if (!shape.ok()) return Err(n, shape.status().message());
  auto y = Make(*shape);
  if (!y.ok()) return y.status();
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  float* py = y->data<float>();
  if (a.shape() == b.shape()) {
    for (int64_t i = 0; i < y->num_elements(); ++i) py[i] = f(pa[i], pb[i]);
  } else {
    const Shape& s = *shape;
    std::vector<int64_t> sa = BroadcastStrides(a.shape(), s), sb = BroadcastStrides(b.shape(), s);
    std::vector<int64_t> idx(s.size(), 0);
    int64_t ia = 0, ib = 0;
    for (int64_t i = 0; i < y->num_elements(); ++i) {
      py[i] = f(pa[ia], pb[ib]);
      for (int d = static_cast<int>(s.size()) - 1; d >= 0; --d) {
        if (++idx[d] < s[d]) {
          ia += sa[d];
          ib += sb[d];
          break;
        }
        ia -= sa[d] * (s[d] - 1);
        ib -= sb[d] * (s[d] - 1);
        idx[d] = 0;
      }
    }
  }
  std::vector<Tensor> out;
  out.push_back(std::move(*y));
  return out;
}

// ---- pooling

Out Pool(const fe::Node& n, const Tensor& x, device::Backend& pool) {
  const bool is_max = n.op_type == "MaxPool";
  if (is_max && n.outputs.size() > 1 && !n.outputs[1].empty()) return Err(n, "the Indices output is not supported");
  if (x.rank() != 3 && x.rank() != 4) return Err(n, "input must be rank 3 or 4, got " + device::ShapeToString(x.shape()));
  const size_t r = static_cast<size_t>(x.rank() - 2);
  auto ks = n.GetInts("kernel_shape");
  if (!ks.ok()) return ks.status();
  if (ks->size() != r) return Err(n, "kernel_shape must have " + std::to_string(r) + " values");
  auto get = [&](const char* name, size_t len, int64_t fill) -> Result<std::vector<int64_t>> {
    auto v = n.GetInts(name, std::vector<int64_t>(len, fill));
    if (!v.ok()) return v.status();
    if (v->empty()) return std::vector<int64_t>(len, fill);
    if (v->size() != len) return Err(n, std::string(name) + " must have " + std::to_string(len) + " values");
    return *v;
  };
  auto st = get("strides", r, 1);
  if (!st.ok()) return st.status();
  auto dl = get("dilations", r, 1);
  if (!dl.ok()) return dl.status();
  auto pd = get("pads", 2 * r, 0);
  if (!pd.ok()) return pd.status();
  auto ceil = n.GetInt("ceil_mode", 0);
  if (!ceil.ok()) return ceil.status();
  auto cip = n.GetInt("count_include_pad", 0);
  if (!cip.ok()) return cip.status();
  auto ap = n.GetString("auto_pad", "NOTSET");
  if (!ap.ok()) return ap.status();
  auto mode = device::ParseAutoPad(*ap);
  if (!mode.ok()) return Err(n, mode.status().message());
  std::vector<int64_t> pads = *pd;
  if (*mode != device::AutoPad::kNotSet) {
    for (size_t i = 0; i < r; ++i) {
      auto p = device::ConvAutoPad(*mode, x.dim(static_cast<int>(2 + i)), (*ks)[i], (*st)[i], (*dl)[i]);
      if (!p.ok()) return Err(n, p.status().message());
      pads[i] = p->first;
      pads[i + r] = p->second;
    }
  }
  device::Pool2dParams p;
  p.kind = is_max ? device::PoolKind::kMax : device::PoolKind::kAverage;
  if (r == 1) {
    p.kernel = {1, (*ks)[0]};
    p.strides = {1, (*st)[0]};
    p.dilations = {1, (*dl)[0]};
    p.pads = {0, pads[0], 0, pads[1]};
  } else {
    p.kernel = {(*ks)[0], (*ks)[1]};
    p.strides = {(*st)[0], (*st)[1]};
    p.dilations = {(*dl)[0], (*dl)[1]};
    p.pads = {pads[0], pads[1], pads[2], pads[3]};
  }
  p.ceil_mode = *ceil != 0;
  p.count_include_pad = !is_max && *cip != 0;
  Tensor x4 = x;
  if (r == 1) {
    auto t = x.Reshaped({x.dim(0), x.dim(1), 1, x.dim(2)});
    if (!t.ok()) return t.status();
    x4 = std::move(*t);
  }
  device::ExecContext ctx;
  auto y = pool.Pool2d(x4, p, ctx);
  if (!y.ok()) return y.status().WithContext(n.Describe());
  if (r == 1) {
    auto t = y->Reshaped({y->dim(0), y->dim(1), y->dim(3)});
    if (!t.ok()) return t.status();
    *y = std::move(*t);
  }
  std::vector<Tensor> out;
  out.push_back(std::move(*y));
  if (n.outputs.size() > 1) out.emplace_back();
  return out;
}

Out GlobalAveragePool(const fe::Node& n, const Tensor& x) {
  if (x.rank() < 3) return Err(n, "input must have rank >= 3");
  Shape s = {x.dim(0), x.dim(1)};
  int64_t inner = 1;
  for (int i = 2; i < x.rank(); ++i) {
    s.push_back(1);
    inner *= x.dim(i);
  }
  auto y = Make(s);
  if (!y.ok()) return y.status();
  const float* a = x.data<float>();
  for (int64_t nc = 0; nc < x.dim(0) * x.dim(1); ++nc) {
    double sum = 0;
    for (int64_t k = 0; k < inner; ++k) sum += a[nc * inner + k];
    y->data<float>()[nc] = static_cast<float>(sum / static_cast<double>(inner));
  }
  std::vector<Tensor> out;
  out.push_back(std::move(*y));
  return out;
}

// ---- shape ops

Out Concat(const fe::Node& n, const std::vector<const Tensor*>& in) {
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
  auto y = Make(s);
  if (!y.ok()) return y.status();
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < a; ++d) outer *= s[d];
  for (int64_t d = a + 1; d < rank; ++d) inner *= s[d];
  float* py = y->data<float>();
  int64_t off = 0;
  for (const Tensor* t : in) {
    const int64_t chunk = t->dim(static_cast<int>(a)) * inner;
    for (int64_t o = 0; o < outer; ++o) {
      std::memcpy(py + o * s[a] * inner + off, t->data<float>() + o * chunk, sizeof(float) * chunk);
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
  int64_t outer = 1;
  for (int64_t d = 0; d < a; ++d) outer *= x.dim(static_cast<int>(d));
  return ReshapeTo(x, {outer, outer == 0 ? 0 : x.num_elements() / std::max<int64_t>(outer, 1)});
}

Out Transpose(const fe::Node& n, const Tensor& x) {
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
  auto y = Make(s);
  if (!y.ok()) return y.status();
  std::vector<int64_t> xs = RowMajorStrides(x.shape());
  std::vector<int64_t> idx(r, 0);
  const float* a = x.data<float>();
  float* b = y->data<float>();
  for (int64_t i = 0; i < y->num_elements(); ++i) {
    int64_t src = 0;
    for (int d = 0; d < r; ++d) src += idx[d] * xs[p[d]];
    b[i] = a[src];
    NextIndex(idx, s);
  }
  std::vector<Tensor> out;
  out.push_back(std::move(*y));
  return out;
}

Result<std::vector<int64_t>> AxesOf(const fe::Node& n, const std::vector<const Tensor*>& in) {
  if (n.opset_version >= 13) {
    if (const Tensor* t = In(in, 1)) return IntsOf(*t);
    return std::vector<int64_t>{};
  }
  return n.GetInts("axes", std::vector<int64_t>{});
}

Out Squeeze(const fe::Node& n, const Tensor& x, const std::vector<const Tensor*>& in) {
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

Out Unsqueeze(const fe::Node& n, const Tensor& x, const std::vector<const Tensor*>& in) {
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

Out Pad(const fe::Node& n, const Tensor& x, const std::vector<const Tensor*>& in) {
  std::vector<int64_t> pads;
  float value = 0.0f;
  if (n.opset_version >= 11) {
    if (In(in, 1) == nullptr) return Err(n, "pads input missing");
    pads = IntsOf(*in[1]);
    if (const Tensor* v = In(in, 2); v != nullptr && v->num_elements() > 0) value = v->data<float>()[0];
  } else {
    auto p = n.GetInts("pads");
    if (!p.ok()) return p.status();
    pads = *p;
    auto v = n.GetFloat("value", 0.0f);
    if (!v.ok()) return v.status();
    value = *v;
  }
  auto mode = n.GetString("mode", "constant");
  if (!mode.ok()) return mode.status();
  const int r = x.rank();
  if (static_cast<int>(pads.size()) != 2 * r) return Err(n, "pads must have 2 * rank values");
  Shape s(r);
  for (int d = 0; d < r; ++d) {
    s[d] = x.dim(d) + pads[d] + pads[d + r];
    if (s[d] < 0) return Err(n, "negative output dim");
  }
  auto y = Make(s);
  if (!y.ok()) return y.status();
  std::vector<int64_t> xs = RowMajorStrides(x.shape());
  std::vector<int64_t> idx(r, 0);
  const float* a = x.data<float>();
  float* b = y->data<float>();
  for (int64_t i = 0; i < y->num_elements(); ++i) {
    int64_t src = 0;
    bool outside = false;
    for (int d = 0; d < r; ++d) {
      int64_t k = idx[d] - pads[d];
      const int64_t len = x.dim(d);
      if (k < 0 || k >= len) {
        if (*mode == "constant" || len == 0) {
          outside = true;
          break;
        }
        if (*mode == "edge") {
          k = std::clamp<int64_t>(k, 0, len - 1);
        } else if (*mode == "reflect") {
          if (len == 1) {
            k = 0;
          } else {
            const int64_t period = 2 * (len - 1);
            k = ((k % period) + period) % period;
            if (k >= len) k = period - k;
          }
        } else {
          return Err(n, "unsupported mode '" + *mode + "'");
        }
      }
      src += k * xs[d];
    }
    b[i] = outside ? value : a[src];
    NextIndex(idx, s);
  }
  std::vector<Tensor> out;
  out.push_back(std::move(*y));
  return out;
}

// ---- math

Out Softmax(const fe::Node& n, const Tensor& x) {
  const int64_t def = n.opset_version >= 13 ? -1 : 1;
  auto axis = n.GetInt("axis", def);
  if (!axis.ok()) return axis.status();
  const int64_t a = NormAxis(*axis, x.rank());
  if (a < 0 || a >= std::max(x.rank(), 1)) return Err(n, "axis out of range");
  int64_t outer = 1, len = 1, inner = 1;
  if (n.opset_version >= 13) {
    for (int64_t d = 0; d < a; ++d) outer *= x.dim(static_cast<int>(d));
    len = x.dim(static_cast<int>(a));
    for (int64_t d = a + 1; d < x.rank(); ++d) inner *= x.dim(static_cast<int>(d));
  } else {
    for (int64_t d = 0; d < a; ++d) outer *= x.dim(static_cast<int>(d));
    for (int64_t d = a; d < x.rank(); ++d) len *= x.dim(static_cast<int>(d));
  }
  auto y = Make(x.shape());
  if (!y.ok()) return y.status();
  const float* p = x.data<float>();
  float* q = y->data<float>();
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      const int64_t base = o * len * inner + i;
      float mx = -std::numeric_limits<float>::infinity();
      for (int64_t k = 0; k < len; ++k) mx = std::max(mx, p[base + k * inner]);
      double sum = 0;
      for (int64_t k = 0; k < len; ++k) sum += std::exp(static_cast<double>(p[base + k * inner] - mx));
      for (int64_t k = 0; k < len; ++k) {
        q[base + k * inner] = static_cast<float>(std::exp(static_cast<double>(p[base + k * inner] - mx)) / sum);
      }
    }
  }
  std::vector<Tensor> out;
  out.push_back(std::move(*y));
  return out;
}

Out Gemm(const fe::Node& n, const std::vector<const Tensor*>& in) {
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
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t j = 0; j < N; ++j) {
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

Out MatMul(const fe::Node& n, const Tensor& A0, const Tensor& B0) {
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

Out BatchNorm(const fe::Node& n, const std::vector<const Tensor*>& in) {
  for (size_t i = 0; i < 5; ++i) {
    if (In(in, i) == nullptr) return Err(n, "missing input");
  }
  const Tensor& x = *in[0];
  if (x.rank() < 2) return Err(n, "input must have rank >= 2");
  const int64_t C = x.dim(1);
  for (size_t i = 1; i < 5; ++i) {
    if (in[i]->num_elements() != C) return Err(n, "parameters must have C values");
  }
  auto eps = n.GetFloat("epsilon", 1e-5f);
  if (!eps.ok()) return eps.status();
  auto y = Make(x.shape());
  if (!y.ok()) return y.status();
  int64_t inner = 1;
  for (int d = 2; d < x.rank(); ++d) inner *= x.dim(d);
  const float *s = in[1]->data<float>(), *b = in[2]->data<float>(), *m = in[3]->data<float>(), *v = in[4]->data<float>();
  for (int64_t nn = 0; nn < x.dim(0); ++nn) {
    for (int64_t c = 0; c < C; ++c) {
      const double f = s[c] / std::sqrt(static_cast<double>(v[c]) + *eps);
      const float* px = x.data<float>() + (nn * C + c) * inner;
      float* py = y->data<float>() + (nn * C + c) * inner;
      for (int64_t k = 0; k < inner; ++k) py[k] = static_cast<float>((px[k] - m[c]) * f + b[c]);
    }
  }
  std::vector<Tensor> out;
  out.push_back(std::move(*y));
  for (size_t k = 1; k < n.outputs.size(); ++k) out.emplace_back();
  return out;
}

Out Clip(const fe::Node& n, const Tensor& x, const std::vector<const Tensor*>& in) {
  float lo = -std::numeric_limits<float>::infinity(), hi = std::numeric_limits<float>::infinity();
  if (n.opset_version < 11) {
    auto mn = n.GetFloat("min", lo), mx = n.GetFloat("max", hi);
    if (!mn.ok() || !mx.ok()) return Err(n, "bad min/max");
    lo = *mn;
    hi = *mx;
  } else {
    if (const Tensor* t = In(in, 1); t != nullptr && t->num_elements() > 0) lo = t->data<float>()[0];
    if (const Tensor* t = In(in, 2); t != nullptr && t->num_elements() > 0) hi = t->data<float>()[0];
  }
  return Unary(n, x, [lo, hi](float v) { return std::min(std::max(v, lo), hi); });
}

Out Cast(const fe::Node& n, const Tensor& x) {
  auto to = n.GetInt("to");
  if (!to.ok()) return to.status();
  const auto t = static_cast<fe::DataType>(*to);
  switch (t) {
    case fe::DataType::kFloat:
    case fe::DataType::kDouble:
    case fe::DataType::kFloat16:
    case fe::DataType::kBFloat16:
      return Unary(n, x, [](float v) { return v; });
    case fe::DataType::kBool:
      return Unary(n, x, [](float v) { return v != 0.0f ? 1.0f : 0.0f; });
    case fe::DataType::kString:
    case fe::DataType::kUndefined:
    case fe::DataType::kComplex64:
    case fe::DataType::kComplex128:
      return Err(n, std::string("cast to ") + fe::DataTypeName(t) + " is not supported");
    default:
      return Unary(n, x, [](float v) { return std::trunc(v); });
  }
}

Out Dispatch(const fe::Node& n, const std::vector<const Tensor*>& in, device::Backend& pool) {
  const std::string& op = n.op_type;
  if (op == "Constant") {
    const fe::Attribute* v = n.FindAttribute("value");
    if (v == nullptr || !v->t || !v->t->constant) return Err(n, "only the 'value' form is supported");
    std::vector<int64_t> s;
    for (const fe::Dim& d : v->t->shape.dims()) s.push_back(d.value());
    auto t = Tensor::FromFloats(s, v->t->constant->floats());
    if (!t.ok()) return t.status();
    std::vector<Tensor> out;
    out.push_back(std::move(*t));
    return out;
  }
  if (In(in, 0) == nullptr) return Err(n, "first input missing");
  const Tensor& x = *in[0];
  auto need2 = [&]() -> const Tensor* { return In(in, 1); };
  if (op == "Relu") return Unary(n, x, [](float v) { return v > 0.0f ? v : 0.0f; });
  if (op == "Sigmoid") return Unary(n, x, [](float v) { return static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(v)))); });
  if (op == "Tanh") return Unary(n, x, [](float v) { return std::tanh(v); });
  if (op == "Erf") return Unary(n, x, [](float v) { return std::erf(v); });
  if (op == "Sqrt") return Unary(n, x, [](float v) { return std::sqrt(v); });
  if (op == "Abs") return Unary(n, x, [](float v) { return std::fabs(v); });
  if (op == "Neg") return Unary(n, x, [](float v) { return -v; });
  if (op == "Identity" || op == "Dropout") return Unary(n, x, [](float v) { return v; });
  if (op == "Clip") return Clip(n, x, in);
  if (op == "Cast") return Cast(n, x);
  if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div") {
    const Tensor* b = need2();
    if (b == nullptr) return Err(n, "second input missing");
    if (op == "Add") return Binary(n, x, *b, [](float p, float q) { return p + q; });
    if (op == "Sub") return Binary(n, x, *b, [](float p, float q) { return p - q; });
    if (op == "Mul") return Binary(n, x, *b, [](float p, float q) { return p * q; });
    return Binary(n, x, *b, [](float p, float q) { return p / q; });
  }
  if (op == "MaxPool" || op == "AveragePool") return Pool(n, x, pool);
  if (op == "GlobalAveragePool") return GlobalAveragePool(n, x);
  if (op == "Concat") return Concat(n, in);
  if (op == "Gemm") return Gemm(n, in);
  if (op == "MatMul") {
    if (need2() == nullptr) return Err(n, "second input missing");
    return MatMul(n, x, *in[1]);
  }
  if (op == "BatchNormalization") return BatchNorm(n, in);
  if (op == "Reshape") {
    if (need2() == nullptr) return Err(n, "shape input missing");
    return Reshape(n, x, *in[1]);
  }
  if (op == "Flatten") return Flatten(n, x);
  if (op == "Transpose") return Transpose(n, x);
  if (op == "Squeeze") return Squeeze(n, x, in);
  if (op == "Unsqueeze") return Unsqueeze(n, x, in);
  if (op == "Pad") return Pad(n, x, in);
  if (op == "Softmax") return Softmax(n, x);
  return Unimplemented(n.Describe() + ": not a host op");
}

}  // namespace

Result<std::vector<Tensor>> RunHostOp(const fe::Node& node, const std::vector<const Tensor*>& inputs,
                                      device::Backend& pool) {
  for (const Tensor* t : inputs) {
    if (t != nullptr && t->dtype() != device::DataType::kFloat32) {
      return InvalidArgument(node.Describe() + ": host ops take float32 tensors");
    }
  }
  return Dispatch(node, inputs, pool);
}

}  // namespace kiln::convplan
