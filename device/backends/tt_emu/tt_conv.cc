// Section numbers (§) cite docs/specs/tt-numerics.md, as in tt_conv.h.
#include "device/backends/tt_emu/tt_conv.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <dnnl.hpp>

#include "device/backends/builtin.h"
#include "device/numerics/formats.h"
#include "device/numerics/fpu.h"

namespace kiln::device::tt_emu {

namespace nx = kiln::numerics;

const char* EmuLevelName(EmuLevel level) { return level == EmuLevel::kExact ? "exact" : "fast"; }

Result<EmuLevel> ParseEmuLevel(const std::string& name) {
  std::string s;
  for (char c : name) s.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  if (s == "exact") return EmuLevel::kExact;
  if (s == "fast") return EmuLevel::kFast;
  return InvalidArgument("unknown tt-emu level '" + name + "' (expected exact, fast)");
}

namespace {

inline int64_t RoundUp(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

struct Geometry {
  int64_t N, C, H, W, O, G, Cg, Og, kh, kw, sh, sw, dh, dw, pt, pl, OH, OW;
  int64_t Cin_pad, O_pad, K, M, block_w, nb;
};

// Host conversion of 16 fp32 patterns (one group) to a device dtype; returns the values as the
// device unpacker will read them (fp32 patterns; bf16-exact except for float32).
void HostConvertGroup(const uint32_t* in, int n, DeviceDType dt, uint32_t* out) {
  switch (dt) {
    case DeviceDType::kFloat32:
      for (int i = 0; i < n; ++i) out[i] = in[i];
      return;
    case DeviceDType::kBFloat16:
      for (int i = 0; i < n; ++i) out[i] = static_cast<uint32_t>(nx::HostFp32ToBf16(in[i])) << 16;
      return;
    case DeviceDType::kBFloat8B:
    case DeviceDType::kBFloat4B: {
      const nx::BfpFormat f = nx::BfpFormatOf(dt);
      std::array<uint32_t, 16> g{};
      for (int i = 0; i < n; ++i) g[i] = in[i];
      nx::BfpGroup enc = nx::HostEncodeBfpGroup(g, f, nx::HostBfpRounding::kCurrent);
      for (int i = 0; i < n; ++i) out[i] = static_cast<uint32_t>(nx::UnpackBfpToBf16(enc.exp, enc.codes[i], f)) << 16;
      return;
    }
  }
}

// Unpacks a stored fp32-pattern value of dtype `dt` into the FPU source register (§4).
inline uint32_t UnpackToSrc(uint32_t v, DeviceDType dt, bool fp32_dst) {
  if (dt == DeviceDType::kFloat32) {
    return fp32_dst ? nx::UnpackFp32ToTf32(v) : static_cast<uint32_t>(nx::UnpackFp32ToBf16(v)) << 16;
  }
  return v;  // bf16 / unpacked bfp are bf16-exact
}
inline nx::SrcFormat SrcFmtOf(DeviceDType dt, bool fp32_dst) {
  return (dt == DeviceDType::kFloat32 && fp32_dst) ? nx::SrcFormat::kTf32 : nx::SrcFormat::kBf16;
}

// Device packer of one row of Cout_pad Dst values to dtype `dt` (§3), with the packer ReLU (§3.5).
// host_view: bfloat8_b values decoded as the host does (§2.3) instead of the device unpacker (§4).
void PackRow(const uint32_t* dst, int64_t n, DeviceDType dt, bool fp32_dst, bool relu, bool host_view,
             uint32_t* out) {
  switch (dt) {
    case DeviceDType::kFloat32:
      for (int64_t i = 0; i < n; ++i) {
        uint32_t u = fp32_dst ? dst[i] : nx::PackBf16DstToFp32(static_cast<uint16_t>(dst[i] >> 16));
        out[i] = relu ? nx::PackerReluFp32(u) : u;
      }
      return;
    case DeviceDType::kBFloat16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t t = fp32_dst ? nx::PackFp32DstToBf16(dst[i]) : nx::PackBf16DstToBf16(static_cast<uint16_t>(dst[i] >> 16));
        if (relu) t = nx::PackerReluBf16(t);
        out[i] = static_cast<uint32_t>(t) << 16;
      }
      return;
    case DeviceDType::kBFloat8B:
    case DeviceDType::kBFloat4B: {
      const nx::BfpFormat f = nx::BfpFormatOf(dt);
      for (int64_t g0 = 0; g0 < n; g0 += 16) {
        std::array<uint16_t, 16> e{};
        for (int i = 0; i < 16 && g0 + i < n; ++i) {
          uint32_t d = dst[g0 + i];
          e[i] = fp32_dst ? nx::PackE8M6FromFp32Dst(d) : nx::PackE8M6FromBf16Dst(static_cast<uint16_t>(d >> 16));
          if (relu) e[i] = nx::PackerReluBf16(e[i]);
        }
        nx::BfpGroup g = nx::PackBfpStageB(e, f);
        for (int i = 0; i < 16 && g0 + i < n; ++i) {
          out[g0 + i] = host_view ? nx::FloatBits(nx::DecodeBfpValue(g.exp, g.codes[i], f))
                                  : static_cast<uint32_t>(nx::UnpackBfpToBf16(g.exp, g.codes[i], f)) << 16;
        }
      }
      return;
    }
  }
}

// Rounds an fp32 value into Dst (fast level): fp32 Dst keeps it (exponent-0 → +0); a bf16 Dst
// rounds half away from zero to 8 significant bits like §5.5's normaliser.
inline uint32_t RoundIntoDst(float v, bool fp32_dst) {
  uint32_t u = nx::FloatBits(v);
  u = (u & 0x7FFFFFFFu) > 0x7F800000u ? ((u & 0x80000000u) | 0x7F800000u) : u;  // NaN → ±Inf
  u = fp32_dst ? u : ((u + 0x8000u) & 0xFFFF0000u);
  return ((u >> 23) & 0xFFu) == 0 ? 0u : u;
}

bool IsRelu(Activation a) { return a == Activation::kRelu; }

Status MatmulF32(const dnnl::engine& eng, dnnl::stream& strm, const float* src, int64_t M, int64_t Kb, int64_t lda,
                 const float* wei, int64_t N, int64_t ldw_k, float* dst) {
  try {
    using md = dnnl::memory::desc;
    using dt = dnnl::memory::data_type;
    md src_md({M, Kb}, dt::f32, dnnl::memory::dims{lda, 1});
    md wei_md({Kb, N}, dt::f32, dnnl::memory::dims{1, ldw_k});
    md dst_md({M, N}, dt::f32, dnnl::memory::dims{N, 1});
    dnnl::matmul::desc d(src_md, wei_md, dst_md);
    dnnl::matmul::primitive_desc pd(d, eng);
    dnnl::memory sm(src_md, eng, const_cast<float*>(src));
    dnnl::memory wm(wei_md, eng, const_cast<float*>(wei));
    dnnl::memory dm(dst_md, eng, dst);
    dnnl::matmul(pd).execute(strm, {{DNNL_ARG_SRC, sm}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DST, dm}});
    strm.wait();
  } catch (const dnnl::error& e) {
    return Internal(std::string("oneDNN matmul failed: ") + e.what());
  }
  return Status::Ok();
}

// Exact level: a Src operand's phase slice packed in 32 bits (bits 0..7 slice, 8..15 exponent
// field, 0 for a zero lane; bit 16 sign), and §5.4's group term over 8 packed lanes. Same arithmetic
// as numerics::GroupTerm (the kacc32 end-to-end test checks this path bit for bit).
inline uint32_t PackLane(const nx::FpuSlice& s) {
  return s.exp == 0 ? 0u : (s.slice | (static_cast<uint32_t>(s.exp) << 8) | (static_cast<uint32_t>(s.sign) << 16));
}

// Both group terms of one 16-lane MVMUL. Branch-free int32 lanes (a shift of 14 or more already
// rounds a 12-bit product to 0, so d is capped at 14 instead of 30), vectorised where AVX2 exists.
__attribute__((target_clones("avx2", "default"))) void MvmulTerms(const uint32_t* a, const uint32_t* b, int adj,
                                                                 nx::FpuTerm* t0, nx::FpuTerm* t1) {
  int32_t ep[16], P[16], sg[16];
  for (int k = 0; k < 16; ++k) {
    const uint32_t x = a[k], y = b[k];
    const int32_t xe = static_cast<int32_t>((x >> 8) & 0xFFu), ye = static_cast<int32_t>((y >> 8) & 0xFFu);
    const int32_t nz = (xe != 0) & (ye != 0);
    ep[k] = nz ? xe + ye + adj : 0;
    P[k] = static_cast<int32_t>((x & 0xFFu) * (y & 0xFFu));  // zero lanes have slice 0
    sg[k] = static_cast<int32_t>(((x ^ y) >> 16) & 1u);
  }
  nx::FpuTerm* out[2] = {t0, t1};
  for (int h = 0; h < 2; ++h) {
    int32_t G = 0;
    for (int k = 0; k < 8; ++k) G = std::max(G, ep[h * 8 + k]);
    nx::FpuTerm t;
    if (G > 0) {
      int32_t S = 0;
      for (int k = 0; k < 8; ++k) {
        const int32_t d = std::min(G - ep[h * 8 + k], 14);
        const int32_t R = (2 * P[h * 8 + k] + (1 << d)) >> (d + 1);
        S += sg[h * 8 + k] ? -R : R;
      }
      t.sign = S < 0 ? 1 : 0;
      t.exp = G;
      t.mag = static_cast<uint64_t>(S < 0 ? -S : S) << 13;
    }
    *out[h] = t;
  }
}

class Engine {
 public:
  Engine(const Geometry& g, const PrecisionConfig& p, Activation act, EmuLevel level)
      : g_(g), p_(p), act_(act), level_(level) {
    fp32_dst_ = p.EffectiveFp32DestAcc();
    wdt_ = p.EffectiveWeightsDType();
    odt_ = p.EffectiveOutputDType();
    fid_ = p.math_fidelity;
    arch_ = p.arch;
  }

  // Device operands. x: NCHW input; w: OIHW weights; bias: [O] or null.
  void Prepare(const float* x, const float* w, const float* bias) {
    const Geometry& g = g_;
    // 1. activations: host conversion per pixel in 16-channel groups, then the tilize into the
    //    output dtype (device packer), then unpack to SrcB.
    xdev_.assign(static_cast<size_t>(g.N * g.H * g.W * g.Cin_pad), 0);  // NHWC, channels padded
    const bool in_fp32 = p_.input_dtype == DeviceDType::kFloat32;
    std::vector<uint32_t> pix(static_cast<size_t>(g.Cin_pad)), conv(static_cast<size_t>(g.Cin_pad));
    std::vector<uint32_t> tiled(static_cast<size_t>(g.Cin_pad));
    const int64_t HW = g.H * g.W;
    for (int64_t n = 0; n < g.N; ++n) {
      for (int64_t s = 0; s < HW; ++s) {
        std::fill(pix.begin(), pix.end(), 0u);
        for (int64_t c = 0; c < g.C; ++c) pix[c] = nx::FloatBits(x[(n * g.C + c) * HW + s]);
        for (int64_t c0 = 0; c0 < g.Cin_pad; c0 += 16) HostConvertGroup(&pix[c0], 16, p_.input_dtype, &conv[c0]);
        // Tilize into the output dtype: the packer from a Dst holding the input values.
        for (int64_t c0 = 0; c0 < g.Cin_pad; c0 += 16) {
          if (odt_ == DeviceDType::kFloat32) {
            std::copy(&conv[c0], &conv[c0] + 16, &tiled[c0]);
          } else {
            PackRow(&conv[c0], 16, odt_, in_fp32, /*relu=*/false, /*host_view=*/false, &tiled[c0]);
          }
        }
        for (int64_t c = 0; c < g.C; ++c)
          xdev_[(n * HW + s) * g.Cin_pad + c] =
              nx::MaskSrcOperand(UnpackToSrc(tiled[c], odt_, fp32_dst_), b_fmt());
      }
    }
    // 2. weights as [K, Cout_pad] with block-diagonal groups; stored o-major wdev_[o*K + k].
    //    Gathered 16 output channels at a time (one bfp group per K row), reading w row by row.
    wdev_.assign(static_cast<size_t>(g.O_pad * g.K), 0);
    std::vector<uint32_t> blk(static_cast<size_t>(16 * g.K));
    std::vector<uint32_t> row(16), rowc(16);
    for (int64_t o0 = 0; o0 < g.O_pad; o0 += 16) {
      std::fill(blk.begin(), blk.end(), 0u);
      for (int t = 0; t < 16; ++t) {
        const int64_t o = o0 + t;
        if (o >= g.O) continue;
        const int64_t c_base = (o / g.Og) * g.Cg;
        for (int64_t cl = 0; cl < g.Cg; ++cl)
          for (int64_t i = 0; i < g.kh; ++i)
            for (int64_t j = 0; j < g.kw; ++j)
              blk[t * g.K + (i * g.kw + j) * g.Cin_pad + c_base + cl] =
                  nx::FloatBits(w[((o * g.Cg + cl) * g.kh + i) * g.kw + j]);
      }
      for (int64_t k = 0; k < g.K; ++k) {
        bool any = false;
        for (int t = 0; t < 16; ++t) {
          row[t] = blk[t * g.K + k];
          any |= row[t] != 0;
        }
        if (!any) continue;  // an all-zero group stays zero in every format
        HostConvertGroup(row.data(), 16, wdt_, rowc.data());
        for (int t = 0; t < 16; ++t)
          wdev_[(o0 + t) * g.K + k] = nx::MaskSrcOperand(UnpackToSrc(rowc[t], wdt_, fp32_dst_), a_fmt());
      }
    }
    // 3. bias row in the weights dtype (groups of 16 output channels), read through SrcB.
    has_bias_ = bias != nullptr;
    bdev_.assign(static_cast<size_t>(g.O_pad), 0);
    if (has_bias_) {
      for (int64_t o0 = 0; o0 < g.O_pad; o0 += 16) {
        for (int t = 0; t < 16; ++t) row[t] = o0 + t < g.O ? nx::FloatBits(bias[o0 + t]) : 0u;
        HostConvertGroup(row.data(), 16, wdt_, rowc.data());
        for (int t = 0; t < 16; ++t) bdev_[o0 + t] = UnpackToSrc(rowc[t], wdt_, fp32_dst_);
      }
    }
    l1acc_ = p_.packer_l1_acc && ((has_bias_ && g.nb > 1) || g.nb > 2);
  }

  nx::SrcFormat a_fmt() const { return SrcFmtOf(wdt_, fp32_dst_); }
  nx::SrcFormat b_fmt() const {
    // The tilized activations are in the output dtype (§8.2).
    return SrcFmtOf(odt_, fp32_dst_);
  }
  bool l1acc() const { return l1acc_; }
  double fast_sums_seconds() const { return fast_sums_s_; }
  bool fp32_dst() const { return fp32_dst_; }

  // im2col of one output row m from an NHWC image with Cin_pad channels: K values, K order
  // (kh, kw, cin); spatial padding gives zeros.
  template <typename T>
  void Im2colRow(const std::vector<T>& img, int64_t m, T* out) const {
    const Geometry& g = g_;
    const int64_t n = m / (g.OH * g.OW), r = m % (g.OH * g.OW), oy = r / g.OW, ox = r % g.OW;
    for (int64_t i = 0; i < g.kh; ++i) {
      const int64_t y = oy * g.sh - g.pt + i * g.dh;
      for (int64_t j = 0; j < g.kw; ++j) {
        const int64_t xx = ox * g.sw - g.pl + j * g.dw;
        T* dstp = out + (i * g.kw + j) * g.Cin_pad;
        if (y < 0 || y >= g.H || xx < 0 || xx >= g.W) {
          std::fill(dstp, dstp + g.Cin_pad, T{});
          continue;
        }
        const T* src = &img[static_cast<size_t>(((n * g.H + y) * g.W + xx) * g.Cin_pad)];
        std::copy(src, src + g.Cin_pad, dstp);
      }
    }
  }

  // Runs the whole conv; out = (M, O) row-major host values (fp32 patterns). Output rows are
  // independent, so they are split over up to `threads` worker threads.
  Status Run(const CancelToken* cancel, int threads, std::vector<uint32_t>* out) {
    const Geometry& g = g_;
    out->assign(static_cast<size_t>(g.M * g.O), 0);
    if (level_ == EmuLevel::kFast) return RunFast(cancel, threads, out);
    for (int v = 0; v < 2; ++v) {
      wsl_[v].resize(wdev_.size());
      for (size_t i = 0; i < wdev_.size(); ++i) wsl_[v][i] = PackLane(nx::SliceA(wdev_[i], v));
    }
    wnz_.assign(static_cast<size_t>(g.O_pad * (g.K / 8)), 0);
    for (int64_t o = 0; o < g.O_pad; ++o)
      for (int64_t q = 0; q < g.K / 8; ++q)
        for (int t = 0; t < 8; ++t)
          if ((wdev_[o * g.K + q * 8 + t] >> 23) & 0xFFu) wnz_[o * (g.K / 8) + q] = 1;
    const int64_t per_row = g.O * g.K * nx::NumPhases(fid_);
    return Parallel(0, g.M, per_row, threads, [&](int64_t a, int64_t b) { return RunRows(a, b, cancel, out, nullptr, 0, 0); });
  }

  // Splits rows [m0, m1) over up to `threads` threads when the work is worth it.
  template <typename Fn>
  static Status Parallel(int64_t m0, int64_t m1, int64_t per_row, int threads, const Fn& fn) {
    const int64_t rows = m1 - m0;
    int n = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, rows * per_row / 200000)));
    n = static_cast<int>(std::min<int64_t>(n, rows));
    if (n <= 1) return fn(m0, m1);
    // OpenMP (the runtime oneDNN uses here) rather than std::thread: oneDNN's idle OpenMP workers
    // spin after each matmul and would compete with separate threads for the same cores.
    std::vector<Status> st(static_cast<size_t>(n));
#pragma omp parallel for num_threads(n) schedule(static, 1)
    for (int t = 0; t < n; ++t) {
      const int64_t a = m0 + rows * t / n, b = m0 + rows * (t + 1) / n;
      st[static_cast<size_t>(t)] = fn(a, b);
    }
    for (const Status& s : st) KILN_RETURN_IF_ERROR(s);
    return Status::Ok();
  }

  // Fast level, in chunks of output rows: im2col of the fidelity-slice images, one oneDNN fp32
  // matmul per K block (two for HiFi3), then the exact spill / bias / pack epilogue per row.
  Status RunFast(const CancelToken* cancel, int threads, std::vector<uint32_t>* out) {
    const Geometry& g = g_;
    // Operand variants (§5.2 slices as floats): A0 = top 5 significant bits, A' = all but mantissa
    // bit 0 (of 10); B0 = top 7 bits; B = all 11 bits; B1 = B − B0. Products of these are exact
    // in fp32 (at most 10 x 11 significant bits).
    auto mask = [](uint32_t u, uint32_t m) -> float {
      if (((u >> 23) & 0xFFu) == 0) return 0.0f;
      return nx::BitsFloat(u & m);
    };
    const bool lofi = fid_ == MathFidelity::kLoFi, hifi3 = fid_ == MathFidelity::kHiFi3,
               hifi4 = fid_ == MathFidelity::kHiFi4;
    // The weight variants replace wdev_ (not needed by the fast epilogue) to bound memory on
    // wide convs: the primary variant is converted in place, HiFi3's second one is a copy.
    const size_t wn = wdev_.size();
    std::vector<float> a0_copy;
    if (hifi3) {
      a0_copy.resize(wn);
      for (size_t i = 0; i < wn; ++i) a0_copy[i] = mask(wdev_[i], 0xFFF80000u);
    }
    std::vector<uint32_t> wvar = std::move(wdev_);
    wdev_.clear();
    for (size_t i = 0; i < wn; ++i) wvar[i] = nx::FloatBits(mask(wvar[i], lofi ? 0xFFF80000u : 0xFFFFC000u));
    // oneDNN reads these through a void pointer; the bit patterns are floats.
    const float* w_primary = reinterpret_cast<const float*>(wvar.data());  // A0 (LoFi) or A'
    const float* w_a0 = hifi3 ? a0_copy.data() : nullptr;
    const bool need_b0 = !hifi4, need_b1 = hifi3 || hifi4;
    std::vector<float> img0, img1;  // NHWC images: B0, and B1 (HiFi3) or B (HiFi4)
    if (need_b0) img0.resize(xdev_.size());
    if (need_b1) img1.resize(xdev_.size());
    for (size_t i = 0; i < xdev_.size(); ++i) {
      const float b0 = mask(xdev_[i], 0xFFFE0000u);
      if (need_b0) img0[i] = b0;
      if (need_b1) img1[i] = hifi3 ? mask(xdev_[i], 0xFFFFE000u) - b0 : mask(xdev_[i], 0xFFFFE000u);
    }
    // Default blocking (one K block per kernel row) without groups: one oneDNN convolution per
    // kernel row over the padded NHWC image, no im2col. Otherwise im2col + matmul in row chunks.
    if (g.G == 1 && g.nb == g.kh && g.block_w == g.Cin_pad * g.kw) {
      std::vector<float> sums(static_cast<size_t>(g.nb * g.M * g.O_pad));
      const auto t0 = std::chrono::steady_clock::now();
      KILN_RETURN_IF_ERROR(
          ConvRowSums(hifi4 ? img1 : img0, w_primary, hifi3 ? &img1 : nullptr, w_a0, sums.data()));
      fast_sums_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (cancel) KILN_RETURN_IF_ERROR(cancel->Check());
      return Parallel(0, g.M, g.O_pad * (g.nb + 4) * 8, threads,
                      [&](int64_t a, int64_t b) { return RunRows(a, b, cancel, out, sums.data(), 0, g.M); });
    }
    // Chunk of rows: im2col of R x K floats (about 16 MiB), large enough for efficient matmuls.
    const int64_t R = std::min<int64_t>(g.M, std::max<int64_t>(64, (int64_t{4} << 20) / std::max<int64_t>(1, g.K)));
    std::vector<float> c0, c1, sums(static_cast<size_t>(g.nb * R * g.O_pad)), tmp;
    if (need_b0) c0.resize(static_cast<size_t>(R * g.K));
    if (need_b1) c1.resize(static_cast<size_t>(R * g.K));
    if (hifi3) tmp.resize(static_cast<size_t>(R * g.O_pad));
    try {
      dnnl::engine eng(dnnl::engine::kind::cpu, 0);
      dnnl::stream strm(eng);
      for (int64_t m0 = 0; m0 < g.M; m0 += R) {
        if (cancel) KILN_RETURN_IF_ERROR(cancel->Check());
        const int64_t rows = std::min(R, g.M - m0);
        const auto t0 = std::chrono::steady_clock::now();
        KILN_RETURN_IF_ERROR(Parallel(0, rows, g.K * 2, threads, [&](int64_t a, int64_t b) {
          for (int64_t r = a; r < b; ++r) {
            if (need_b0) Im2colRow(img0, m0 + r, &c0[r * g.K]);
            if (need_b1) Im2colRow(img1, m0 + r, &c1[r * g.K]);
          }
          return Status::Ok();
        }));
        for (int64_t b = 0; b < g.nb; ++b) {
          const int64_t kb0 = b * g.block_w, kb = std::min(g.K, kb0 + g.block_w) - kb0;
          float* o = sums.data() + b * rows * g.O_pad;
          const float* src = hifi4 ? c1.data() : c0.data();
          KILN_RETURN_IF_ERROR(MatmulF32(eng, strm, src + kb0, rows, kb, g.K, w_primary + kb0, g.O_pad, g.K, o));
          if (hifi3) {
            KILN_RETURN_IF_ERROR(
                MatmulF32(eng, strm, c1.data() + kb0, rows, kb, g.K, w_a0 + kb0, g.O_pad, g.K, tmp.data()));
            for (int64_t i = 0; i < rows * g.O_pad; ++i) o[i] += tmp[static_cast<size_t>(i)];
          }
        }
        fast_sums_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        KILN_RETURN_IF_ERROR(Parallel(m0, m0 + rows, g.O_pad * (g.nb + 4) * 8, threads, [&](int64_t a, int64_t b) {
          return RunRows(a, b, cancel, out, sums.data(), m0, rows);
        }));
      }
    } catch (const dnnl::error& e) {
      return Internal(std::string("oneDNN: ") + e.what());
    }
    return Status::Ok();
  }

  // sums[i][m][o] = Σ_{j, c} W[o, c, i, j]·X[n, y(oy, i), x(ox, j), c] for every kernel row i, with
  // oneDNN f32 convolutions (kernel 1 x kW) on the zero-padded NHWC image of `img` (Cin_pad
  // channels, only C used); `w` is the [O_pad][K] variant matrix. With `img2`/`w2` (HiFi3) a second
  // product is added.
  Status ConvRowSums(const std::vector<float>& img, const float* w, const std::vector<float>* img2, const float* w2,
                     float* sums) const {
    const Geometry& g = g_;
    const int64_t Hp = (g.OH - 1) * g.sh + (g.kh - 1) * g.dh + 1, Wp = (g.OW - 1) * g.sw + (g.kw - 1) * g.dw + 1;
    auto pad_image = [&](const std::vector<float>& src) {
      std::vector<float> xp(static_cast<size_t>(g.N * Hp * Wp * g.C), 0.0f);
      for (int64_t n = 0; n < g.N; ++n)
        for (int64_t yp = 0; yp < Hp; ++yp) {
          const int64_t y = yp - g.pt;
          if (y < 0 || y >= g.H) continue;
          for (int64_t xq = 0; xq < Wp; ++xq) {
            const int64_t x = xq - g.pl;
            if (x < 0 || x >= g.W) continue;
            const float* s = &src[static_cast<size_t>(((n * g.H + y) * g.W + x) * g.Cin_pad)];
            std::copy(s, s + g.C, &xp[static_cast<size_t>(((n * Hp + yp) * Wp + xq) * g.C)]);
          }
        }
      return xp;
    };
    try {
      using md = dnnl::memory::desc;
      using dt = dnnl::memory::data_type;
      using tag = dnnl::memory::format_tag;
      dnnl::engine eng(dnnl::engine::kind::cpu, 0);
      dnnl::stream strm(eng);
      // Kernel row i reads padded rows i·dH + oy·sH: they are gathered into a dense (N, OH, Wp, C)
      // image, so one convolution (kernel 1 x kW, stride (1, sW)) covers the whole batch.
      const md src_md({g.N, g.C, g.OH, Wp}, dt::f32, tag::nhwc);
      const md wei_any({g.O_pad, g.C, 1, g.kw}, dt::f32, tag::any);
      const md wei_plain({g.O_pad, g.C, 1, g.kw}, dt::f32, tag::oihw);
      const md dst_md({g.N, g.O_pad, g.OH, g.OW}, dt::f32, tag::nhwc);
      dnnl::convolution_forward::desc cd(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                         src_md, wei_any, dst_md, {1, g.sw}, {0, g.dw - 1}, {0, 0}, {0, 0});
      dnnl::convolution_forward::primitive_desc pd(cd, eng);
      dnnl::convolution_forward conv(pd);
      std::vector<float> tmp, rows(static_cast<size_t>(g.N * g.OH * Wp * g.C));
      for (int pass = 0; pass < (img2 ? 2 : 1); ++pass) {
        const std::vector<float> xp = pad_image(pass == 0 ? img : *img2);
        const float* wm = pass == 0 ? w : w2;
        float* dst_base = sums;
        if (pass == 1) {
          tmp.assign(static_cast<size_t>(g.nb * g.M * g.O_pad), 0.0f);
          dst_base = tmp.data();
        }
        for (int64_t i = 0; i < g.kh; ++i) {
          // Weights of kernel row i as OIHW (O_pad, C, 1, kW), reordered to the primitive's format.
          std::vector<float> wi(static_cast<size_t>(g.O_pad * g.C * g.kw));
          for (int64_t o = 0; o < g.O_pad; ++o)
            for (int64_t c = 0; c < g.C; ++c)
              for (int64_t j = 0; j < g.kw; ++j)
                wi[static_cast<size_t>((o * g.C + c) * g.kw + j)] = wm[o * g.K + (i * g.kw + j) * g.Cin_pad + c];
          dnnl::memory wplain(wei_plain, eng, wi.data());
          dnnl::memory wmem(pd.weights_desc(), eng);
          dnnl::reorder(wplain, wmem).execute(strm, wplain, wmem);
          const size_t row_len = static_cast<size_t>(Wp * g.C);
          for (int64_t n = 0; n < g.N; ++n)
            for (int64_t oy = 0; oy < g.OH; ++oy) {
              const float* s = &xp[static_cast<size_t>(n * Hp + i * g.dh + oy * g.sh) * row_len];
              std::copy(s, s + row_len, &rows[static_cast<size_t>(n * g.OH + oy) * row_len]);
            }
          dnnl::memory sm(src_md, eng, rows.data());
          dnnl::memory dm(dst_md, eng, dst_base + i * g.M * g.O_pad);
          conv.execute(strm, {{DNNL_ARG_SRC, sm}, {DNNL_ARG_WEIGHTS, wmem}, {DNNL_ARG_DST, dm}});
          strm.wait();
        }
      }
      if (img2) {
        for (size_t k = 0; k < tmp.size(); ++k) sums[k] += tmp[k];
      }
    } catch (const dnnl::error& e) {
      return Internal(std::string("oneDNN convolution failed: ") + e.what());
    }
    return Status::Ok();
  }

  // Rows [m_begin, m_end): the MVMUL chain per K block (exact) or the block sums `sums`
  // ([nb][sums_rows][O_pad] for rows from sums_m0, fast), then spills, bias, activation, pack.
  Status RunRows(int64_t m_begin, int64_t m_end, const CancelToken* cancel, std::vector<uint32_t>* out,
                 const float* sums, int64_t sums_m0, int64_t sums_rows) const {
    const Geometry& g = g_;
    std::vector<uint32_t> xrow(static_cast<size_t>(g.K));
    std::vector<uint32_t> xsl[2];
    xsl[0].resize(static_cast<size_t>(g.K));
    xsl[1].resize(static_cast<size_t>(g.K));
    std::vector<uint8_t> xnz(static_cast<size_t>(g.K / 8));
    std::vector<uint32_t> dst(static_cast<size_t>(g.O_pad)), part(static_cast<size_t>(g.O_pad)),
        l1(static_cast<size_t>(g.O_pad)), fin(static_cast<size_t>(g.O_pad));
    const int nph = nx::NumPhases(fid_);
    const DeviceDType part_dt = l1acc_ ? (fp32_dst_ ? DeviceDType::kFloat32 : DeviceDType::kBFloat16) : odt_;
    const nx::FpuConfig elw_cfg{fp32_dst_, arch_, SrcFmtOf(part_dt, fp32_dst_), SrcFmtOf(wdt_, fp32_dst_)};
    const bool relu = IsRelu(act_);
    for (int64_t m = m_begin; m < m_end; ++m) {
      if (cancel && ((m - m_begin) % 64) == 0) KILN_RETURN_IF_ERROR(cancel->Check());
      if (level_ == EmuLevel::kExact) {
        Im2colRow(xdev_, m, xrow.data());
        for (int64_t k = 0; k < g.K; ++k) {
          xsl[0][k] = PackLane(nx::SliceB(xrow[k], 0));
          xsl[1][k] = PackLane(nx::SliceB(xrow[k], 2));
        }
        for (int64_t q = 0; q < g.K / 8; ++q) {
          uint8_t nz = 0;
          for (int t = 0; t < 8; ++t) nz |= ((xrow[q * 8 + t] >> 23) & 0xFFu) != 0;
          xnz[q] = nz;
        }
      }
      for (int64_t b = 0; b < g.nb; ++b) {
        const int64_t kb0 = b * g.block_w, kb1 = std::min(g.K, kb0 + g.block_w);
        const bool from_zero = b == 0 || l1acc_;
        if (level_ == EmuLevel::kFast) {
          // Padded channels have zero weights, so their sums (and Dst) are 0 like the card's.
          const float* sb = sums + (b * sums_rows + (m - sums_m0)) * g.O_pad;
          if (from_zero) {
            for (int64_t o = 0; o < g.O_pad; ++o) dst[o] = RoundIntoDst(sb[o], fp32_dst_);
          } else {
            for (int64_t o = 0; o < g.O_pad; ++o) dst[o] = RoundIntoDst(nx::BitsFloat(part[o]) + sb[o], fp32_dst_);
          }
        }
        for (int64_t o = 0; o < g.O_pad && level_ == EmuLevel::kExact; ++o) {
          uint32_t d = from_zero ? 0u : part[o];
          if (o >= g.O) {
            dst[o] = 0;
            continue;
          }
          const uint8_t* wn = &wnz_[o * (g.K / 8)];
          for (int64_t t0 = kb0; t0 < kb1; t0 += 32) {
            for (int ph = 0; ph < nph; ++ph) {
              const uint32_t* A = &wsl_[ph & 1][o * g.K];
              const uint32_t* B = xsl[(ph >> 1) & 1].data();
              const int adj = nx::PhaseAdjust(ph);
              for (int64_t k0 = t0; k0 < t0 + 32; k0 += 16) {
                const int64_t q0 = k0 / 8, q1 = q0 + 1;
                const bool nz0 = wn[q0] && xnz[q0], nz1 = wn[q1] && xnz[q1];
                if (!nz0 && !nz1) continue;
                nx::FpuTerm t0t, t1t;
                MvmulTerms(A + k0, B + k0, adj, &t0t, &t1t);
                d = nx::CombineWithDst(t0t, t1t, d, fp32_dst_, arch_);
              }
            }
          }
          dst[o] = d;
        }
        const bool last = b == g.nb - 1;
        if (l1acc_) {
          for (int64_t o = 0; o < g.O_pad; ++o) {
            if (fp32_dst_) {
              l1[o] = b == 0 ? dst[o] : nx::PackL1AccFp32(l1[o], dst[o]);
            } else {
              uint16_t nv = nx::PackBf16DstToBf16(static_cast<uint16_t>(dst[o] >> 16));
              l1[o] = b == 0 ? static_cast<uint32_t>(nv) << 16
                             : static_cast<uint32_t>(nx::PackL1AccBf16(static_cast<uint16_t>(l1[o] >> 16), nv)) << 16;
            }
          }
          if (last) part = l1;
        } else if (!last || has_bias_) {
          PackRow(dst.data(), g.O_pad, odt_, fp32_dst_, false, false, part.data());
        }
      }
      // Epilogue: bias (ELWADD on partials), or the L1-accumulated value reloaded, or Dst as is.
      if (has_bias_) {
        for (int64_t o = 0; o < g.O_pad; ++o)
          dst[o] = nx::Elwadd(UnpackToSrc(part[o], part_dt, fp32_dst_), bdev_[o], 0, false, elw_cfg);
      } else if (l1acc_) {
        dst = part;  // fp32 / bf16 partial reloaded into Dst exactly
      }
      if (act_ != Activation::kNone && !relu) {
        for (int64_t o = 0; o < g.O_pad; ++o) {
          float f = ApplyActivation(act_, nx::BitsFloat(dst[o]));
          dst[o] = fp32_dst_ ? nx::FloatBits(f) : static_cast<uint32_t>(nx::HostFp32ToBf16(nx::FloatBits(f))) << 16;
        }
      }
      PackRow(dst.data(), g.O_pad, odt_, fp32_dst_, relu, /*host_view=*/true, fin.data());
      std::copy(fin.begin(), fin.begin() + g.O, out->begin() + m * g.O);
    }
    return Status::Ok();
  }

 private:
  Geometry g_;
  PrecisionConfig p_;
  Activation act_;
  EmuLevel level_;
  bool fp32_dst_ = false;
  double fast_sums_s_ = 0;
  bool has_bias_ = false;
  bool l1acc_ = false;
  MathFidelity fid_;
  Arch arch_;
  DeviceDType wdt_ = DeviceDType::kFloat32, odt_ = DeviceDType::kBFloat16;
  std::vector<uint32_t> xdev_, wdev_, bdev_;
  std::vector<uint32_t> wsl_[2];  // exact: packed SrcA lanes per phase variant (p & 1)
  std::vector<uint8_t> wnz_;      // exact: per (o, 8-lane group) any non-zero weight
};

std::string BlockingText(const Geometry& g, const PrecisionConfig& p, bool l1acc, bool fp32_dst) {
  std::string s = "K=" + std::to_string(g.K) + " (kh*kw*Cin_pad = " + std::to_string(g.kh) + "*" + std::to_string(g.kw) +
                  "*" + std::to_string(g.Cin_pad) + ") in " + std::to_string(g.nb) + " block" + (g.nb > 1 ? "s" : "") +
                  " of " + std::to_string(g.block_w) + " (act_block_w=" + std::to_string(g.block_w / 32) + " tiles" +
                  (p.act_block_w == 0 ? ", height-sharded default" : "") + "), partials ";
  if (l1acc) {
    s += DeviceDTypeName(fp32_dst ? DeviceDType::kFloat32 : DeviceDType::kBFloat16);
    s += " accumulated in L1 (packer_l1_acc)";
  } else {
    s += DeviceDTypeName(p.EffectiveOutputDType());
  }
  s += std::string(", Dst ") + (fp32_dst ? "fp32" : "bf16");
  return s;
}

Result<Tensor> RunConv(const Tensor& input, const Tensor& weights, const Tensor* bias, const Conv2dParams& params,
                       const PrecisionConfig& precision, EmuLevel level, const CancelToken* cancel, OpReport* report,
                       const char* op_name, const std::vector<std::pair<std::string, std::string>>& extra_notes) {
  auto t_start = std::chrono::steady_clock::now();
  KILN_RETURN_IF_ERROR(precision.Validate());
  if (cancel) KILN_RETURN_IF_ERROR(cancel->Check());
  auto out_shape = ValidateConv2d(input, weights, bias, params);
  if (!out_shape.ok()) return out_shape.status();
  auto nchw = input.ToLayout(Layout::kNCHW);  // a plain copy when it already is
  if (!nchw.ok()) return nchw.status();
  Tensor x = std::move(*nchw);
  Geometry g{};
  g.N = x.dim(0);
  g.C = x.dim(1);
  g.H = x.dim(2);
  g.W = x.dim(3);
  g.O = weights.dim(0);
  g.G = params.group;
  g.Cg = g.C / g.G;
  g.Og = g.O / g.G;
  g.kh = weights.dim(2);
  g.kw = weights.dim(3);
  g.sh = params.strides[0];
  g.sw = params.strides[1];
  g.dh = params.dilations[0];
  g.dw = params.dilations[1];
  g.pt = params.pads[0];
  g.pl = params.pads[1];
  g.OH = (*out_shape)[2];
  g.OW = (*out_shape)[3];
  g.Cin_pad = RoundUp(g.C, 32);
  g.O_pad = RoundUp(g.O, 32);
  g.K = g.kh * g.kw * g.Cin_pad;
  g.M = g.N * g.OH * g.OW;
  g.block_w = precision.act_block_w > 0 ? static_cast<int64_t>(precision.act_block_w) * 32 : RoundUp(g.Cin_pad * g.kw, 32);
  g.nb = (g.K + g.block_w - 1) / g.block_w;
  Engine eng(g, precision, params.activation, level);
  const auto t_prep = std::chrono::steady_clock::now();
  eng.Prepare(x.data<float>(), weights.data<float>(), bias ? bias->data<float>() : nullptr);
  const auto t_run = std::chrono::steady_clock::now();
  std::vector<uint32_t> out;
  KILN_RETURN_IF_ERROR(eng.Run(cancel, static_cast<int>(std::max(1u, std::thread::hardware_concurrency())), &out));
  const auto t_done = std::chrono::steady_clock::now();

  auto t = Tensor::Zeros(*out_shape);
  if (!t.ok()) return t.status();
  float* dst = t->data<float>();
  const int64_t P = g.OH * g.OW;
  for (int64_t m = 0; m < g.M; ++m) {
    const int64_t n = m / P, s = m % P;
    for (int64_t o = 0; o < g.O; ++o) dst[(n * g.O + o) * P + s] = nx::BitsFloat(out[m * g.O + o]);
  }
  Tensor result = std::move(*t);
  if (input.layout() != Layout::kNCHW) {
    auto c = result.ToLayout(input.layout());
    if (!c.ok()) return c.status();
    result = std::move(*c);
  }
  if (report) {
    report->op = op_name;
    report->backend = kTtEmuBackend;
    report->implementation = EmuLevelName(level);
    report->blocking = BlockingText(g, precision, eng.l1acc(), eng.fp32_dst());
    report->precision = precision.Resolved();
    report->output_shape = *out_shape;
    report->macs = g.N * g.O * g.OH * g.OW * g.Cg * g.kh * g.kw;
    report->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
    report->notes = extra_notes;
    report->notes.emplace_back("fp32_dest_acc_en", eng.fp32_dst() ? "true" : "false");
    report->notes.emplace_back("packer_l1_acc_effective", eng.l1acc() ? "true" : "false");
    report->notes.emplace_back("cin_pad", std::to_string(g.Cin_pad));
    report->notes.emplace_back("cout_pad", std::to_string(g.O_pad));
    auto secs = [](auto a, auto b) { return std::to_string(std::chrono::duration<double>(b - a).count()); };
    report->notes.emplace_back("prepare_s", secs(t_prep, t_run));
    report->notes.emplace_back("run_s", secs(t_run, t_done));
    if (level == EmuLevel::kFast) report->notes.emplace_back("fast_matmul_s", std::to_string(eng.fast_sums_seconds()));
  }
  return result;
}

}  // namespace

Result<Tensor> Conv2d(const Tensor& input, const Tensor& weights, const Tensor* bias, const Conv2dParams& params,
                      const PrecisionConfig& precision, EmuLevel level, const CancelToken* cancel, OpReport* report) {
  return RunConv(input, weights, bias, params, precision, level, cancel, report, "conv2d", {});
}

Result<Tensor> ConvTranspose2d(const Tensor& input, const Tensor& weights, const Tensor* bias,
                               const ConvTranspose2dParams& params, const PrecisionConfig& precision, EmuLevel level,
                               const CancelToken* cancel, OpReport* report) {
  auto out_shape = ValidateConvTranspose2d(input, weights, bias, params);
  if (!out_shape.ok()) return out_shape.status();
  auto nchw = input.ToLayout(Layout::kNCHW);  // a plain copy when it already is
  if (!nchw.ok()) return nchw.status();
  Tensor x = std::move(*nchw);
  const int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3);
  const int64_t G = params.group, Cg = C / G, Og = weights.dim(1), O = Og * G;
  const int64_t kh = weights.dim(2), kw = weights.dim(3);
  const int64_t sh = params.strides[0], sw = params.strides[1], dh = params.dilations[0], dw = params.dilations[1];
  const int64_t OH = (*out_shape)[2], OW = (*out_shape)[3];
  // Stride-dilated, padded input: row y' of X' is dilated-input row y' − pbh, pbh = dh·(kh−1) − pad_top.
  const int64_t Hp = OH + dh * (kh - 1), Wp = OW + dw * (kw - 1);
  const int64_t pbh = dh * (kh - 1) - params.pads[0], pbw = dw * (kw - 1) - params.pads[1];
  auto xp = Tensor::Zeros({N, C, Hp, Wp});
  if (!xp.ok()) return xp.status();
  const float* xs = x.data<float>();
  float* xd = xp->data<float>();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t y = 0; y < Hp; ++y) {
        const int64_t ry = y - pbh;
        if (ry < 0 || ry % sh != 0 || ry / sh >= H) continue;
        for (int64_t xx = 0; xx < Wp; ++xx) {
          const int64_t rx = xx - pbw;
          if (rx < 0 || rx % sw != 0 || rx / sw >= W) continue;
          xd[((n * C + c) * Hp + y) * Wp + xx] = xs[((n * C + c) * H + ry / sh) * W + rx / sw];
        }
      }
  // Mirrored kernel: W'[o, cl, i, j] = W[g·Cg + cl, o − g·Og, kh−1−i, kw−1−j] (IOHW → OIHW).
  auto wp = Tensor::Zeros({O, Cg, kh, kw});
  if (!wp.ok()) return wp.status();
  const float* ws = weights.data<float>();
  float* wd = wp->data<float>();
  for (int64_t o = 0; o < O; ++o) {
    const int64_t grp = o / Og, ol = o % Og;
    for (int64_t cl = 0; cl < Cg; ++cl)
      for (int64_t i = 0; i < kh; ++i)
        for (int64_t j = 0; j < kw; ++j)
          wd[((o * Cg + cl) * kh + i) * kw + j] = ws[(((grp * Cg + cl) * Og + ol) * kh + (kh - 1 - i)) * kw + (kw - 1 - j)];
  }
  Conv2dParams cp;
  cp.strides = {1, 1};
  cp.dilations = {dh, dw};
  cp.pads = {0, 0, 0, 0};
  cp.group = G;
  cp.activation = params.activation;
  auto r = RunConv(*xp, *wp, bias, cp, precision, level, cancel, report, "conv_transpose2d",
                   {{"conv_transpose2d", "conv2d over the stride-dilated padded input " + ShapeToString(xp->shape()) +
                                             " with the mirrored kernel (mirror_kernel=true)"}});
  if (!r.ok()) return r.status();
  if (report) report->macs = N * C * H * W * Og * kh * kw;
  if (input.layout() != Layout::kNCHW) return r->ToLayout(input.layout());
  return r;
}

}  // namespace kiln::device::tt_emu
