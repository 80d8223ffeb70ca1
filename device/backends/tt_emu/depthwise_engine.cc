// Section numbers (§) cite docs/specs/tt-numerics.md; the program followed is described in
// depthwise_engine.h.
#include "device/backends/tt_emu/depthwise_engine.h"

#include <algorithm>
#include <array>
#include <optional>
#include <string>
#include <vector>

#include "device/backends/tt_emu/device_formats.h"
#include "device/numerics/formats.h"
#include "device/numerics/fpu.h"
#include "device/numerics/sfpu.h"

namespace kiln::device::tt_emu {

namespace nx = kiln::numerics;

namespace {

// A Dst value packed into a bf16 or float32 CB (§3.1–§3.3); fp32 patterns returned.
inline uint32_t PackScalar(uint32_t d, DeviceDType dt, bool fp32_dst) {
  uint32_t out;
  PackRow(&d, 1, dt, fp32_dst, /*relu=*/false, /*host_view=*/true, /*precise=*/false, &out);
  return out;
}

class DepthwiseEngine {
 public:
  DepthwiseEngine(const EmuGeometry& g, const ConvProgram& prog, const PrecisionConfig& p, Activation act)
      : g_(g), prog_(prog), p_(p) {
    fp32_dst_ = prog.fp32_dest_acc;
    in_dt_ = prog.act_dtype;  // in / mul / pre-tilize CB format
    wdt_ = prog.weights_dtype;
    if (act != Activation::kNone) sfpu_ = nx::SfpuOpForActivation(act);
    taps_ = g.kh * g.kw;
  }

  Status Prepare(const float* x, const float* w, const float* bias) {
    const EmuGeometry& g = g_;
    if (g.G != g.C || g.O != g.C || g.Cg != 1 || g.Og != 1) {
      return InvalidArgument("depthwise program: needs groups == Cin == Cout (got G=" + std::to_string(g.G) +
                             ", C=" + std::to_string(g.C) + ", O=" + std::to_string(g.O) + ")");
    }
    Cp_ = g.O_pad;  // channels the program computes (padded to tiles; the padding is zeros)
    const nx::SrcFormat a_fmt = SrcFmtOf(in_dt_, fp32_dst_), b_fmt = SrcFmtOf(wdt_, fp32_dst_);
    // Activations: host conversion in 16-channel groups of one pixel (bfp8 input: decoded to bf16 by
    // the halo, pool get_factory_parameters), then the in CB's SrcA operand.
    const int64_t HW = g.H * g.W, C16 = (g.C + 15) / 16 * 16;
    xa_.assign(static_cast<size_t>(g.N * HW * Cp_), 0);
    std::vector<uint32_t> pix(static_cast<size_t>(C16)), conv(static_cast<size_t>(C16));
    for (int64_t n = 0; n < g.N; ++n)
      for (int64_t s = 0; s < HW; ++s) {
        std::fill(pix.begin(), pix.end(), 0u);
        for (int64_t c = 0; c < g.C; ++c) pix[c] = nx::FloatBits(x[(n * g.C + c) * HW + s]);
        for (int64_t c0 = 0; c0 < C16; c0 += 16) HostConvertGroup(&pix[c0], 16, p_.input_dtype, &conv[c0]);
        uint32_t* d = &xa_[static_cast<size_t>((n * HW + s) * Cp_)];
        for (int64_t c = 0; c < g.C; ++c) {
          uint32_t v = conv[c];
          // A float32 input kept as float32 only when the CB is Float32; else the halo's bf16.
          if (p_.input_dtype == DeviceDType::kFloat32 && in_dt_ != DeviceDType::kFloat32)
            v = static_cast<uint32_t>(nx::HostFp32ToBf16(v)) << 16;
          d[c] = nx::MaskSrcOperand(UnpackToSrc(v, in_dt_, fp32_dst_), a_fmt);
        }
      }
    // Weights [tap][channel] in the weights dtype, bfp groups of 16 channels of one tap (the 2-D
    // depthwise face layout: one face row = 16 channels of one kernel position), SrcB operands.
    wb_.assign(static_cast<size_t>(taps_ * Cp_), 0);
    std::vector<uint32_t> row(16), rowc(16);
    for (int64_t t = 0; t < taps_; ++t)
      for (int64_t c0 = 0; c0 < Cp_; c0 += 16) {
        for (int i = 0; i < 16; ++i) row[i] = c0 + i < g.C ? nx::FloatBits(w[(c0 + i) * taps_ + t]) : 0u;
        HostConvertGroup(row.data(), 16, wdt_, rowc.data());
        for (int i = 0; i < 16; ++i)
          wb_[static_cast<size_t>(t * Cp_ + c0 + i)] = nx::MaskSrcOperand(UnpackToSrc(rowc[i], wdt_, fp32_dst_), b_fmt);
      }
    // Bias in the weights dtype (prepare_conv_bias_internal), row 0 of a tile: groups of 16
    // channels; read through SrcB by add_tiles.
    has_bias_ = bias != nullptr;
    bb_.assign(static_cast<size_t>(Cp_), 0);
    if (has_bias_) {
      for (int64_t c0 = 0; c0 < Cp_; c0 += 16) {
        for (int i = 0; i < 16; ++i) row[i] = c0 + i < g.C ? nx::FloatBits(bias[c0 + i]) : 0u;
        HostConvertGroup(row.data(), 16, wdt_, rowc.data());
        for (int i = 0; i < 16; ++i) bb_[static_cast<size_t>(c0 + i)] = UnpackToSrc(rowc[i], wdt_, fp32_dst_);
      }
    }
    return Status::Ok();
  }

  // Output rows [m0, m1).
  Status RunRows(int64_t m0, int64_t m1, const CancelToken* cancel, std::vector<uint32_t>* out) const {
    const EmuGeometry& g = g_;
    const nx::FpuConfig mul_cfg{fp32_dst_, p_.arch, SrcFmtOf(in_dt_, fp32_dst_), SrcFmtOf(wdt_, fp32_dst_)};
    // Reduce: SrcA = the mul CB (input data format), SrcB = the Float16_b scaler tile.
    const nx::FpuConfig red_cfg{fp32_dst_, p_.arch, SrcFmtOf(in_dt_, fp32_dst_), nx::SrcFormat::kBf16};
    // Bias: SrcA = the zero CB (Float16_b), SrcB = the bias CB (weights dtype).
    const nx::FpuConfig add_cfg{fp32_dst_, p_.arch, nx::SrcFormat::kBf16, SrcFmtOf(wdt_, fp32_dst_)};
    const MathFidelity fid = p_.math_fidelity;
    const bool approx = sfpu_ && nx::SfpuConvEpilogueApprox(*sfpu_);
    std::array<uint32_t, 16> ones;
    ones.fill(0x3F800000u);  // get_bf16_pool_scalar(AVG_POOL2D, divisor_override = 1) = bf16 1.0
    std::vector<int64_t> src(static_cast<size_t>(taps_));  // input pixel offset per tap, −1 = padding
    std::vector<uint32_t> dst(static_cast<size_t>(Cp_)), fin(static_cast<size_t>(Cp_));
    const int64_t P = g.OH * g.OW;
    for (int64_t m = m0; m < m1; ++m) {
      if (cancel && ((m - m0) % 64) == 0) KILN_RETURN_IF_ERROR(cancel->Check());
      const int64_t n = m / P, oy = (m % P) / g.OW, ox = m % g.OW;
      for (int64_t i = 0; i < g.kh; ++i)
        for (int64_t j = 0; j < g.kw; ++j) {
          const int64_t y = oy * g.sh - g.pt + i * g.dh, xx = ox * g.sw - g.pl + j * g.dw;
          src[static_cast<size_t>(i * g.kw + j)] =
              (y >= 0 && y < g.H && xx >= 0 && xx < g.W) ? ((n * g.H + y) * g.W + xx) * Cp_ : -1;
        }
      for (int64_t c = 0; c < Cp_; ++c) {
        uint32_t d = 0;
        // Chunks of up to 32 taps (one tilized tile of rows); faces of 16 taps.
        for (int64_t t0 = 0; t0 < taps_; t0 += 32) {
          std::array<uint32_t, 32> prod{};
          for (int64_t t = t0; t < std::min(taps_, t0 + 32); ++t) {
            const int64_t s = src[static_cast<size_t>(t)];
            const uint32_t xa = s < 0 ? 0u : xa_[static_cast<size_t>(s + c)];
            const uint32_t pr = nx::Elwmul(xa, wb_[static_cast<size_t>(t * Cp_ + c)], 0, fid, mul_cfg);
            // pack_tile to the mul CB, then the reduce's tilize unpacks it into SrcA.
            prod[static_cast<size_t>(t - t0)] = UnpackToSrc(PackScalar(pr, in_dt_, fp32_dst_), in_dt_, fp32_dst_);
          }
          for (int f = 0; f < 2 && t0 + 16 * f < taps_; ++f)
            d = nx::MvmulFidelity(std::span<const uint32_t, 16>(prod.data() + 16 * f, 16), ones, d, fid, red_cfg);
        }
        if (has_bias_) d = nx::Elwadd(0u, bb_[static_cast<size_t>(c)], d, /*accumulate=*/true, add_cfg);
        if (sfpu_) {
          const float f = nx::SfpuEval(*sfpu_, nx::BitsFloat(d), approx, p_.arch);
          d = fp32_dst_ ? nx::FloatBits(f) : static_cast<uint32_t>(nx::HostFp32ToBf16(nx::FloatBits(f))) << 16;
        }
        // pack_untilize_dest to the pre-tilize CB (input data format), fast_tilize back into Dst.
        uint32_t v = PackScalar(d, in_dt_, fp32_dst_);
        if (in_dt_ == DeviceDType::kFloat32) {
          v = fp32_dst_ ? (prog_.partial_reload == PartialReload::kTf32 ? nx::UnpackFp32ToTf32(v) : v)
                        : static_cast<uint32_t>(nx::UnpackFp32ToBf16(v)) << 16;
        }
        dst[static_cast<size_t>(c)] = ((v >> 23) & 0xFFu) == 0 ? 0u : v;
      }
      PackRow(dst.data(), Cp_, prog_.output_dtype, fp32_dst_, false, true, prog_.bfp8_pack_precise, fin.data());
      std::copy(fin.begin(), fin.begin() + g.O, out->begin() + m * g.O);
    }
    return Status::Ok();
  }

 private:
  EmuGeometry g_;
  const ConvProgram& prog_;
  PrecisionConfig p_;
  bool fp32_dst_ = false, has_bias_ = false;
  DeviceDType in_dt_ = DeviceDType::kBFloat16, wdt_ = DeviceDType::kBFloat16;
  std::optional<nx::SfpuOp> sfpu_;
  int64_t taps_ = 1, Cp_ = 32;
  std::vector<uint32_t> xa_, wb_, bb_;  // SrcA activations (NHW × Cp), SrcB weights (tap × Cp), bias
};

}  // namespace

Status RunDepthwiseProgram(const EmuGeometry& g, const ConvProgram& program, const PrecisionConfig& precision,
                           Activation activation, EmuLevel /*level: kFast runs the exact routine*/, const float* x,
                           const float* w, const float* bias, const CancelToken* cancel, int threads,
                           std::vector<uint32_t>* out) {
  DepthwiseEngine eng(g, program, precision, activation);
  KILN_RETURN_IF_ERROR(eng.Prepare(x, w, bias));
  out->assign(static_cast<size_t>(g.M * g.O), 0);
  // Rows split over OpenMP threads (the runtime the backend already uses) when worth it.
  const int64_t work = g.M * g.O_pad * g.kh * g.kw;
  const int n = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>({threads, g.M, work / 200000})));
  if (n <= 1) return eng.RunRows(0, g.M, cancel, out);
  std::vector<Status> st(static_cast<size_t>(n));
#pragma omp parallel for num_threads(n) schedule(static, 1)
  for (int t = 0; t < n; ++t) st[static_cast<size_t>(t)] = eng.RunRows(g.M * t / n, g.M * (t + 1) / n, cancel, out);
  for (const Status& s : st) KILN_RETURN_IF_ERROR(s);
  return Status::Ok();
}

}  // namespace kiln::device::tt_emu
