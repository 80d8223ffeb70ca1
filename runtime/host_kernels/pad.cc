// Pad host kernel (ONNX Pad-2 / Pad-11 / Pad-13): pads (and the constant value) from the
// attributes before opset 11 and from inputs 1 (and 2) from 11 on; modes constant, reflect, edge.
// Memory: the padded output — exact before opset 11; from 11 on the pads are input VALUES, so the
// estimate is the input's size (the unpadded lower bound).
#include <algorithm>

#include "runtime/host_kernels/kernel_util.h"

namespace kiln::runtime::host_kernels {

namespace {

namespace fe = onnx_fe;

Out Pad(const fe::Node& n, const Tensor& x, const HostKernelInputs& in, const HostKernelContext& ctx) {
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
  CancelPoll poll(ctx.cancel);
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
    if ((i & (kCancelPollWork - 1)) == kCancelPollWork - 1) KILN_RETURN_IF_ERROR(poll.Tick(kCancelPollWork));
  }
  std::vector<Tensor> out;
  out.push_back(std::move(*y));
  return out;
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
  return Fp32Bytes(out);
}

}  // namespace

void RegisterHostKernels_pad(HostKernelRegistry& r) {
  r.Add({{"Pad"}, PadBytes, [](const fe::Node& n, const HostKernelInputs& in, const HostKernelContext& ctx) -> Out {
           auto x = Required(n, in, 0, "first input");
           if (!x.ok()) return x.status();
           return Pad(n, **x, in, ctx);
         }});
}

}  // namespace kiln::runtime::host_kernels
