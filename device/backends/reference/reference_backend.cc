// One file for the whole backend (conv, conv_transpose, pooling, prepared and residual-fused convs
// share ConvExec and the oneDNN helpers); slightly over ~600 lines for that reason.
#include "device/backends/reference/reference_backend.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <optional>
#include <string>
#include <unordered_map>

#include <oneapi/dnnl/dnnl.hpp>
#include <omp.h>

#include "device/backends/builtin.h"
#include "device/backends/conv_geometry.h"

namespace kiln::device {
namespace {

using dnnl::memory;
using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

// The "threads" setting's default: no limit (every core).
constexpr int kDefaultThreads = 0;

dnnl::engine& Engine() {
  static dnnl::engine* engine = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *engine;
}

memory::dims Dims(const std::vector<int64_t>& v) { return memory::dims(v.begin(), v.end()); }

tag ActTag(Layout layout) { return layout == Layout::kNHWC ? tag::nhwc : tag::nchw; }

// KILN_REFERENCE_FORMAT=nhwc makes conv primitives run directly on NHWC activations when an
// optimised implementation takes them, instead of oneDNN's preferred format (format_tag::any).
// Off by default: on this AVX2 machine (oneDNN 2.6, jit:avx2, 3x3 64->64 56x56 N=8) both measured
// the same within noise (~170 vs ~176 GFLOP/s best on 2 cores; the activation reorders cost ~1%);
// with AVX-512 brgconv, `any` picks NHWC by itself.
bool PreferDirectNhwc() {
  static const bool direct = [] {
    const char* v = std::getenv("KILN_REFERENCE_FORMAT");
    return v != nullptr && std::string(v) == "nhwc";
  }();
  return direct;
}

// The activation layout oneDNN's fp32 conv kernels choose by themselves (format_tag::any) on this
// CPU, probed once on a 3x3 64->64 56x56 conv: NHWC with AVX-512 (brgconv), nChw8c (neither of
// ours, so NCHW is reported) with AVX2 jit. Feature maps kept in it need no reorder per conv.
Layout NativeLayout() {
  static const Layout layout = [] {
    try {
      const memory::dims x{1, 64, 56, 56};
      memory::desc xd(x, dt::f32, tag::any), wd({64, 64, 3, 3}, dt::f32, tag::any), yd(x, dt::f32, tag::any);
      dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, xd,
                                        wd, yd, {1, 1}, {0, 0}, {1, 1}, {1, 1});
      dnnl::convolution_forward::primitive_desc pd(d, Engine());
      return pd.src_desc() == memory::desc(x, dt::f32, tag::nhwc) ? Layout::kNHWC : Layout::kNCHW;
    } catch (const dnnl::error&) {
      return Layout::kNCHW;
    }
  }();
  return layout;
}

void AppendActivation(dnnl::post_ops& po, Activation a) {
  switch (a) {
    case Activation::kNone: break;
    case Activation::kRelu: po.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, 0.f, 0.f); break;
    case Activation::kRelu6: po.append_eltwise(1.f, dnnl::algorithm::eltwise_clip, 0.f, 6.f); break;
    case Activation::kSilu: po.append_eltwise(1.f, dnnl::algorithm::eltwise_swish, 1.f, 0.f); break;
    case Activation::kGelu: po.append_eltwise(1.f, dnnl::algorithm::eltwise_gelu_erf, 0.f, 0.f); break;
    case Activation::kSigmoid: po.append_eltwise(1.f, dnnl::algorithm::eltwise_logistic, 0.f, 0.f); break;
    case Activation::kTanh: po.append_eltwise(1.f, dnnl::algorithm::eltwise_tanh, 0.f, 0.f); break;
    // oneDNN's hardswish is x·min(max(αx + β, 0), 1) (dnnl.hpp algorithm::eltwise_hardswish).
    case Activation::kHardswish: po.append_eltwise(1.f, dnnl::algorithm::eltwise_hardswish, 1.f / 6.f, 0.5f); break;
  }
}

// Post-ops: the activation, then for a fused residual add oneDNN's sum post-op (dst = result +
// 1.0 * dst, dst holding the addend; an fp32 add, so it rounds exactly as the separate Add) and the
// activation after the add. oneDNN 2.6's brgconv kernels take no full-tensor binary post-op (they
// fall back to ref:any), hence sum.
dnnl::primitive_attr MakeAttr(Activation a, const std::optional<Activation>& residual = std::nullopt) {
  dnnl::primitive_attr attr;
  dnnl::post_ops po;
  AppendActivation(po, a);
  if (residual) {
    po.append_sum(1.f);
    AppendActivation(po, *residual);
  }
  attr.set_post_ops(po);
  return attr;
}

int64_t Macs(const std::vector<int64_t>& out, int64_t in_per_group, int64_t kh, int64_t kw) {
  return out[0] * out[1] * out[2] * out[3] * in_per_group * kh * kw;
}

// Runs `fn` and converts any escaping exception into a Status.
template <typename Fn>
auto Guard(const char* op, Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const dnnl::error& e) {
    if (e.status == dnnl_out_of_memory) {  // e.g. a buffer for an absurdly padded output
      return ResourceExhausted(std::string("reference ") + op + ": oneDNN could not allocate memory: " + e.what());
    }
    return Internal(std::string("reference ") + op + ": oneDNN error " + std::to_string(e.status) + ": " +
                    e.what());
  } catch (const std::bad_alloc&) {
    return ResourceExhausted(std::string("reference ") + op + ": out of memory");
  } catch (const std::exception& e) {
    return Internal(std::string("reference ") + op + ": " + e.what());
  }
}

Status CheckCancel(const ExecContext& ctx) { return ctx.cancel ? ctx.cancel->Check() : Status::Ok(); }

// oneDNN here runs on OpenMP: the calling thread's OpenMP thread count bounds the op's threads.
void ApplyThreads(int threads) {
  if (threads > 0 && omp_get_max_threads() != threads) omp_set_num_threads(threads);
}

void FillReport(const ExecContext& ctx, const char* op, const std::string& impl, const std::vector<int64_t>& out,
                int64_t macs, std::chrono::steady_clock::time_point t0) {
  if (!ctx.report) return;
  OpReport& r = *ctx.report;
  r.op = op;
  r.backend = kReferenceBackend;
  r.implementation = "oneDNN " + impl + " (fp32)";
  r.blocking.clear();
  r.precision = ctx.precision;
  r.output_shape = out;
  r.macs = macs;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// A conv-like forward primitive with its weights/bias already in the primitive's formats.
// Holds everything needed to run on inputs of one shape; not thread-safe (one user at a time).
class ConvExec {
 public:
  // conv2d (transpose = false): weights OIHW; conv_transpose2d (true): weights IOHW.
  static Result<std::unique_ptr<ConvExec>> Create(bool transpose, const std::vector<int64_t>& x_shape,
                                                  Layout layout, const Tensor& w, const Tensor* b,
                                                  std::array<int64_t, 2> strides,
                                                  std::array<int64_t, 2> dilations,
                                                  std::array<int64_t, 2> pad_l, std::array<int64_t, 2> pad_r,
                                                  int64_t group, Activation act,
                                                  std::vector<int64_t> prim_out_shape,
                                                  std::optional<Activation> residual_act = std::nullopt) {
    auto ex = std::unique_ptr<ConvExec>(new ConvExec());
    ex->transpose_ = transpose;
    ex->layout_ = layout;
    ex->x_shape_ = x_shape;
    ex->out_shape_ = prim_out_shape;
    dnnl::engine& eng = Engine();
    const int64_t C = x_shape[1], O = prim_out_shape[1];
    const auto& ws = w.shape();
    memory::desc w_user;
    if (!transpose) {
      if (group == 1) {
        w_user = memory::desc({O, C, ws[2], ws[3]}, dt::f32, tag::oihw);
      } else {
        w_user = memory::desc({group, O / group, C / group, ws[2], ws[3]}, dt::f32, tag::goihw);
      }
    } else {
      // ONNX ConvTranspose weights (C, O/group, kH, kW) = memory [g][C/g][O/g][kh][kw] → (g)iohw.
      if (group == 1) {
        w_user = memory::desc({O, C, ws[2], ws[3]}, dt::f32, tag::iohw);
      } else {
        w_user = memory::desc({group, O / group, C / group, ws[2], ws[3]}, dt::f32, tag::giohw);
      }
    }
    memory::desc w_any(w_user.dims(), dt::f32, tag::any);
    memory::desc b_md({O}, dt::f32, tag::a);
    memory::dims st{strides[0], strides[1]};
    memory::dims dl{dilations[0] - 1, dilations[1] - 1};  // oneDNN counts dilation from 0
    memory::dims pl{pad_l[0], pad_l[1]};
    memory::dims pr{pad_r[0], pad_r[1]};
    const bool residual = residual_act.has_value();
    ex->residual_ = residual;
    dnnl::primitive_attr attr = MakeAttr(act, residual_act);
    memory::desc src_md, wei_md, dst_md;
    // Creates the primitive for the given activation formats; false when oneDNN only offers its
    // slow reference implementation for them (or none).
    auto build = [&](tag act_tag, bool accept_ref) -> bool {
      memory::desc xd(Dims(x_shape), dt::f32, act_tag);
      memory::desc yd(Dims(prim_out_shape), dt::f32, act_tag);
      // Takes the primitive descriptor's implementation and formats; false for a rejected ref.
      auto adopt = [&](const auto& pd) {
        const std::string impl = pd.impl_info_str();
        if (!accept_ref && impl.rfind("ref", 0) == 0) return false;
        ex->impl_ = impl;
        src_md = pd.src_desc();
        wei_md = pd.weights_desc();
        dst_md = pd.dst_desc();
        return true;
      };
      try {
        if (!transpose) {
          auto d = b ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference,
                                                       dnnl::algorithm::convolution_direct, xd, w_any, b_md, yd,
                                                       st, dl, pl, pr)
                     : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference,
                                                       dnnl::algorithm::convolution_direct, xd, w_any, yd, st, dl,
                                                       pl, pr);
          dnnl::convolution_forward::primitive_desc pd(d, attr, eng);
          if (!adopt(pd)) return false;
          ex->prim_ = dnnl::convolution_forward(pd);
        } else {
          auto d = b ? dnnl::deconvolution_forward::desc(dnnl::prop_kind::forward_inference,
                                                         dnnl::algorithm::deconvolution_direct, xd, w_any, b_md,
                                                         yd, st, dl, pl, pr)
                     : dnnl::deconvolution_forward::desc(dnnl::prop_kind::forward_inference,
                                                         dnnl::algorithm::deconvolution_direct, xd, w_any, yd, st,
                                                         dl, pl, pr);
          dnnl::deconvolution_forward::primitive_desc pd(d, attr, eng);
          if (!adopt(pd)) return false;
          ex->prim_ = dnnl::deconvolution_forward(pd);
        }
      } catch (const dnnl::error&) {
        if (accept_ref) throw;
        return false;
      }
      return true;
    };
    // By default oneDNN chooses the activation format (format_tag::any) and Run() reorders only
    // when it differs from the caller's layout. See PreferDirectNhwc for the alternative.
    if (residual) {
      // Fused only where oneDNN's own choice of output format is the caller's layout: the sum
      // post-op needs the addend in dst, and forcing a format could pick another kernel (another
      // summation order) than the unfused conv.
      if (!build(tag::any, false) || dst_md != memory::desc(Dims(prim_out_shape), dt::f32, ActTag(layout))) {
        return Unimplemented("reference conv2d: no optimised oneDNN kernel fuses the residual add for input " +
                             ShapeToString(x_shape) + " " + LayoutName(layout));
      }
    } else {
      const bool direct = layout == Layout::kNHWC && PreferDirectNhwc() && build(tag::nhwc, false);
      if (!direct) build(tag::any, true);
    }
    dnnl::stream s(eng);
    // Weights: reorder once into the primitive's format.
    memory w_user_mem(w_user, eng, const_cast<float*>(w.data<float>()));
    ex->w_mem_ = memory(wei_md, eng);
    dnnl::reorder(w_user_mem, ex->w_mem_).execute(s, w_user_mem, ex->w_mem_);
    if (b) {
      ex->b_mem_ = memory(b_md, eng);
      std::memcpy(ex->b_mem_->get_data_handle(), b->data<float>(), static_cast<std::size_t>(O) * sizeof(float));
    }
    s.wait();
    ex->x_user_md_ = memory::desc(Dims(x_shape), dt::f32, ActTag(layout));
    ex->y_user_md_ = memory::desc(Dims(prim_out_shape), dt::f32, ActTag(layout));
    if (src_md != ex->x_user_md_) {
      ex->x_mem_ = memory(src_md, eng);
      ex->x_reorder_ = dnnl::reorder(memory(ex->x_user_md_, eng, nullptr), *ex->x_mem_);
    }
    if (dst_md != ex->y_user_md_) {
      ex->y_mem_ = memory(dst_md, eng);
      ex->y_reorder_ = dnnl::reorder(*ex->y_mem_, memory(ex->y_user_md_, eng, nullptr));
    }
    return ex;
  }

  // Runs on `x` (shape/layout as prepared) into `y` (allocated with out_shape_, layout_);
  // `addend` (same shape and layout as y) only for a conv created with a residual.
  void Run(const Tensor& x, Tensor& y, const Tensor* addend = nullptr) {
    dnnl::engine& eng = Engine();
    dnnl::stream s(eng);
    memory x_user(x_user_md_, eng, const_cast<float*>(x.data<float>()));
    memory y_user(y_user_md_, eng, y.data<float>());
    memory src = x_user;
    if (x_mem_) {
      x_reorder_.execute(s, x_user, *x_mem_);
      src = *x_mem_;
    }
    memory dst = y_mem_ ? *y_mem_ : y_user;
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, w_mem_}, {DNNL_ARG_DST, dst}};
    if (b_mem_) args.emplace(DNNL_ARG_BIAS, *b_mem_);
    if (addend != nullptr) std::memcpy(y.data<float>(), addend->data<float>(), y.size_bytes());  // sum post-op
    prim_.execute(s, args);
    if (y_mem_) y_reorder_.execute(s, *y_mem_, y_user);
    s.wait();
  }

  const std::string& impl() const { return impl_; }
  const std::vector<int64_t>& out_shape() const { return out_shape_; }
  bool has_residual() const { return residual_; }

 private:
  ConvExec() = default;
  bool residual_ = false;  // a fused residual add (sum post-op): dst is y, preloaded with the addend
  bool transpose_ = false;
  Layout layout_ = Layout::kNCHW;
  std::vector<int64_t> x_shape_, out_shape_;
  std::string impl_;
  dnnl::primitive prim_;
  memory w_mem_;
  std::optional<memory> b_mem_, x_mem_, y_mem_;
  dnnl::reorder x_reorder_, y_reorder_;
  memory::desc x_user_md_, y_user_md_;
};

// conv_transpose2d with output_padding beyond the end pad: the rows/cols past the full transposed
// output get no input contribution, i.e. act(bias). oneDNN is asked for the part it can express
// (padding_r >= 0) and the result is embedded into the larger output.
void EmbedWithBias(const Tensor& part, Tensor& out, const Tensor* bias, Activation act) {
  const auto& ps = part.shape();
  const auto& os = out.shape();
  const auto pst = part.strides();
  const auto ost = out.strides();
  const float* src = part.data<float>();
  float* dst = out.data<float>();
  for (int64_t n = 0; n < os[0]; ++n)
    for (int64_t c = 0; c < os[1]; ++c) {
      const float fill = ApplyActivation(act, bias ? bias->data<float>()[c] : 0.f);
      for (int64_t h = 0; h < os[2]; ++h)
        for (int64_t w = 0; w < os[3]; ++w) {
          const bool inside = h < ps[2] && w < ps[3];
          dst[n * ost[0] + c * ost[1] + h * ost[2] + w * ost[3]] =
              inside ? src[n * pst[0] + c * pst[1] + h * pst[2] + w * pst[3]] : fill;
        }
    }
}

class PreparedReferenceConv final : public PreparedConv {
 public:
  PreparedReferenceConv(std::unique_ptr<ConvExec> ex, std::vector<int64_t> x_shape, Layout layout,
                        PrecisionConfig precision, int64_t macs, int threads)
      : ex_(std::move(ex)),
        x_shape_(std::move(x_shape)),
        layout_(layout),
        precision_(precision),
        macs_(macs),
        threads_(threads) {}

  Result<Tensor> Run(const Tensor& input, const ExecContext& ctx) override {
    if (ex_->has_residual()) return InvalidArgument("prepared conv with a fused residual add needs RunResidual");
    return RunImpl(input, nullptr, ctx);
  }

  Result<Tensor> RunImpl(const Tensor& input, const Tensor* addend, const ExecContext& ctx) {
    const auto t0 = std::chrono::steady_clock::now();
    KILN_RETURN_IF_ERROR(CheckCancel(ctx));
    ApplyThreads(threads_);
    if (input.dtype() != DataType::kFloat32 || input.shape() != x_shape_ || input.layout() != layout_) {
      return InvalidArgument("prepared conv expects float32" + ShapeToString(x_shape_) + " " + LayoutName(layout_) +
                             ", got " + input.DebugString());
    }
    return Guard("conv2d", [&]() -> Result<Tensor> {
      auto y = Tensor::Zeros(ex_->out_shape(), DataType::kFloat32, layout_);
      if (!y.ok()) return y.status();
      ex_->Run(input, *y, addend);
      ExecContext c = ctx;
      c.precision = precision_;
      FillReport(c, "conv2d", ex_->impl(), ex_->out_shape(), macs_, t0);
      return std::move(*y);
    });
  }
  Result<Tensor> RunResidual(const Tensor& input, const Tensor& addend, const ExecContext& ctx) override {
    if (!ex_->has_residual()) return PreparedConv::RunResidual(input, addend, ctx);
    if (addend.dtype() != DataType::kFloat32 || addend.shape() != ex_->out_shape() || addend.layout() != layout_) {
      return InvalidArgument("prepared conv expects a float32" + ShapeToString(ex_->out_shape()) + " " +
                             LayoutName(layout_) + " addend, got " + addend.DebugString());
    }
    return RunImpl(input, &addend, ctx);
  }
  const std::vector<int64_t>& output_shape() const override { return ex_->out_shape(); }

 private:
  std::unique_ptr<ConvExec> ex_;
  std::vector<int64_t> x_shape_;
  Layout layout_;
  PrecisionConfig precision_;
  int64_t macs_;
  int threads_;
};

class ReferenceBackend final : public Backend {
 public:
  explicit ReferenceBackend(int threads) : threads_(threads) {}

  std::string name() const override { return kReferenceBackend; }

  BackendCapabilities capabilities() const override {
    BackendCapabilities c;
    c.conv2d = true;
    c.conv_transpose2d = true;
    c.pool2d = true;
    c.accepts_nhwc = true;
    c.preferred_layout = NativeLayout();
    c.honours_precision = false;
    c.deterministic = true;
    c.prepared_ops = true;
    c.fused_residual = true;
    c.add = true;
    c.add_activations = {Activation::kNone, Activation::kRelu,    Activation::kRelu6, Activation::kSilu,
                         Activation::kGelu, Activation::kSigmoid, Activation::kTanh, Activation::kHardswish};
    c.activations = {Activation::kNone, Activation::kRelu,    Activation::kRelu6, Activation::kSilu,
                     Activation::kGelu, Activation::kSigmoid, Activation::kTanh, Activation::kHardswish};
    c.description = "fp32 reference (oneDNN " + std::to_string(dnnl::version()->major) + "." +
                    std::to_string(dnnl::version()->minor) + "." + std::to_string(dnnl::version()->patch) +
                    ", CPU)";
    return c;
  }

  Result<Tensor> Conv2d(const Tensor& input, const Tensor& weights, const Tensor* bias, const Conv2dParams& p,
                        const ExecContext& ctx) override {
    const auto t0 = std::chrono::steady_clock::now();
    KILN_RETURN_IF_ERROR(CheckCancel(ctx));
    ApplyThreads(threads_);
    auto out = ValidateConv2d(input, weights, bias, p);
    if (!out.ok()) return out.status();
    return Guard("conv2d", [&]() -> Result<Tensor> {
      auto ex = ConvExec::Create(false, input.shape(), input.layout(), weights, bias, p.strides, p.dilations,
                                 {p.pads[0], p.pads[1]}, {p.pads[2], p.pads[3]}, p.group, p.activation, *out);
      if (!ex.ok()) return ex.status();
      auto y = Tensor::Zeros(*out, DataType::kFloat32, input.layout());
      if (!y.ok()) return y.status();
      (*ex)->Run(input, *y);
      FillReport(ctx, "conv2d", (*ex)->impl(), *out,
                 Macs(*out, weights.dim(1), weights.dim(2), weights.dim(3)), t0);
      return std::move(*y);
    });
  }

  Result<Tensor> ConvTranspose2d(const Tensor& input, const Tensor& weights, const Tensor* bias,
                                 const ConvTranspose2dParams& p, const ExecContext& ctx) override {
    const auto t0 = std::chrono::steady_clock::now();
    KILN_RETURN_IF_ERROR(CheckCancel(ctx));
    ApplyThreads(threads_);
    auto out = ValidateConvTranspose2d(input, weights, bias, p);
    if (!out.ok()) return out.status();
    return Guard("conv_transpose2d", [&]() -> Result<Tensor> {
      // output_padding enlarges the output at the end: oneDNN's padding_r = pad_end - output_padding.
      // Where that is negative, compute the expressible part and embed it (EmbedWithBias).
      std::array<int64_t, 2> pr{}, extra{};
      for (int i = 0; i < 2; ++i) {
        const int64_t r = p.pads[2 + i] - p.output_padding[i];
        pr[i] = std::max<int64_t>(r, 0);
        extra[i] = std::max<int64_t>(-r, 0);
      }
      std::vector<int64_t> prim_out = *out;
      prim_out[2] -= extra[0];
      prim_out[3] -= extra[1];
      auto y = Tensor::Zeros(*out, DataType::kFloat32, input.layout());
      if (!y.ok()) return y.status();
      std::string impl = "none";
      if (prim_out[2] >= 1 && prim_out[3] >= 1) {
        auto ex = ConvExec::Create(true, input.shape(), input.layout(), weights, bias, p.strides, p.dilations,
                                   {p.pads[0], p.pads[1]}, pr, p.group, p.activation, prim_out);
        if (!ex.ok()) return ex.status();
        impl = (*ex)->impl();
        if (extra[0] == 0 && extra[1] == 0) {
          (*ex)->Run(input, *y);
        } else {
          auto part = Tensor::Zeros(prim_out, DataType::kFloat32, input.layout());
          if (!part.ok()) return part.status();
          (*ex)->Run(input, *part);
          EmbedWithBias(*part, *y, bias, p.activation);
        }
      } else {
        // The whole output lies past the transposed input's reach: act(bias) everywhere.
        auto part = Tensor::Zeros({(*out)[0], (*out)[1], 0, 0}, DataType::kFloat32, input.layout());
        if (!part.ok()) return part.status();
        EmbedWithBias(*part, *y, bias, p.activation);
      }
      // MACs of the transposed conv: every input element meets every kernel tap once.
      const auto& x = input.shape();
      const int64_t macs = x[0] * x[1] * x[2] * x[3] * weights.dim(1) * weights.dim(2) * weights.dim(3);
      FillReport(ctx, "conv_transpose2d", impl, *out, macs, t0);
      return std::move(*y);
    });
  }

  Result<Tensor> Pool2d(const Tensor& input, const Pool2dParams& p, const ExecContext& ctx) override {
    const auto t0 = std::chrono::steady_clock::now();
    KILN_RETURN_IF_ERROR(CheckCancel(ctx));
    ApplyThreads(threads_);
    auto out = ValidatePool2d(input, p);
    if (!out.ok()) return out.status();
    return Guard("pool2d", [&]() -> Result<Tensor> {
      const auto& x = input.shape();
      // oneDNN needs OH = (IH + pl + pr - DK) / S + 1 exactly (floor): padding_r is whatever makes
      // that hold for the ONNX output size (ceil_mode's overhang adds to it).
      std::array<int64_t, 2> pr{};
      std::array<int64_t, 2> overhang{};
      for (int i = 0; i < 2; ++i) {
        const int64_t dk = DilatedKernel(p.kernel[i], p.dilations[i]);
        const int64_t needed = ((*out)[2 + i] - 1) * p.strides[i] + dk - x[2 + i] - p.pads[i];
        pr[i] = std::max(p.pads[2 + i], needed);
        overhang[i] = std::max<int64_t>(0, needed - p.pads[2 + i]);
      }
      dnnl::algorithm alg = p.kind == PoolKind::kMax ? dnnl::algorithm::pooling_max
                            : p.count_include_pad    ? dnnl::algorithm::pooling_avg_include_padding
                                                     : dnnl::algorithm::pooling_avg_exclude_padding;
      dnnl::engine& eng = Engine();
      memory::desc src_md(Dims(x), dt::f32, ActTag(input.layout()));
      memory::desc dst_md(Dims(*out), dt::f32, ActTag(input.layout()));
      dnnl::pooling_v2_forward::desc d(dnnl::prop_kind::forward_inference, alg, src_md, dst_md,
                                       {p.strides[0], p.strides[1]}, {p.kernel[0], p.kernel[1]},
                                       {p.dilations[0] - 1, p.dilations[1] - 1}, {p.pads[0], p.pads[1]},
                                       {pr[0], pr[1]});
      dnnl::pooling_v2_forward::primitive_desc pd(d, eng);
      auto y = Tensor::Zeros(*out, DataType::kFloat32, input.layout());
      if (!y.ok()) return y.status();
      dnnl::stream s(eng);
      memory src(src_md, eng, const_cast<float*>(input.data<float>()));
      memory dst(dst_md, eng, y->data<float>());
      std::unordered_map<int, memory> args{{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}};
      if (pd.workspace_desc().get_size() != 0) args.emplace(DNNL_ARG_WORKSPACE, memory(pd.workspace_desc(), eng));
      dnnl::pooling_v2_forward(pd).execute(s, args);
      s.wait();
      if (p.kind == PoolKind::kAverage && p.count_include_pad && (overhang[0] > 0 || overhang[1] > 0)) {
        CorrectIncludePadDivisor(p, x, *y);
      }
      FillReport(ctx, "pool2d", pd.impl_info_str(), *out,
                 (*out)[0] * (*out)[1] * (*out)[2] * (*out)[3] * p.kernel[0] * p.kernel[1], t0);
      return std::move(*y);
    });
  }

  // The exact fp32 sum a + b (one IEEE rounding), then the activation in fp32 (backend.h).
  Result<Tensor> Add(const Tensor& a, const Tensor& b, Activation act, const ExecContext& ctx) override {
    const auto t0 = std::chrono::steady_clock::now();
    KILN_RETURN_IF_ERROR(CheckCancel(ctx));
    auto y = AddFp32(a, b, act);
    if (!y.ok()) return y.status();
    FillReport(ctx, "add", "", a.shape(), 0, t0);
    if (ctx.report) ctx.report->implementation = "fp32 add";
    return std::move(*y);
  }

  Result<std::unique_ptr<PreparedConv>> PrepareConv2d(std::vector<int64_t> input_shape, Layout input_layout,
                                                      const Tensor& weights, const Tensor* bias,
                                                      const Conv2dParams& p,
                                                      const PrecisionConfig& precision) override {
    return Prepare(std::move(input_shape), input_layout, weights, bias, p, std::nullopt, precision);
  }

  Result<std::unique_ptr<PreparedConv>> PrepareConv2dResidual(std::vector<int64_t> input_shape, Layout input_layout,
                                                              const Tensor& weights, const Tensor* bias,
                                                              const Conv2dParams& p, Activation residual_activation,
                                                              const PrecisionConfig& precision) override {
    return Prepare(std::move(input_shape), input_layout, weights, bias, p, residual_activation, precision);
  }

 private:
  Result<std::unique_ptr<PreparedConv>> Prepare(std::vector<int64_t> input_shape, Layout input_layout,
                                                const Tensor& weights, const Tensor* bias, const Conv2dParams& p,
                                                std::optional<Activation> residual, const PrecisionConfig& precision) {
    if (weights.empty() || weights.dtype() != DataType::kFloat32 || weights.layout() != Layout::kNCHW) {
      return InvalidArgument("conv2d weights must be a float32 row-major OIHW tensor");
    }
    if (bias && (bias->empty() || bias->dtype() != DataType::kFloat32)) {
      return InvalidArgument("conv2d bias must be float32");
    }
    auto out = ValidateConv2dShapes(input_shape, weights.shape(), bias ? &bias->shape() : nullptr, p);
    if (!out.ok()) return out.status();
    return Guard("conv2d", [&]() -> Result<std::unique_ptr<PreparedConv>> {
      auto ex = ConvExec::Create(false, input_shape, input_layout, weights, bias, p.strides, p.dilations,
                                 {p.pads[0], p.pads[1]}, {p.pads[2], p.pads[3]}, p.group, p.activation, *out,
                                 residual);
      if (!ex.ok()) return ex.status();
      const int64_t macs = Macs(*out, weights.dim(1), weights.dim(2), weights.dim(3));
      return std::unique_ptr<PreparedConv>(
          new PreparedReferenceConv(std::move(*ex), std::move(input_shape), input_layout, precision, macs, threads_));
    });
  }

  int threads_ = 0;  // 0: OpenMP's default (all cores)

  // oneDNN's pooling_avg_include_padding divides every window by kH·kW, also where the window
  // overhangs past the explicit end pad (ceil_mode). ONNX / PyTorch count only taps inside
  // [-pad_begin, in + pad_end): rescale those windows (the count is separable per axis).
  static void CorrectIncludePadDivisor(const Pool2dParams& p, const std::vector<int64_t>& x, Tensor& y) {
    std::array<std::vector<int64_t>, 2> counts;
    for (int i = 0; i < 2; ++i) {
      const int64_t osz = y.dim(2 + i);
      counts[i].resize(static_cast<std::size_t>(osz));
      for (int64_t o = 0; o < osz; ++o) {
        int64_t c = 0;
        for (int64_t k = 0; k < p.kernel[i]; ++k) {
          const int64_t pos = o * p.strides[i] - p.pads[i] + k * p.dilations[i];
          if (pos >= -p.pads[i] && pos < x[2 + i] + p.pads[2 + i]) ++c;
        }
        counts[i][static_cast<std::size_t>(o)] = c;
      }
    }
    const auto st = y.strides();
    float* d = y.data<float>();
    const float full = static_cast<float>(p.kernel[0] * p.kernel[1]);
    for (int64_t oh = 0; oh < y.dim(2); ++oh)
      for (int64_t ow = 0; ow < y.dim(3); ++ow) {
        const int64_t cnt = counts[0][static_cast<std::size_t>(oh)] * counts[1][static_cast<std::size_t>(ow)];
        if (cnt == p.kernel[0] * p.kernel[1] || cnt == 0) continue;
        const float scale = full / static_cast<float>(cnt);
        for (int64_t n = 0; n < y.dim(0); ++n)
          for (int64_t c = 0; c < y.dim(1); ++c) d[n * st[0] + c * st[1] + oh * st[2] + ow * st[3]] *= scale;
      }
  }
};

}  // namespace

const std::vector<BackendSetting>& ReferenceBackendSettings() {
  static const std::vector<BackendSetting> settings = {
      {kReferenceThreadsSetting, std::to_string(kDefaultThreads),
       "OpenMP threads per op, 0..1024 (0 = all cores); set it when several devices share the cores"}};
  return settings;
}

Result<std::unique_ptr<Backend>> MakeReferenceBackend(const BackendOptions& options) {
  int threads = kDefaultThreads;
  for (const auto& [key, value] : options.settings) {
    if (key == kReferenceThreadsSetting) {
      char* end = nullptr;
      const long n = std::strtol(value.c_str(), &end, 10);
      if (value.empty() || *end != '\0' || n < 0 || n > 1024) {
        return InvalidArgument("reference backend: setting threads='" + value + "' is not an integer in 0..1024");
      }
      threads = static_cast<int>(n);
    } else {
      return UnknownBackendSetting("reference backend", key, ReferenceBackendSettings());
    }
  }
  return Guard("init", [&]() -> Result<std::unique_ptr<Backend>> {
    (void)Engine();  // fail early if oneDNN cannot create a CPU engine
    return std::unique_ptr<Backend>(new ReferenceBackend(threads));
  });
}

Status RegisterReferenceBackend(BackendRegistry& registry) {
  return registry.Register(
      kReferenceBackend, [](const BackendOptions& o) { return MakeReferenceBackend(o); }, ReferenceBackendSettings());
}

}  // namespace kiln::device
