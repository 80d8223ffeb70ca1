// Section numbers (§) cite docs/specs/tt-numerics.md, as in conv_engine.h.
// Over 600 lines: one Engine class holds the operands, the dataflow between K blocks and the
// epilogue that both levels share; the fast level's oneDNN sums (~150 lines) use that state directly.
#include "device/backends/tt_emu/conv_engine.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <optional>
#include <cmath>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <dnnl.hpp>

#include "common/memory.h"
#include "device/backends/tt_emu/device_formats.h"
#include "device/backends/tt_emu/transpose.h"
#include "device/numerics/formats.h"
#include "device/numerics/fpu.h"
#include "device/numerics/mvmul_kernel.h"
#include "device/numerics/sfpu.h"

namespace kiln::device::tt_emu {

namespace nx = kiln::numerics;

namespace {

std::atomic<int64_t> g_max_prepared_bytes{0};  // 0: kMaxPreparedSrcABytes
thread_local std::vector<uint32_t> t_scratch[4];  // ScratchBuffer's cache, by ScratchSlot
std::atomic<bool> g_fuse_blocks{true};          // SetFuseExactKBlocksForTesting
std::atomic<bool> g_srcb_image{true};           // SetSrcBImageForTesting
std::atomic<bool> g_direct_nchw{true};          // SetDirectNchwForTesting

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

// dst[b][m][n] = Σ_k src[m·lda + b·kb + k] · wei[n·ldw_k + b·kb + k] for the nb K blocks b of width
// kb: one oneDNN batched matmul.
Status MatmulF32Blocks(const dnnl::engine& eng, dnnl::stream& strm, const float* src, int64_t nb, int64_t M, int64_t kb,
                       int64_t lda, const float* wei, int64_t N, int64_t ldw_k, float* dst) {
  try {
    using md = dnnl::memory::desc;
    using dt = dnnl::memory::data_type;
    md src_md({nb, M, kb}, dt::f32, dnnl::memory::dims{kb, lda, 1});
    md wei_md({nb, kb, N}, dt::f32, dnnl::memory::dims{kb, 1, ldw_k});
    md dst_md({nb, M, N}, dt::f32, dnnl::memory::dims{M * N, N, 1});
    dnnl::matmul::desc d(src_md, wei_md, dst_md);
    dnnl::matmul::primitive_desc pd(d, eng);
    dnnl::memory sm(src_md, eng, const_cast<float*>(src));
    dnnl::memory wm(wei_md, eng, const_cast<float*>(wei));
    dnnl::memory dm(dst_md, eng, dst);
    dnnl::matmul(pd).execute(strm, {{DNNL_ARG_SRC, sm}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DST, dm}});
    strm.wait();
  } catch (const dnnl::error& e) {
    return Internal(std::string("oneDNN batched matmul failed: ") + e.what());
  }
  return Status::Ok();
}

// Splits rows [m0, m1) over up to `threads` OpenMP threads when the work is worth it (OpenMP, the
// runtime oneDNN uses here: its idle workers spin after each matmul and would compete with
// separate std::threads for the same cores). The threads claim chunks of about 1/16 of an even
// share (a multiple of `grain` rows) from a shared counter and call fn(a, b) per chunk, rather than
// one fixed range each: a thread slowed by the machine (a shared VM's other vCPU, another process)
// then takes fewer chunks instead of holding the others at the join (ResNet-18's first conv, exact
// HiFi4 on 2 threads beside a busy loop on one CPU: median 43.0 ms with fixed halves, 31.0 ms with
// chunks; bench/tt_emu/RESULTS.md). Rows are independent, so which thread computes a row changes
// no bit.
template <typename Fn>
Status Parallel(int64_t m0, int64_t m1, int64_t per_row, int threads, const Fn& fn, int64_t grain = 1) {
  const int64_t rows = m1 - m0;
  int n = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, rows * per_row / 200000)));
  n = static_cast<int>(std::min<int64_t>(n, rows));
  if (n <= 1) return fn(m0, m1);
  const int64_t chunk = std::max<int64_t>(grain, (rows / (16 * n) + grain - 1) / grain * grain);
  // A claim takes a chunk, or less over the last 4·n chunks' worth of rows: the size shrinks with
  // the rows left, down to the grain (OpenMP's guided schedule), so that the threads reach the join
  // together. With whole chunks to the end, the thread that found the counter spent waited for the
  // other one's last chunk: c64 exact LoFi on 2 threads, median difference between the threads'
  // finishing times 98 µs, 17 µs this way (bench/tt_emu/RESULTS.md, eleventh pass).
  auto claim = [&](std::atomic<int64_t>& next, int64_t* size) {
    int64_t a = next.load(std::memory_order_relaxed), s;
    do {
      s = std::clamp<int64_t>((m1 - a) / (4 * n) / grain * grain, grain, chunk);
    } while (a < m1 && !next.compare_exchange_weak(a, a + s, std::memory_order_relaxed));
    *size = s;
    return a;
  };
  std::atomic<int64_t> next{m0};
  std::vector<Status> st(static_cast<size_t>(n));
#pragma omp parallel for num_threads(n) schedule(static, 1)
  for (int t = 0; t < n; ++t) {
    int64_t s = 0;
    for (int64_t a = claim(next, &s); a < m1 && st[static_cast<size_t>(t)].ok(); a = claim(next, &s))
      st[static_cast<size_t>(t)] = fn(a, std::min(m1, a + s));
  }
  for (const Status& s : st) KILN_RETURN_IF_ERROR(s);
  return Status::Ok();
}

// The activation pipeline of one value of a dtype converted value by value (§2, §3, §4): the host
// conversion (HostConvertValue), then, unless the act is tilized per row (a bfp act dtype on the
// conv path, Engine::TilizeRow), the tilize: on the matmul path and for a float32 act dtype the
// unpacker alone (UnpackToSrc); otherwise unpack to Dst and pack into bf16 (an fp32 input is
// truncated to bf16 by the unpacker without fp32 Dst, §4, kept with it and rounded by the packer,
// §3.1); then the SrcB operand mask. The choices are made once per conv (Engine::Tilize);
// TilizeValue computes every candidate and selects, without branches, so that
// ConvertActivationTile vectorises.
struct TilizeChoice {
  bool in_fp32, per_row, unpack_only, fp32_dst;
  DeviceDType act_dt;
  uint32_t keep;  // MaskSrcOperand of the SrcB format (an AND)
};
// The tilize of one host-converted value (`&` on the flags, not `&&`: no branch in the loops).
[[gnu::always_inline]] inline uint32_t TilizeValue(uint32_t v, const TilizeChoice& t) {
  const uint32_t unpacked = UnpackToSrc(v, t.act_dt, t.fp32_dst);
  const uint32_t d = SelectBits(t.in_fp32 & !t.fp32_dst, static_cast<uint32_t>(nx::UnpackFp32ToBf16(v)) << 16, v);
  const uint32_t tilized = SelectBits(t.unpack_only, unpacked, PackBf16Value(d, t.in_fp32 & t.fp32_dst)) & t.keep;
  return SelectBits(t.per_row, v, tilized);
}

// n pixels of C channels through the pipeline: x[c * plane + i] (NCHW) into dst[i * dst_stride +
// c] (NHWC, dst_stride >= C), through tmp[c * n + i] (C · n values): contiguous reads and conversion first, then the
// transposition from L1 (Transpose32). Compiled for AVX-512 and AVX2 besides the baseline (GCC function
// multiversioning, chosen once when the program loads); integer selects and moves only, so every
// clone gives the same bits.
__attribute__((target_clones("arch=x86-64-v4", "avx2", "default"))) void ConvertActivationTile(
    const float* __restrict x, int64_t plane, int64_t C, int64_t n, const TilizeChoice& choice,
    uint32_t* __restrict tmp, uint32_t* __restrict dst, int64_t dst_stride) {
  const TilizeChoice t = choice;
  const DeviceDType in_dt = t.in_fp32 ? DeviceDType::kFloat32 : DeviceDType::kBFloat16;
  for (int64_t c = 0; c < C; ++c) {
    const float* xs = x + c * plane;
    uint32_t* d = tmp + c * n;
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) {
      uint32_t u;
      std::memcpy(&u, &xs[i], sizeof u);
      d[i] = TilizeValue(HostConvertValue(u, in_dt), t);
    }
  }
  Transpose32(tmp, C, n, n, dst, dst_stride);
}

// The weights of one output channel in the program's K order, for a weights dtype converted
// value by value (float32 or bfloat16): out[k] = the SrcA operand of w[koff[k]] where kgrp[k] ==
// group (the channel's group), else 0: host conversion (HostConvertValue), the unpacker
// (UnpackToSrc: a float32 value as Tf32 with an fp32 Dst, truncated to bf16 without) and the
// operand mask `keep`. Branch-free and multiversioned as ConvertActivationTile.
__attribute__((target_clones("arch=x86-64-v4", "avx2", "default"))) void ConvertWeightRow(
    const float* __restrict w, const int32_t* __restrict koff, const int32_t* __restrict kgrp, int32_t group,
    int64_t K, bool fp32_weights, bool fp32_dst, uint32_t keep, uint32_t* __restrict out) {
  const DeviceDType dt = fp32_weights ? DeviceDType::kFloat32 : DeviceDType::kBFloat16;
#pragma omp simd
  for (int64_t k = 0; k < K; ++k) {
    uint32_t u;
    std::memcpy(&u, &w[koff[k]], sizeof u);  // koff[k] = 0 for a K entry outside every group
    const uint32_t src = UnpackToSrc(HostConvertValue(u, dt), dt, fp32_dst) & keep;
    out[k] = SelectBits(kgrp[k] == group, src, 0u);
  }
}

// A run of K entries that read consecutive channels of one tap (Engine's im2col).
struct KRun {
  int64_t k0, len;   // K entries [k0, k0 + len)
  int32_t i, j, c0;  // read tap (i, j), channels c0 .. c0 + len − 1
  int64_t off;       // (i·dh·W + j·dw)·C + c0: the source's offset from the row's pixel in xdev_
};

// A group of 8 K entries (§5.4's 8-lane group, numerics::PreparedSrcB) that reads 8 consecutive
// channels of one tap, for the exact level's SrcB image (Engine::AllocateSrcBImage): channel group
// cg (channels 8·cg .. 8·cg + 7, those past C zero in the image) of tap (i, j); i = −1 for a group
// of K padding. (Its offset in groups from the row's pixel is Engine::goff_.)
struct KGroup {
  int32_t i, j, cg;
};

// GatherSrcBRow for a row whose taps all fall inside the input: for each group q not of K padding
// (bit q % 16 of real[q / 16]), group[q] = words + (base + off[q]) · gw and mask[q] = nz[base +
// off[q]]; the padding groups' entries are left as they are (the zero group). `nz` must be readable
// 3 bytes past its last group (the AVX-512 form reads each mask as the low byte of a 32-bit gather).
void GatherInsideScalar(const uint32_t* words, int64_t gw, const uint8_t* nz, int64_t base, const int32_t* off,
                        const uint16_t* real, int64_t ng, const uint32_t** group, uint8_t* mask) {
  for (int64_t q = 0; q < ng; ++q) {
    if (((real[q / 16] >> (q % 16)) & 1) == 0) continue;
    group[q] = words + (base + off[q]) * gw;
    mask[q] = nz[base + off[q]];
  }
}

#if defined(__x86_64__)
// 16 groups a step: the indices in int32 (an image holds under 2^31 groups: kMaxSrcBImageBytes).
__attribute__((target("avx512f"))) void GatherInsideAvx512(const uint32_t* words, int64_t gw, const uint8_t* nz,
                                                          int64_t base, const int32_t* off, const uint16_t* real,
                                                          int64_t ng, const uint32_t** group, uint8_t* mask) {
  const __m512i vbase = _mm512_set1_epi32(static_cast<int32_t>(base));
  const __m512i vwords = _mm512_set1_epi64(static_cast<long long>(reinterpret_cast<uintptr_t>(words)));
  const __m512i vgw = _mm512_set1_epi64(gw * 4);  // bytes per group
  for (int64_t q = 0; q < ng; q += 16) {
    const __mmask16 live = static_cast<__mmask16>(real[q / 16] & (ng - q >= 16 ? 0xFFFFu : (1u << (ng - q)) - 1));
    const __m512i idx = _mm512_add_epi32(vbase, _mm512_maskz_loadu_epi32(live, off + q));
    const __m512i m = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), live, idx, nz, 1);
    const __m128i m8 = _mm512_cvtepi32_epi8(m);  // low bytes; 0 for the padding groups
    std::memcpy(mask + q, &m8, static_cast<size_t>(std::min<int64_t>(16, ng - q)));
    const __m512i lo = _mm512_add_epi64(vwords, _mm512_mul_epu32(_mm512_cvtepu32_epi64(_mm512_castsi512_si256(idx)), vgw));
    const __m512i hi =
        _mm512_add_epi64(vwords, _mm512_mul_epu32(_mm512_cvtepu32_epi64(_mm512_extracti64x4_epi64(idx, 1)), vgw));
    _mm512_mask_storeu_epi64(group + q, static_cast<__mmask8>(live), lo);
    _mm512_mask_storeu_epi64(group + q + 8, static_cast<__mmask8>(live >> 8), hi);
  }
}
#endif

void GatherInside(const uint32_t* words, int64_t gw, const uint8_t* nz, int64_t base, const int32_t* off,
                  const uint16_t* real, int64_t ng, const uint32_t** group, uint8_t* mask) {
#if defined(__x86_64__)
  // With the kernel's AVX-512 paths (so that forcing another path, as the tests do, runs this one).
  const nx::MvmulKernelPath kp = nx::ActiveMvmulKernel();
  if (kp == nx::MvmulKernelPath::kAvx512 || kp == nx::MvmulKernelPath::kAvx512Fp16)
    return GatherInsideAvx512(words, gw, nz, base, off, real, ng, group, mask);
#endif
  GatherInsideScalar(words, gw, nz, base, off, real, ng, group, mask);
}

// Im2colRow's copies for a row whose taps all fall inside the input: out[run.k0 + i] =
// base[run.off + i] & keep, where `keep` changes no value: the SrcB operand mask where the NHWC xdev_
// holds SrcB operands already (Prepare), all ones where the row is tilized afterwards. The AND
// keeps GCC from turning the loop into a memcpy call per run, which costs more than the copy.
// Multiversioned as ConvertActivationTile, so that 16 words are one 64-byte move on AVX-512 (16
// bytes on the baseline build). With the row 64-byte aligned, PrepareSrcBRow's 64-byte loads then
// read whole stored vectors (c64 exact LoFi, one thread: im2col and PrepareSrcBRow together 20 %
// faster than 16-byte moves).
__attribute__((target_clones("arch=x86-64-v4", "avx2", "default"))) void CopyRuns(const uint32_t* __restrict base,
                                                                                const KRun* runs, size_t nruns,
                                                                                uint32_t keep,
                                                                                uint32_t* __restrict out) {
  for (size_t r = 0; r < nruns; ++r) {
    const uint32_t* src = base + runs[r].off;
    uint32_t* d = out + runs[r].k0;
    const int64_t len = runs[r].len;
#pragma omp simd
    for (int64_t i = 0; i < len; ++i) d[i] = src[i] & keep;
  }
}

class Engine {
 public:
  Engine(const EmuGeometry& g, const ConvProgram& prog, const PrecisionConfig& p, Activation act, EmuLevel level)
      : g_(g), k_(prog.k), prog_(prog), p_(p), level_(level) {
    fp32_dst_ = prog.fp32_dest_acc;
    wdt_ = prog.weights_dtype;
    act_dt_ = prog.act_dtype;
    odt_ = prog.output_dtype;
    fid_ = p.math_fidelity;
    arch_ = p.arch;
    l1acc_ = prog.l1_acc_effective;
    part_dt_ = prog.partials_dtype;
    tf32_reload_ = prog.partial_reload == PartialReload::kTf32;
    precise_ = prog.bfp8_pack_precise;
    act_ = act;
    if (act_ != Activation::kNone && act_ != Activation::kRelu) sfpu_ = nx::SfpuOpForActivation(act_);
    // On the conv path a bfp act dtype is packed over groups of 16 consecutive K entries of a row,
    // so it is applied per im2col row; otherwise the act tilize is per element (per pixel).
    per_row_tilize_ = prog.path != ConvProgramPath::kMatmul && IsBfp(act_dt_);
    K_ = k_.K;
    ki_.resize(static_cast<size_t>(K_));
    kj_.resize(static_cast<size_t>(K_));
    kc_.resize(static_cast<size_t>(K_));
    for (int64_t k = 0; k < K_; ++k) {
      const int32_t t = k_.tap[static_cast<size_t>(k)];
      ki_[k] = t < 0 ? -1 : t / static_cast<int32_t>(g.kw);
      kj_[k] = t < 0 ? -1 : t % static_cast<int32_t>(g.kw);
      kc_[k] = t < 0 ? 0 : k_.chan[static_cast<size_t>(k)];
    }
    // Runs of K entries that read consecutive channels of one tap (one copy each in Im2colRow).
    for (int64_t k = 0; k < K_; ++k) {
      if (ki_[k] < 0) continue;
      if (!runs_.empty()) {
        KRun& r = runs_.back();
        if (r.k0 + r.len == k && ki_[k] == r.i && kj_[k] == r.j && kc_[k] == r.c0 + r.len) {
          ++r.len;
          continue;
        }
      }
      runs_.push_back(KRun{k, 1, ki_[k], kj_[k], kc_[k], 0});
    }
    // Each run's source relative to the row's pixel (y0, x0) = (oy·sh − pt, ox·sw − pl) in an NHWC
    // image: rows whose taps all fall inside the input (Im2colRow's fast path) copy from there.
    for (KRun& r : runs_) r.off = (r.i * g.dh * g.W + r.j * g.dw) * g.C + r.c0;
    // The exact level reads SrcB through the prepared image (AllocateSrcBImage) where every group of
    // 8 K entries is padding or 8 consecutive channels of one tap: each run starts a group and a
    // channel group, and one that ends inside a group ends at the pixel's last channel (the rest
    // of the group is the image's zero channels past C, as the im2col row's K padding is zero).
    // The per-element tilize makes the operands a function of the pixel alone; a bfp act dtype's
    // per-row tilize does not.
    const int64_t C8 = (g.C + 7) / 8;
    srcb_image_ = level_ == EmuLevel::kExact && !per_row_tilize_;
    kgroups_.assign(static_cast<size_t>(K_ / 8), KGroup{-1, -1, 0});
    goff_.assign(kgroups_.size(), 0);
    greal_.assign((kgroups_.size() + 15) / 16, 0);
    for (const KRun& r : runs_) {
      if (r.k0 % 8 != 0 || r.c0 % 8 != 0 || (r.len % 8 != 0 && r.c0 + r.len != g.C)) srcb_image_ = false;
      for (int64_t q = r.k0 / 8; q < (r.k0 + r.len + 7) / 8 && q < K_ / 8; ++q) {
        const int32_t cg = static_cast<int32_t>(r.c0 / 8 + (q - r.k0 / 8));
        kgroups_[static_cast<size_t>(q)] = KGroup{r.i, r.j, cg};
        goff_[static_cast<size_t>(q)] = static_cast<int32_t>((r.i * g.dh * g.W + r.j * g.dw) * C8 + cg);
        greal_[static_cast<size_t>(q / 16)] = static_cast<uint16_t>(greal_[static_cast<size_t>(q / 16)] | (1u << (q % 16)));
      }
    }
    const int64_t image_bytes =
        g.N * g.H * g.W * C8 * (nx::SrcBGroupWords(nx::SrcBVariants(fid_)) * 4 + 1);
    if (image_bytes > kMaxSrcBImageBytes || !g_srcb_image.load(std::memory_order_relaxed)) srcb_image_ = false;
  }

  // The choices of the act tilize for this conv (TilizeValue).
  TilizeChoice Tilize() const {
    return {p_.input_dtype == DeviceDType::kFloat32, per_row_tilize_,
            prog_.path == ConvProgramPath::kMatmul || act_dt_ == DeviceDType::kFloat32, fp32_dst_, act_dt_,
            nx::MaskSrcOperand(~0u, b_fmt())};
  }

  void Prepare(const float* x, const float* w, const float* bias, int threads) {
    const EmuGeometry& g = g_;
    const int64_t C16 = (g.C + 15) / 16 * 16;
    // 1. activations: host conversion (§2), then (unless tilized per row) the per-element tilize
    //    + unpack. A bfp input dtype converts 16 channels of a pixel as one group; the other input
    //    dtypes convert each value alone, so those run in tiles of 64 pixels, channel by channel
    //    (ConvertActivationTile: contiguous NCHW reads), then transposed into the NHWC xdev_ (the
    //    tile stays in L1), or into the exact level's SrcB image (below). Pixels are independent:
    //    split over the threads.
    const int64_t HW = g.H * g.W;
    // every element is written below (not needed where a per-value dtype goes into the SrcB image)
    xdev_.resize(srcb_image_ && !IsBfp(p_.input_dtype) ? 0 : static_cast<size_t>(g.N * HW * g.C));
    if (IsBfp(p_.input_dtype)) {
      (void)Parallel(0, g.N * HW, C16 * 16, threads, [&](int64_t p0, int64_t p1) {
        std::vector<uint32_t> pix(static_cast<size_t>(C16)), conv(pix.size());
        const TilizeChoice tc = Tilize();
        for (int64_t p = p0; p < p1; ++p) {
          const int64_t n = p / HW, s = p % HW;
          std::fill(pix.begin(), pix.end(), 0u);
          for (int64_t c = 0; c < g.C; ++c) pix[c] = nx::FloatBits(x[(n * g.C + c) * HW + s]);
          for (int64_t c0 = 0; c0 < C16; c0 += 16) HostConvertGroup(&pix[c0], 16, p_.input_dtype, &conv[c0]);
          uint32_t* dst = &xdev_[static_cast<size_t>(p * g.C)];
          for (int64_t c = 0; c < g.C; ++c) dst[c] = TilizeValue(conv[c], tc);
        }
        return Status::Ok();
      });
      if (srcb_image_) PrepareSrcBImage(threads);
    } else {
      constexpr int64_t kPix = 64;
      const int64_t tiles = (HW + kPix - 1) / kPix;
      // With the exact level's SrcB image, each tile goes into a buffer of whole 8-channel groups
      // (zeros past C) and is prepared from there while it is in L1, instead of into xdev_, which
      // nothing reads then.
      const int64_t C8 = (g.C + 7) / 8, gw = nx::SrcBGroupWords(nx::SrcBVariants(fid_));
      if (srcb_image_) AllocateSrcBImage();
      (void)Parallel(0, g.N * tiles, kPix * g.C * 4, threads, [&](int64_t t0, int64_t t1) {
        const TilizeChoice tc = Tilize();
        std::vector<uint32_t> dev(static_cast<size_t>(g.C * kPix));  // [c][pixel] of one tile
        std::vector<uint32_t> px(srcb_image_ ? static_cast<size_t>(kPix * C8 * 8) : 0, 0u);  // [pixel][C8·8]
        for (int64_t t = t0; t < t1; ++t) {
          const int64_t n = t / tiles, s0 = t % tiles * kPix, ns = std::min(kPix, HW - s0);
          if (!srcb_image_) {
            ConvertActivationTile(x + n * g.C * HW + s0, HW, g.C, ns, tc, dev.data(),
                                  &xdev_[static_cast<size_t>((n * HW + s0) * g.C)], g.C);
            continue;
          }
          ConvertActivationTile(x + n * g.C * HW + s0, HW, g.C, ns, tc, dev.data(), px.data(), C8 * 8);
          const int64_t p = n * HW + s0;  // the tile's first pixel
          nx::PrepareSrcBGroups(px.data(), ns * C8, fid_, b_fmt(), srcb_words_ + p * C8 * gw, srcb_nz_ + p * C8);
        }
        return Status::Ok();
      });
    }
    // 2. weights as [K, Cout_pad] in the program's K order, block-diagonal for groups; stored
    //    o-major wdev_[o*K + k] (zero where K entry k is padding or in another group than column
    //    o). Per K entry: its group and its offset in an output channel's Cg·kh·kw weights; per
    //    output channel its group (−2 for a padded channel, which matches no K entry).
    std::vector<int32_t> kgrp(static_cast<size_t>(K_), -1), koff(static_cast<size_t>(K_), 0), ogrp(static_cast<size_t>(g.O_pad), -2);
    for (int64_t k = 0; k < K_; ++k) {
      if (ki_[k] < 0) continue;
      kgrp[k] = static_cast<int32_t>(kc_[k] / g.Cg);
      koff[k] = static_cast<int32_t>(((kc_[k] - kgrp[k] * g.Cg) * g.kh + ki_[k]) * g.kw + kj_[k]);
    }
    for (int64_t o = 0; o < g.O; ++o) ogrp[o] = static_cast<int32_t>(o / g.Og);
    auto weight = [&](int64_t o, int64_t k) -> uint32_t {  // fp32 pattern, 0 outside the block diagonal
      return kgrp[k] == ogrp[o] ? nx::FloatBits(w[o * g.Cg * g.kh * g.kw + koff[k]]) : 0u;
    };
    wdev_.resize(static_cast<size_t>(g.O_pad * K_));  // every element is written below
    if (IsBfp(wdt_)) {
      // One bfp group per K row and 16 output channels; groups of 16 channels split over the threads.
      (void)Parallel(0, g.O_pad / 16, 16 * K_ * 16, threads, [&](int64_t j0, int64_t j1) {
        std::array<uint32_t, 16> row{}, rowc{};
        for (int64_t o0 = j0 * 16; o0 < j1 * 16; o0 += 16) {
          for (int64_t k = 0; k < K_; ++k) {
            bool any = false;
            for (int t = 0; t < 16; ++t) any |= (row[t] = weight(o0 + t, k)) != 0;
            if (any) HostConvertGroup(row.data(), 16, wdt_, rowc.data());  // an all-zero group stays zero
            for (int t = 0; t < 16; ++t)
              wdev_[(o0 + t) * K_ + k] = any ? nx::MaskSrcOperand(UnpackToSrc(rowc[t], wdt_, fp32_dst_), a_fmt()) : 0u;
          }
        }
        return Status::Ok();
      });
    } else {
      // Each value alone: output channels split over the threads, each written contiguously.
      (void)Parallel(0, g.O_pad, K_ * 4, threads, [&](int64_t o0, int64_t o1) {
        for (int64_t o = o0; o < o1; ++o)
          // A padded channel (o >= O) reads channel O − 1's weights, which its group −2 discards.
          ConvertWeightRow(w + std::min(o, g.O - 1) * g.Cg * g.kh * g.kw, koff.data(), kgrp.data(), ogrp[o], K_,
                           wdt_ == DeviceDType::kFloat32, fp32_dst_, nx::MaskSrcOperand(~0u, a_fmt()),
                           &wdev_[static_cast<size_t>(o * K_)]);
        return Status::Ok();
      });
    }
    std::vector<uint32_t> row(16), rowc(16);
    // 3. bias row in the weights dtype (prepare_conv_bias_internal: bias_df = weights_df), groups
    //    of 16 output channels, read through SrcB.
    has_bias_ = bias != nullptr;
    bdev_.assign(static_cast<size_t>(g.O_pad), 0);
    if (has_bias_) {
      for (int64_t o0 = 0; o0 < g.O_pad; o0 += 16) {
        for (int t = 0; t < 16; ++t) row[t] = o0 + t < g.O ? nx::FloatBits(bias[o0 + t]) : 0u;
        HostConvertGroup(row.data(), 16, wdt_, rowc.data());
        for (int t = 0; t < 16; ++t) bdev_[o0 + t] = UnpackToSrc(rowc[t], wdt_, fp32_dst_);
      }
    }
  }

  nx::SrcFormat a_fmt() const { return SrcFmtOf(wdt_, fp32_dst_); }
  nx::SrcFormat b_fmt() const { return SrcFmtOf(act_dt_, fp32_dst_); }
  double fast_sums_seconds() const { return fast_sums_s_; }
  bool srcb_image() const { return srcb_image_; }

  // im2col of output row m in the program's K order: SrcB operands (padding and spatial padding
  // give zeros). With a per-row tilize the bfp groups are 16 consecutive K entries.
  // `out` must hold 0 at the K entries no run covers (the K padding), as a buffer zeroed once and
  // written only by this function does: each call writes every run (its channels, or zeros where the
  // tap falls outside the input), in short inline copies rather than a memset of the whole row and
  // a memmove per run.
  void Im2colRow(int64_t m, uint32_t* out) const {
    const EmuGeometry& g = g_;
    const int64_t n = m / (g.OH * g.OW), r = m % (g.OH * g.OW), oy = r / g.OW, ox = r % g.OW;
    if (per_row_tilize_) std::fill(out, out + K_, 0u);  // the tilize below rewrites every entry
    const int64_t y0 = oy * g.sh - g.pt, x0 = ox * g.sw - g.pl;
    if (y0 >= 0 && y0 + (g.kh - 1) * g.dh < g.H && x0 >= 0 && x0 + (g.kw - 1) * g.dw < g.W) {
      // Every tap inside the input (most rows): one base pointer, no bounds per run.
      CopyRuns(&xdev_[static_cast<size_t>(((n * g.H + y0) * g.W + x0) * g.C)], runs_.data(), runs_.size(),
               per_row_tilize_ ? ~0u : nx::MaskSrcOperand(~0u, b_fmt()), out);
    } else {
      ScatterBorderRow(n, oy, ox, out);
    }
    if (per_row_tilize_) TilizeRow(out);
  }

  // Im2colRow for a row some of whose taps fall outside the input (zeros there).
  void ScatterBorderRow(int64_t n, int64_t oy, int64_t ox, uint32_t* out) const {
    const EmuGeometry& g = g_;
    for (const KRun& run : runs_) {
      const int64_t y = oy * g.sh - g.pt + run.i * g.dh, xx = ox * g.sw - g.pl + run.j * g.dw;
      uint32_t* d = out + run.k0;
      const bool outside = y < 0 || y >= g.H || xx < 0 || xx >= g.W;
      const uint32_t* src = outside ? nullptr : &xdev_[static_cast<size_t>(((n * g.H + y) * g.W + xx) * g.C + run.c0)];
      int64_t i = 0;
      for (; i + 8 <= run.len; i += 8) {  // 8 channels (32 bytes) a step: runs are mostly whole groups of 8
        std::array<uint32_t, 8> v{};
        if (!outside) std::memcpy(v.data(), src + i, sizeof v);
        std::memcpy(d + i, v.data(), sizeof v);
      }
      for (; i < run.len; ++i) d[i] = outside ? 0u : src[i];
    }
  }

  void TilizeRow(uint32_t* out) const {
    // Tilize into a bfp act dtype: the packer over each face row of 16 K entries (§3.4), from a
    // Dst holding the input values (fp32 Dst only for an fp32 input with fp32_dest_acc_en).
    const bool in_fp32 = p_.input_dtype == DeviceDType::kFloat32;
    std::array<uint32_t, 16> d{}, t{};
    for (int64_t k0 = 0; k0 < K_; k0 += 16) {
      for (int i = 0; i < 16; ++i) {
        const uint32_t v = out[k0 + i];
        d[i] = (in_fp32 && !fp32_dst_) ? static_cast<uint32_t>(nx::UnpackFp32ToBf16(v)) << 16 : v;
      }
      PackRow(d.data(), 16, act_dt_, in_fp32 && fp32_dst_, false, false, false, t.data());
      for (int i = 0; i < 16; ++i) out[k0 + i] = nx::MaskSrcOperand(t[i], b_fmt());
    }
  }

  // `nchw` (may be null): the exact level's rows go there, NCHW (RunConvProgram), instead of `out`.
  Status Run(const CancelToken* cancel, int threads, std::vector<uint32_t>* out, float* nchw) {
    const EmuGeometry& g = g_;
    if (level_ == EmuLevel::kFast || nchw == nullptr) {
      out->resize(static_cast<size_t>(g.M * g.O));  // every element is written: each row's O columns
    }
    if (level_ == EmuLevel::kFast) return RunFast(cancel, threads, out);
    nchw_ = nchw;
    return RunExact(cancel, threads, out);
  }

  // Exact level. The weights' phase slices, exponents and signs (device/numerics/mvmul_kernel.h)
  // are prepared once per call for column chunks of at most kMaxPreparedSrcABytes (conv_engine.h);
  // each chunk runs over every row. Columns are independent, so the chunking changes no bit.
  Status RunExact(const CancelToken* cancel, int threads, std::vector<uint32_t>* out) {
    const EmuGeometry& g = g_;
    constexpr int64_t kBlk = nx::kMvmulColumnBlock;  // chunks of whole kernel blocks (also whole bfp groups of 16)
    const int64_t per_blk = nx::PreparedSrcABytes(kBlk, K_, fid_);
    const int64_t limit = g_max_prepared_bytes.load(std::memory_order_relaxed);
    const int64_t chunk = std::max<int64_t>(kBlk, (limit > 0 ? limit : kMaxPreparedSrcABytes) / per_blk * kBlk);
    for (int64_t c0 = 0; c0 < g.O; c0 += chunk) {
      const int64_t c1 = std::min(c0 + chunk, g.O_pad);
      auto pa = nx::AllocateSrcA(c1 - c0, K_, fid_);
      KILN_RETURN_IF_ERROR(pa.status());
      const int64_t nblk = (c1 - c0 + kBlk - 1) / kBlk;
      // A weight costs about as much as 16 MAC-phases of the rows (Parallel's unit of work).
      (void)Parallel(0, nblk, kBlk * K_ * 16, threads, [&](int64_t b0, int64_t b1) {
        nx::FillSrcABlocks(wdev_.data() + c0 * K_, a_fmt(), b0, b1, &*pa);
        return Status::Ok();
      });
      const int64_t per_row = (std::min(c1, g.O) - c0) * K_ * nx::NumPhases(fid_);
      KILN_RETURN_IF_ERROR(Parallel(
          0, g.M, per_row, threads, [&](int64_t a, int64_t b) { return RunRowsExact(*pa, c0, c1, a, b, cancel, out); },
          kRowTile));
    }
    return Status::Ok();
  }

  // Exact rows [m_begin, m_end) for prepared columns [c0, c1) (`pa` column 0 = output column c0; c0
  // a multiple of 16, so bfp groups of 16 columns are those of the whole row). Cache blocking: tiles
  // of kRowTile rows share each (K block, column span) slice of the weights while it is hot.
  static constexpr int64_t kRowTile = 8;  // also the grain of RunExact's row chunks
  Status RunRowsExact(const nx::PreparedSrcA& pa, int64_t c0, int64_t c1, int64_t m_begin, int64_t m_end,
                      const CancelToken* cancel, std::vector<uint32_t>* out) const {
    const EmuGeometry& g = g_;
    const int64_t nb = k_.num_blocks(), nc = c1 - c0, live = std::min(c1, g.O) - c0;
    // K blocks whose partial spill and reload give back every Dst pattern bit for bit run as one
    // kernel call over their whole K range (PartialsRoundTripExact), the same bits with no per-block
    // pack, reload and kernel entry.
    const bool fuse = PartialsRoundTripExact() && g_fuse_blocks.load(std::memory_order_relaxed);
    const int64_t runs = fuse ? 1 : nb;
    std::vector<uint32_t, AlignedAllocator<uint32_t, 64>> xrow(srcb_image_ ? 0 : static_cast<size_t>(K_));  // see CopyRuns
    std::vector<nx::PreparedSrcB> pb(kRowTile);  // buffers reused tile to tile
    if (srcb_image_)
      for (nx::PreparedSrcB& b : pb) KILN_RETURN_IF_ERROR(ShapeSrcBRow(&b));
    std::vector<uint32_t> dst(static_cast<size_t>(kRowTile * nc)), part(dst.size()), l1(dst.size()), fin(dst.size()),
        btile(dst.size());
    for (int64_t r = 0; r < kRowTile; ++r) std::copy(&bdev_[c0], &bdev_[c0] + nc, &btile[r * nc]);  // bias per row
    for (int64_t m0 = m_begin; m0 < m_end; m0 += kRowTile) {
      if (cancel && ((m0 - m_begin) % 64) == 0) KILN_RETURN_IF_ERROR(cancel->Check());
      const int64_t T = std::min(kRowTile, m_end - m0);
      for (int64_t r = 0; r < T; ++r) {
        if (srcb_image_) {
          GatherSrcBRow(m0 + r, &pb[static_cast<size_t>(r)]);
          continue;
        }
        Im2colRow(m0 + r, xrow.data());
        KILN_RETURN_IF_ERROR(nx::PrepareSrcBRow(xrow.data(), K_, fid_, b_fmt(), &pb[static_cast<size_t>(r)]));
      }
      for (int64_t run = 0; run < runs; ++run) {
        const int64_t b_first = fuse ? 0 : run, b = fuse ? nb - 1 : run;  // blocks b_first .. b
        const int64_t kb0 = k_.block_begin[b_first], kb1 = k_.block_begin[b + 1];
        for (int64_t r = 0; r < T; ++r) BlockStart(b_first, nc, &dst[r * nc], &part[r * nc], &l1[r * nc]);
        // Every MVMUL of the block, in the card's order (K tiles, phases, two 16-lane halves), over
        // column spans whose weight slice (kb1 − kb0 deep) stays within kSliceBytes, each span
        // for all rows of the tile.
        constexpr int64_t kSliceBytes = 256 << 10;
        constexpr int64_t kBlk = nx::kMvmulColumnBlock;
        const int64_t span = std::max<int64_t>(kBlk, kSliceBytes / nx::PreparedSrcABytes(kBlk, kb1 - kb0, fid_) * kBlk);
        for (int64_t cb = 0; cb < live; cb += span)
          for (int64_t r = 0; r < T; ++r)
            KILN_RETURN_IF_ERROR(nx::RunKBlock(pa, pb[static_cast<size_t>(r)], kb0, kb1, cb, std::min(cb + span, live),
                                               fid_, fp32_dst_, arch_, &dst[r * nc + cb]));
        for (int64_t r = 0; r < T; ++r) {
          std::fill(&dst[r * nc + live], &dst[r * nc + nc], 0u);  // padded output channels have zero weights
          // Fused: the last block's pack to the partials is skipped and the epilogue reads Dst
          // itself. Where the round trip is exact (PartialsRoundTripExact: no L1 accumulation; fp32
          // Dst → fp32 partials, or a bf16 Dst → bf16 or fp32 partials) the pack alone is the identity
          // on every pattern Dst holds here (+0, normal values, ±Inf; a bf16 Dst's low 16 bits 0).
          if (!fuse) BlockEnd(b, nc, &dst[r * nc], &part[r * nc], &l1[r * nc]);
        }
      }
      // The epilogue of the tile's T rows in one pass (FinishRows; nc is a multiple of 32).
      FinishRows(T * nc, dst.data(), fuse ? dst.data() : part.data(), l1.data(), btile.data(), fin.data());
      if (nchw_ == nullptr) {
        for (int64_t r = 0; r < T; ++r)
          std::copy(&fin[r * nc], &fin[r * nc] + live, out->begin() + (m0 + r) * g.O + c0);
        continue;
      }
      // Straight into the NCHW output from L1: per image n the tile holds, each output channel's
      // consecutive pixels are one run (no M × O buffer written and transposed afterwards).
      const int64_t P = g.OH * g.OW;
      for (int64_t r = 0; r < T;) {
        const int64_t m = m0 + r, n = m / P, s0 = m % P, seg = std::min(T - r, P - s0);
        Transpose32(&fin[r * nc], seg, live, nc, nchw_ + (n * g.O + c0) * P + s0, P);
        r += seg;
      }
    }
    return Status::Ok();
  }

  // The exact level's SrcB operands of the whole input, prepared once per call (in Prepare, with the
  // activations' conversion): per pixel (NHWC order) C8 = ⌈C/8⌉ groups of 8 channels
  // (numerics::PrepareSrcBGroups; channels past C zero), their words in srcb_words_ and masks in
  // srcb_nz_. A conv reads each pixel in kh·kw rows, so this prepares each operand once instead of
  // per im2col row, and a row is K/8 pointers into it (GatherSrcBRow): the im2col copies and the
  // per-row preparation were about a seventh of c64 exact LoFi's emulator time (bench/tt_emu/
  // RESULTS.md, tenth pass).
  void AllocateSrcBImage() {
    const EmuGeometry& g = g_;
    const int64_t groups = g.N * g.H * g.W * ((g.C + 7) / 8), gw = nx::SrcBGroupWords(nx::SrcBVariants(fid_));
    // One buffer: the words, then the masks (a byte per group, and 4 more bytes: GatherInside).
    srcb_buf_.v.resize(static_cast<size_t>(groups * gw + (groups + 3) / 4 + 1));
    srcb_words_ = srcb_buf_.v.data();
    srcb_nz_ = reinterpret_cast<uint8_t*>(srcb_words_ + groups * gw);
  }

  // The image from xdev_, for the bfp input dtypes, whose conversion is per pixel rather than per
  // tile.
  void PrepareSrcBImage(int threads) {
    AllocateSrcBImage();
    const EmuGeometry& g = g_;
    const int64_t C8 = (g.C + 7) / 8, pixels = g.N * g.H * g.W;
    const int64_t gw = nx::SrcBGroupWords(nx::SrcBVariants(fid_));
    constexpr int64_t kPix = 64;  // pixels per step where channels are padded (through an L1 buffer)
    (void)Parallel(0, pixels, C8 * 8 * 8, threads, [&](int64_t p0, int64_t p1) {
      if (g.C % 8 == 0) {  // the image's pixels are whole groups already
        nx::PrepareSrcBGroups(&xdev_[static_cast<size_t>(p0 * g.C)], (p1 - p0) * C8, fid_, b_fmt(),
                              srcb_words_ + p0 * C8 * gw, srcb_nz_ + p0 * C8);
        return Status::Ok();
      }
      std::vector<uint32_t> pad(static_cast<size_t>(kPix * C8 * 8), 0u);  // channels past C stay 0
      for (int64_t a = p0; a < p1; a += kPix) {
        const int64_t n = std::min(kPix, p1 - a);
        for (int64_t i = 0; i < n; ++i)
          std::copy_n(&xdev_[static_cast<size_t>((a + i) * g.C)], g.C, &pad[static_cast<size_t>(i * C8 * 8)]);
        nx::PrepareSrcBGroups(pad.data(), n * C8, fid_, b_fmt(), srcb_words_ + a * C8 * gw, srcb_nz_ + a * C8);
      }
      return Status::Ok();
    });
  }

  // A row's SrcB for GatherSrcBRow: K/8 groups, those of K padding the zero group (never changed).
  Status ShapeSrcBRow(nx::PreparedSrcB* pb) const {
    KILN_RETURN_IF_ERROR(nx::ShapeSrcBRow(K_, fid_, pb));
    std::fill(pb->group.begin(), pb->group.end(), nx::ZeroSrcBGroup());
    std::fill(pb->nz_mask.begin(), pb->nz_mask.end(), uint8_t{0});
    return Status::Ok();
  }

  // Output row m's SrcB operands as pointers into the prepared image (Im2colRow's taps), into a
  // row shaped by ShapeSrcBRow: a group of a tap outside the input reads the zero group.
  void GatherSrcBRow(int64_t m, nx::PreparedSrcB* pb) const {
    const EmuGeometry& g = g_;
    const int64_t C8 = (g.C + 7) / 8, gw = nx::SrcBGroupWords(pb->variants);
    const int64_t n = m / (g.OH * g.OW), r = m % (g.OH * g.OW), oy = r / g.OW, ox = r % g.OW;
    const int64_t y0 = oy * g.sh - g.pt, x0 = ox * g.sw - g.pl;
    const uint32_t* __restrict words = srcb_words_;
    const uint8_t* __restrict nz = srcb_nz_;
    const uint32_t** __restrict group = pb->group.data();
    uint8_t* __restrict mask = pb->nz_mask.data();
    const KGroup* kg = kgroups_.data();
    const int64_t ng = static_cast<int64_t>(kgroups_.size());
    if (y0 >= 0 && y0 + (g.kh - 1) * g.dh < g.H && x0 >= 0 && x0 + (g.kw - 1) * g.dw < g.W) {
      // Every tap inside the input (most rows): the row's pixel plus each group's offset.
      GatherInside(words, gw, nz, ((n * g.H + y0) * g.W + x0) * C8, goff_.data(), greal_.data(), ng, group, mask);
      return;
    }
    for (int64_t q = 0; q < ng; ++q) {
      if (kg[q].i < 0) continue;
      const int64_t y = y0 + kg[q].i * g.dh, xx = x0 + kg[q].j * g.dw;
      const bool in = y >= 0 && y < g.H && xx >= 0 && xx < g.W;
      const int64_t idx = ((n * g.H + y) * g.W + xx) * C8 + kg[q].cg;
      group[q] = in ? words + idx * gw : nx::ZeroSrcBGroup();
      mask[q] = in ? nz[idx] : uint8_t{0};
    }
  }

  // Whether packing Dst to the partials CB and reloading it (BlockEnd, then BlockStart of the next
  // block) returns every pattern an MVMUL chain leaves in Dst unchanged: those are +0, normal values
  // and ±Inf (device/numerics/mvmul_kernel.h: the fixed points of the zero-MVMUL mapping; a block's
  // Dst starts as 0 or such a reloaded pattern). Without L1 accumulation that holds for fp32
  // partials from an fp32 Dst reloaded exactly (§3.3 stores it unchanged; the reload only maps
  // exponent 0 to +0), and for bf16 or fp32 partials from a bf16 Dst (§3.2 passes non-NaN,
  // non-zero-exponent values through; a bf16 pattern is its own Tf32 truncation). Rounding packs
  // (fp32 Dst → bf16, bfp partials) and Tf32 reloads of fp32 Dst values do not.
  bool PartialsRoundTripExact() const {
    if (l1acc_) return false;
    if (fp32_dst_) return part_dt_ == DeviceDType::kFloat32 && !tf32_reload_;
    return part_dt_ == DeviceDType::kBFloat16 || part_dt_ == DeviceDType::kFloat32;
  }

  // Where block b's Dst starts for one row's nc columns: zero, the reloaded partials, or (packer
  // L1 accumulation without bias, last block) the L1 sum reloaded.
  void BlockStart(int64_t b, int64_t nc, uint32_t* dst, const uint32_t* part, const uint32_t* l1) const {
    const bool l1_tail = l1acc_ && !has_bias_ && b == k_.num_blocks() - 1;
    const bool from_zero = b == 0 || (l1acc_ && !l1_tail);
    const DeviceDType l1_dt = fp32_dst_ ? DeviceDType::kFloat32 : DeviceDType::kBFloat16;
    if (from_zero) {
      std::fill(dst, dst + nc, 0u);
      return;
    }
    for (int64_t o = 0; o < nc; ++o) dst[o] = l1_tail ? Reload(l1[o], l1_dt) : Reload(part[o], part_dt_);
  }

  // After block b: Dst into the L1 accumulator or packed to the partials CB (none after the last
  // block without bias: the epilogue reads Dst).
  void BlockEnd(int64_t b, int64_t nc, const uint32_t* dst, uint32_t* part, uint32_t* l1) const {
    const bool last = b == k_.num_blocks() - 1, l1_tail = l1acc_ && !has_bias_ && last;
    if (l1acc_ && !l1_tail) {
      for (int64_t o = 0; o < nc; ++o) {
        if (fp32_dst_) {
          l1[o] = b == 0 ? dst[o] : nx::PackL1AccFp32(l1[o], dst[o]);
        } else {
          uint16_t nv = nx::PackBf16DstToBf16(static_cast<uint16_t>(dst[o] >> 16));
          l1[o] = b == 0 ? static_cast<uint32_t>(nv) << 16
                         : static_cast<uint32_t>(nx::PackL1AccBf16(static_cast<uint16_t>(l1[o] >> 16), nv)) << 16;
        }
      }
    } else if (!l1acc_ && (!last || has_bias_)) {
      PackRow(dst, nc, part_dt_, fp32_dst_, false, false, false, part);
    }
  }

  // Epilogue of one row's columns [c0, c0 + nc): bias by ELWADD on the partials (or on the L1 sum),
  // else Dst as the last block left it; the SFPU activation; the final pack (packer ReLU) into `fin`.
  void FinishRow(int64_t c0, int64_t nc, uint32_t* dst, const uint32_t* part, const uint32_t* l1, uint32_t* fin) const {
    FinishRows(nc, dst, part, l1, &bdev_[c0], fin);
  }

  // FinishRow over n values of consecutive rows at once (rows of nc columns, consecutive in dst,
  // part, l1 and fin; `bias` holds each row's bias values, n in all): every step is per value, and
  // the packer's bfp groups of 16 columns never straddle two rows when nc is a multiple of 16.
  void FinishRows(int64_t n, uint32_t* dst, const uint32_t* part, const uint32_t* l1, const uint32_t* bias,
                  uint32_t* fin) const {
    const DeviceDType l1_dt = fp32_dst_ ? DeviceDType::kFloat32 : DeviceDType::kBFloat16;
    const DeviceDType epi_dt = l1acc_ ? l1_dt : part_dt_;  // what the bias ELWADD reads
    if (has_bias_) {
      const nx::FpuConfig elw_cfg{fp32_dst_, arch_, SrcFmtOf(epi_dt, fp32_dst_), SrcFmtOf(wdt_, fp32_dst_)};
      const uint32_t* src = l1acc_ ? l1 : part;
      if (epi_dt == DeviceDType::kFloat32) {  // the stored partials as the unpacker reads them
        for (int64_t o = 0; o < n; ++o) dst[o] = UnpackToSrc(src[o], epi_dt, fp32_dst_);
        src = dst;
      }
      nx::ElwaddRow(src, bias, n, elw_cfg, dst);
    }
    if (sfpu_) {
      // SFPU activation after the last block (or the bias add), in the form the conv epilogue
      // compiles (device/numerics/sfpu.h); rounding into a bf16 Dst is RNE (unverified, sfpu.h).
      const bool approx = nx::SfpuConvEpilogueApprox(*sfpu_);
      for (int64_t o = 0; o < n; ++o) {
        const float f = nx::SfpuEval(*sfpu_, nx::BitsFloat(dst[o]), approx, arch_);
        dst[o] = fp32_dst_ ? nx::FloatBits(f) : static_cast<uint32_t>(nx::HostFp32ToBf16(nx::FloatBits(f))) << 16;
      }
    }
    PackRow(dst, n, odt_, fp32_dst_, act_ == Activation::kRelu, /*host_view=*/true, precise_, fin);
  }

  // The default height-sharded layout without groups: each K block holds exactly the taps of one
  // kernel row (all channels). Then one oneDNN convolution per kernel row gives the block sums.
  bool RowPerBlock() const {
    const EmuGeometry& g = g_;
    if (g.G != 1 || per_row_tilize_ || k_.num_blocks() != g.kh) return false;
    for (int64_t b = 0; b < g.kh; ++b) {
      int64_t count = 0;
      for (int64_t k = k_.block_begin[b]; k < k_.block_begin[b + 1]; ++k) {
        if (ki_[k] < 0) continue;
        if (ki_[k] != b) return false;
        ++count;
      }
      if (count != g.kw * g.C) return false;
    }
    return true;
  }

  // Fast level, in chunks of output rows: im2col of the fidelity-slice operands, one oneDNN fp32
  // matmul per K block (two for HiFi3), then the exact spill / bias / pack epilogue per row.
  Status RunFast(const CancelToken* cancel, int threads, std::vector<uint32_t>* out) {
    const EmuGeometry& g = g_;
    // Operand variants (§5.2 slices as floats): A0 = top 5 significant bits, A' = all but mantissa
    // bit 0 (of 10); B0 = top 7 bits; B = all 11 bits; B1 = B − B0. Products of these are exact
    // in fp32 (at most 10 x 11 significant bits).
    auto mask = [](uint32_t u, uint32_t m) -> float {
      if (((u >> 23) & 0xFFu) == 0) return 0.0f;
      return nx::BitsFloat(u & m);
    };
    const bool lofi = fid_ == MathFidelity::kLoFi, hifi3 = fid_ == MathFidelity::kHiFi3,
               hifi4 = fid_ == MathFidelity::kHiFi4;
    const size_t wn = wdev_.size();
    std::vector<float> a0_copy;
    if (hifi3) {
      a0_copy.resize(wn);
      for (size_t i = 0; i < wn; ++i) a0_copy[i] = mask(wdev_[i], 0xFFF80000u);
    }
    std::vector<uint32_t> wvar = std::move(wdev_);
    wdev_.clear();
    for (size_t i = 0; i < wn; ++i) wvar[i] = nx::FloatBits(mask(wvar[i], lofi ? 0xFFF80000u : 0xFFFFC000u));
    const float* w_primary = reinterpret_cast<const float*>(wvar.data());  // A0 (LoFi) or A'
    const float* w_a0 = hifi3 ? a0_copy.data() : nullptr;
    const bool need_b0 = !hifi4, need_b1 = hifi3 || hifi4;
    auto b0v = [&](uint32_t u) { return mask(u, 0xFFFE0000u); };
    auto b1v = [&](uint32_t u) { return hifi3 ? mask(u, 0xFFFFE000u) - b0v(u) : mask(u, 0xFFFFE000u); };
    if (RowPerBlock()) {
      std::vector<float> img0, img1;  // NHWC images: B0, and B1 (HiFi3) or B (HiFi4)
      if (need_b0) img0.resize(xdev_.size());
      if (need_b1) img1.resize(xdev_.size());
      for (size_t i = 0; i < xdev_.size(); ++i) {
        if (need_b0) img0[i] = b0v(xdev_[i]);
        if (need_b1) img1[i] = b1v(xdev_[i]);
      }
      std::vector<float> sums(static_cast<size_t>(g.kh * g.M * g.O_pad));
      const auto t0 = std::chrono::steady_clock::now();
      KILN_RETURN_IF_ERROR(ConvRowSums(hifi4 ? img1 : img0, w_primary, hifi3 ? &img1 : nullptr, w_a0, sums.data()));
      fast_sums_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (cancel) KILN_RETURN_IF_ERROR(cancel->Check());
      return Parallel(0, g.M, g.O_pad * (g.kh + 4) * 8, threads,
                      [&](int64_t a, int64_t b) { return RunRows(a, b, cancel, out, sums.data(), 0, g.M); });
    }
    // Chunk of rows: im2col of R x K floats (about 16 MiB), large enough for efficient matmuls.
    const int64_t nb = k_.num_blocks();
    const int64_t R = std::min<int64_t>(g.M, std::max<int64_t>(64, (int64_t{4} << 20) / std::max<int64_t>(1, K_)));
    std::vector<float> c0, c1, sums(static_cast<size_t>(nb * R * g.O_pad)), tmp;
    if (need_b0) c0.resize(static_cast<size_t>(R * K_));
    if (need_b1) c1.resize(static_cast<size_t>(R * K_));
    if (hifi3) tmp.resize(static_cast<size_t>(R * g.O_pad));
    const int64_t kb_w = k_.block_begin[1] - k_.block_begin[0];
    bool equal_blocks = true;
    for (int64_t b = 0; b < nb; ++b) equal_blocks &= k_.block_begin[b + 1] - k_.block_begin[b] == kb_w;
    try {
      dnnl::engine eng(dnnl::engine::kind::cpu, 0);
      dnnl::stream strm(eng);
      for (int64_t m0 = 0; m0 < g.M; m0 += R) {
        if (cancel) KILN_RETURN_IF_ERROR(cancel->Check());
        const int64_t rows = std::min(R, g.M - m0);
        const auto t0 = std::chrono::steady_clock::now();
        KILN_RETURN_IF_ERROR(Parallel(0, rows, K_ * 2, threads, [&](int64_t a, int64_t b) {
          std::vector<uint32_t> xr(static_cast<size_t>(K_));
          for (int64_t r = a; r < b; ++r) {
            Im2colRow(m0 + r, xr.data());
            for (int64_t k = 0; k < K_; ++k) {
              if (need_b0) c0[r * K_ + k] = b0v(xr[k]);
              if (need_b1) c1[r * K_ + k] = b1v(xr[k]);
            }
          }
          return Status::Ok();
        }));
        if (equal_blocks && nb > 1 && !hifi3) {
          // Equal-width K blocks: one batched matmul (batch = K block) instead of nb small ones
          // (block-sharded programs have many 32- or 64-deep blocks; each separate matmul is a
          // parallel region of its own).
          const float* src = hifi4 ? c1.data() : c0.data();
          KILN_RETURN_IF_ERROR(MatmulF32Blocks(eng, strm, src, nb, rows, kb_w, K_, w_primary, g.O_pad, K_, sums.data()));
        } else {
          for (int64_t b = 0; b < nb; ++b) {
            const int64_t kb0 = k_.block_begin[b], kb = k_.block_begin[b + 1] - kb0;
            float* o = sums.data() + b * rows * g.O_pad;
            const float* src = hifi4 ? c1.data() : c0.data();
            KILN_RETURN_IF_ERROR(MatmulF32(eng, strm, src + kb0, rows, kb, K_, w_primary + kb0, g.O_pad, K_, o));
            if (hifi3) {
              KILN_RETURN_IF_ERROR(MatmulF32(eng, strm, c1.data() + kb0, rows, kb, K_, w_a0 + kb0, g.O_pad, K_, tmp.data()));
              for (int64_t i = 0; i < rows * g.O_pad; ++i) o[i] += tmp[static_cast<size_t>(i)];
            }
          }
        }
        fast_sums_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        KILN_RETURN_IF_ERROR(Parallel(m0, m0 + rows, g.O_pad * (nb + 4) * 8, threads, [&](int64_t a, int64_t b) {
          return RunRows(a, b, cancel, out, sums.data(), m0, rows);
        }));
      }
    } catch (const dnnl::error& e) {
      return Internal(std::string("oneDNN: ") + e.what());
    }
    return Status::Ok();
  }

  // sums[i][m][o] = Σ_{j, c} W[o, c, i, j]·X[n, y(oy, i), x(ox, j), c] for every kernel row i, with
  // oneDNN f32 convolutions (kernel 1 x kW) on the zero-padded NHWC image `img` (C channels); `w`
  // is the [O_pad][K] variant matrix in the program's K order. With `img2`/`w2` (HiFi3) a second
  // product is added.
  Status ConvRowSums(const std::vector<float>& img, const float* w, const std::vector<float>* img2, const float* w2,
                     float* sums) const {
    const EmuGeometry& g = g_;
    const int64_t Hp = (g.OH - 1) * g.sh + (g.kh - 1) * g.dh + 1, Wp = (g.OW - 1) * g.sw + (g.kw - 1) * g.dw + 1;
    std::vector<int64_t> kpos(static_cast<size_t>(g.kh * g.kw * g.C), -1);  // (i, j, c) → K index
    for (int64_t k = 0; k < K_; ++k)
      if (ki_[k] >= 0) kpos[static_cast<size_t>((ki_[k] * g.kw + kj_[k]) * g.C + kc_[k])] = k;
    auto pad_image = [&](const std::vector<float>& src) {
      std::vector<float> xp(static_cast<size_t>(g.N * Hp * Wp * g.C), 0.0f);
      for (int64_t n = 0; n < g.N; ++n)
        for (int64_t yp = 0; yp < Hp; ++yp) {
          const int64_t y = yp - g.pt;
          if (y < 0 || y >= g.H) continue;
          for (int64_t xq = 0; xq < Wp; ++xq) {
            const int64_t x = xq - g.pl;
            if (x < 0 || x >= g.W) continue;
            const float* s = &src[static_cast<size_t>(((n * g.H + y) * g.W + x) * g.C)];
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
          tmp.assign(static_cast<size_t>(g.kh * g.M * g.O_pad), 0.0f);
          dst_base = tmp.data();
        }
        for (int64_t i = 0; i < g.kh; ++i) {
          std::vector<float> wi(static_cast<size_t>(g.O_pad * g.C * g.kw));
          for (int64_t o = 0; o < g.O_pad; ++o)
            for (int64_t c = 0; c < g.C; ++c)
              for (int64_t j = 0; j < g.kw; ++j)
                wi[static_cast<size_t>((o * g.C + c) * g.kw + j)] =
                    wm[o * K_ + kpos[static_cast<size_t>((i * g.kw + j) * g.C + c)]];
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

  // A partial reloaded into Dst (copy_block_matmul_partials through SrcA): fp32 partials as Tf32
  // where the program says so, else exactly; bf16 / bfp partials are bf16-exact.
  uint32_t Reload(uint32_t v, DeviceDType dt) const {
    if (dt == DeviceDType::kFloat32 && tf32_reload_) v = nx::UnpackFp32ToTf32(v);
    return ((v >> 23) & 0xFFu) == 0 ? 0u : v;
  }

  // Fast level, rows [m_begin, m_end): per K block the block sums `sums` ([nb][sums_rows][O_pad]
  // for rows from sums_m0) rounded into Dst (on top of the reloaded partials), then the exact
  // spills, bias, activation and pack.
  Status RunRows(int64_t m_begin, int64_t m_end, const CancelToken* cancel, std::vector<uint32_t>* out,
                 const float* sums, int64_t sums_m0, int64_t sums_rows) const {
    const EmuGeometry& g = g_;
    const int64_t nb = k_.num_blocks(), nc = g.O_pad;
    std::vector<uint32_t> dst(static_cast<size_t>(nc)), part(dst.size()), l1(dst.size()), fin(dst.size());
    // Where the partials' round trip gives Dst back unchanged (PartialsRoundTripExact; AddIntoDstRow
    // leaves +0, normal values or ±Inf), Dst simply stays between blocks.
    const bool keep = PartialsRoundTripExact() && g_fuse_blocks.load(std::memory_order_relaxed);
    for (int64_t m = m_begin; m < m_end; ++m) {
      if (cancel && ((m - m_begin) % 64) == 0) KILN_RETURN_IF_ERROR(cancel->Check());
      for (int64_t b = 0; b < nb; ++b) {
        const bool l1_tail = l1acc_ && !has_bias_ && b == nb - 1;
        const bool from_zero = b == 0 || (l1acc_ && !l1_tail);
        if (!keep || b == 0) BlockStart(b, nc, dst.data(), part.data(), l1.data());
        const float* s = &sums[(b * sums_rows + (m - sums_m0)) * nc];
        // The block's fp32 sums rounded into Dst (numerics::AddIntoDstRow), from +0 or on top of it.
        if (from_zero) std::fill(dst.begin(), dst.end(), 0u);
        nx::AddIntoDstRow(s, nc, fp32_dst_, dst.data());
        if (!keep || b == nb - 1) BlockEnd(b, nc, dst.data(), part.data(), l1.data());
      }
      FinishRow(0, nc, dst.data(), part.data(), l1.data(), fin.data());
      std::copy(fin.begin(), fin.begin() + g.O, out->begin() + m * g.O);
    }
    return Status::Ok();
  }

 private:
  EmuGeometry g_;
  const KLayout& k_;
  const ConvProgram& prog_;
  PrecisionConfig p_;
  EmuLevel level_;
  int64_t K_ = 0;
  std::vector<int32_t> ki_, kj_, kc_;  // per K index: kernel row, column (−1 = padding), channel
  std::vector<KRun> runs_;
  std::vector<KGroup> kgroups_;  // per group of 8 K entries (K/8), where srcb_image_
  std::vector<int32_t> goff_;    // per group: (i·dh·W + j·dw)·C8 + cg, its offset in groups from the
                                 // row's pixel (0 for K padding), for GatherInside
  std::vector<uint16_t> greal_;  // bit q % 16 of [q / 16]: group q is not K padding
  bool srcb_image_ = false;      // the exact level reads SrcB from the image (AllocateSrcBImage)
  float* nchw_ = nullptr;        // Run's NCHW destination of the exact rows, or null
  bool fp32_dst_ = false, l1acc_ = false, tf32_reload_ = true, precise_ = false, per_row_tilize_ = false;
  bool has_bias_ = false;
  double fast_sums_s_ = 0;
  Activation act_ = Activation::kNone;
  std::optional<nx::SfpuOp> sfpu_;  // the epilogue's SFPU op (ReLU is the packer's)
  MathFidelity fid_ = MathFidelity::kHiFi4;
  Arch arch_ = Arch::kWormholeB0;
  DeviceDType wdt_ = DeviceDType::kFloat32, act_dt_ = DeviceDType::kBFloat16, odt_ = DeviceDType::kBFloat16,
              part_dt_ = DeviceDType::kBFloat16;
  ScratchBuffer xbuf_{ScratchSlot::kActivations}, wbuf_{ScratchSlot::kWeights};
  std::vector<uint32_t>& xdev_ = xbuf_.v;  // device images (Prepare)
  std::vector<uint32_t>& wdev_ = wbuf_.v;
  ScratchBuffer srcb_buf_{ScratchSlot::kSrcBImage};
  uint32_t* srcb_words_ = nullptr;  // the image's words and masks, in srcb_buf_
  uint8_t* srcb_nz_ = nullptr;
  std::vector<uint32_t> bdev_;
};

}  // namespace

ScratchBuffer::ScratchBuffer(ScratchSlot s) : slot(s), v(std::move(t_scratch[static_cast<int>(s)])) {
  t_scratch[static_cast<int>(s)].clear();  // moved-from: empty already; stated for the reader
}

ScratchBuffer::~ScratchBuffer() {
  if (static_cast<int64_t>(v.capacity() * sizeof(uint32_t)) <= kScratchKeepBytes &&
      v.capacity() >= t_scratch[static_cast<int>(slot)].capacity())
    t_scratch[static_cast<int>(slot)] = std::move(v);
}

void SetMaxPreparedSrcABytesForTesting(int64_t bytes) { g_max_prepared_bytes.store(bytes, std::memory_order_relaxed); }

void SetFuseExactKBlocksForTesting(bool fuse) { g_fuse_blocks.store(fuse, std::memory_order_relaxed); }

void SetSrcBImageForTesting(bool use) { g_srcb_image.store(use, std::memory_order_relaxed); }

void SetDirectNchwForTesting(bool use) { g_direct_nchw.store(use, std::memory_order_relaxed); }

Status RunConvProgram(const EmuGeometry& g, const ConvProgram& program, const PrecisionConfig& precision,
                      Activation activation, EmuLevel level, const float* x, const float* w, const float* bias,
                      const CancelToken* cancel, int threads, std::vector<uint32_t>* out, EmuStats* stats,
                      float* nchw) {
  if (!g_direct_nchw.load(std::memory_order_relaxed)) nchw = nullptr;
  Engine eng(g, program, precision, activation, level);
  eng.Prepare(x, w, bias, threads);
  KILN_RETURN_IF_ERROR(eng.Run(cancel, threads, out, nchw));
  if (stats) {
    stats->fast_matmul_seconds = eng.fast_sums_seconds();
    stats->srcb_image = eng.srcb_image();
    stats->nchw_written = nchw != nullptr && level == EmuLevel::kExact;
  }
  return Status::Ok();
}

}  // namespace kiln::device::tt_emu
