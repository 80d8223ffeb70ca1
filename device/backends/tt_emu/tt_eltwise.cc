// Section numbers (§) cite docs/specs/tt-numerics.md, as in tt_eltwise.h.
#include "device/backends/tt_emu/tt_eltwise.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <vector>

#include "device/backends/builtin.h"
#include "device/backends/tt_emu/device_formats.h"
#include "device/numerics/formats.h"
#include "device/numerics/fpu.h"
#include "device/numerics/sfpu.h"

namespace kiln::device::tt_emu {

namespace nx = kiln::numerics;

namespace {

// Host conversion to `dt` (§2.1 / §2.2, as ttnn.from_torch), then the value the unpacker puts in
// Src (§4): the conversions of the conv operands (device_formats.h).
void ToSrc(const uint32_t* in, int n, DeviceDType dt, bool fp32_dst, uint32_t* src) {
  HostConvertGroup(in, n, dt, src);
  for (int i = 0; i < n; ++i) src[i] = UnpackToSrc(src[i], dt, fp32_dst);
}

// SFPU relu_max_tile(i, 6.0) on a Dst value (device/numerics/sfpu.h); exact: the result is the
// value, 0 or 6, all of them Dst values.
uint32_t Relu6Dst(uint32_t d) { return nx::FloatBits(nx::SfpuReluMax(nx::BitsFloat(d), 6.0f)); }

}  // namespace

AddConfig AddConfigFor(const PrecisionConfig& precision, Activation act) {
  AddConfig c;
  c.a_dtype = c.b_dtype = c.out_dtype = precision.EffectiveOutputDType();
  c.activation = act;
  c.arch = precision.arch;
  return c;
}

void AddGroup(const uint32_t* a, const uint32_t* b, int n, const AddConfig& cfg, uint32_t* out) {
  const bool fp32_dst = cfg.fp32_dst() || cfg.sfpu();
  std::array<uint32_t, 16> dst{};
  if (cfg.sfpu()) {
    // UnpackToDestFp32: both operands reach Dst unchanged; add_binary_tile in fp32 (RNE assumed).
    for (int i = 0; i < n; ++i) dst[i] = nx::FloatBits(nx::BitsFloat(a[i]) + nx::BitsFloat(b[i]));
  } else {
    std::array<uint32_t, 16> sa{}, sb{};
    ToSrc(a, n, cfg.a_dtype, fp32_dst, sa.data());
    ToSrc(b, n, cfg.b_dtype, fp32_dst, sb.data());
    nx::FpuConfig fc;
    fc.fp32_dst = fp32_dst;
    fc.arch = cfg.arch;
    fc.a_fmt = SrcFmtOf(cfg.a_dtype, fp32_dst);
    fc.b_fmt = SrcFmtOf(cfg.b_dtype, fp32_dst);
    for (int i = 0; i < n; ++i) dst[i] = nx::Elwadd(sa[i], sb[i], 0u, /*accumulate=*/false, fc);
  }
  if (cfg.activation == Activation::kRelu6) {
    for (int i = 0; i < n; ++i) dst[i] = Relu6Dst(dst[i]);
  }
  // The final pack (§3; ReLU as the packer's, §3.5), bfp values decoded as the host reads them (§2.3).
  PackRow(dst.data(), n, cfg.out_dtype, fp32_dst, cfg.activation == Activation::kRelu, /*host_view=*/true,
          /*precise=*/false, out);
}

Result<Tensor> Add(const Tensor& a, const Tensor& b, const AddConfig& cfg, const CancelToken* cancel,
                   OpReport* report) {
  const auto t0 = std::chrono::steady_clock::now();
  if (cancel != nullptr) KILN_RETURN_IF_ERROR(cancel->Check());
  KILN_RETURN_IF_ERROR(ValidateAdd(a, b));
  if (cfg.activation != Activation::kNone && cfg.activation != Activation::kRelu &&
      cfg.activation != Activation::kRelu6) {
    return Unimplemented(std::string("tt-emu add: fused activation ") + ActivationName(cfg.activation) +
                         " is not modelled (none, relu, relu6)");
  }
  if (cfg.sfpu() && cfg.out_dtype != DeviceDType::kFloat32) {
    return Unimplemented(std::string("tt-emu add: float32 inputs with a ") + DeviceDTypeName(cfg.out_dtype) +
                         " output (TT-NN adds a typecast) are not modelled");
  }
  auto y = Tensor::Zeros(a.shape(), DataType::kFloat32, a.layout());
  if (!y.ok()) return y.status();
  const auto* pa = reinterpret_cast<const uint32_t*>(a.data<float>());
  const auto* pb = reinterpret_cast<const uint32_t*>(b.data<float>());
  auto* py = reinterpret_cast<uint32_t*>(y->data<float>());
  const int64_t total = a.num_elements();
  const bool grouped = IsBfp(cfg.a_dtype) || IsBfp(cfg.b_dtype) || IsBfp(cfg.out_dtype);
  // NHWC (rank 3 / 4) stores channels contiguously, so groups are contiguous runs of each
  // position's channels, as are the elements of any non-block dtype.
  const bool channels_last = a.layout() == Layout::kNHWC && (a.rank() == 3 || a.rank() == 4);
  const int64_t N = a.dim(0), C = a.dim(1);
  const int64_t inner = total / std::max<int64_t>(1, N * C);
  if (!grouped || channels_last) {
    const int64_t row = grouped ? C : total;  // a group never spans two positions
    const int64_t rows = grouped ? total / std::max<int64_t>(1, C) : 1;
    for (int64_t r = 0; r < rows; ++r) {
      if (cancel != nullptr && (r & 1023) == 0) KILN_RETURN_IF_ERROR(cancel->Check());
      for (int64_t c0 = 0; c0 < row; c0 += 16) {
        const int n = static_cast<int>(std::min<int64_t>(16, row - c0));
        const int64_t o = r * row + c0;
        AddGroup(pa + o, pb + o, n, cfg, py + o);
      }
    }
  } else {
    // NCHW: the channels of one position are `inner` apart; gather one group at a time.
    std::array<uint32_t, 16> ga{}, gb{}, gy{};
    for (int64_t nn = 0; nn < N; ++nn) {
      if (cancel != nullptr) KILN_RETURN_IF_ERROR(cancel->Check());
      for (int64_t p = 0; p < inner; ++p) {
        for (int64_t c0 = 0; c0 < C; c0 += 16) {
          const int n = static_cast<int>(std::min<int64_t>(16, C - c0));
          const int64_t base = (nn * C + c0) * inner + p;
          for (int i = 0; i < n; ++i) {
            ga[i] = pa[base + i * inner];
            gb[i] = pb[base + i * inner];
          }
          AddGroup(ga.data(), gb.data(), n, cfg, gy.data());
          for (int i = 0; i < n; ++i) py[base + i * inner] = gy[i];
        }
      }
    }
  }
  if (report != nullptr) {
    report->op = "add";
    report->backend = kTtEmuBackend;
    report->implementation = cfg.sfpu() ? "ttnn.add sfpu" : "ttnn.add fpu (ELWADD)";
    report->blocking.clear();
    report->output_shape = a.shape();
    report->macs = 0;
    report->notes = {{"add_dtypes", std::string(DeviceDTypeName(cfg.a_dtype)) + " + " + DeviceDTypeName(cfg.b_dtype) +
                                        " -> " + DeviceDTypeName(cfg.out_dtype)},
                     {"add_dst", cfg.fp32_dst() || cfg.sfpu() ? "float32" : "bfloat16"}};
    if (cfg.activation == Activation::kRelu) report->notes.emplace_back("add_activation", "relu: packer ReLU");
    if (cfg.activation == Activation::kRelu6) report->notes.emplace_back("add_activation", "relu6: SFPU relu_max(6)");
    if (cfg.sfpu()) report->notes.emplace_back("add_unverified", "SFPU fp32 add rounding assumed RNE");
    report->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  return std::move(*y);
}

}  // namespace kiln::device::tt_emu
