// Section numbers (§) cite docs/specs/tt-numerics.md, as in tt_conv.h.
#include "device/backends/tt_emu/tt_conv.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "device/backends/builtin.h"
#include "device/numerics/formats.h"
#include "device/backends/tt_emu/conv_engine.h"
#include "device/backends/tt_emu/depthwise_engine.h"
#include "device/backends/tt_emu/program.h"
#include "device/backends/tt_emu/transpose.h"

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

Result<Tensor> RunConv(const Tensor& input, const Tensor& weights, const Tensor* bias, const Conv2dParams& params,
                       const PrecisionConfig& precision, EmuLevel level, const CancelToken* cancel, OpReport* report,
                       const char* op_name, const std::vector<std::pair<std::string, std::string>>& extra_notes,
                       int threads) {
  auto t_start = std::chrono::steady_clock::now();
  KILN_RETURN_IF_ERROR(precision.Validate());
  if (cancel) KILN_RETURN_IF_ERROR(cancel->Check());
  auto out_shape = ValidateConv2d(input, weights, bias, params);
  if (!out_shape.ok()) return out_shape.status();
  // NCHW input is read in place; another layout is converted (a copy).
  std::optional<Tensor> converted;
  if (input.layout() != Layout::kNCHW) {
    auto nchw = input.ToLayout(Layout::kNCHW);
    if (!nchw.ok()) return nchw.status();
    converted = std::move(*nchw);
  }
  const Tensor& x = converted ? *converted : input;
  // The output first: a size beyond the tensor limit is RESOURCE_EXHAUSTED before anything else.
  // Uninitialized: every element is written on the conv's threads (the exact level's row tiles, or
  // the transpose below).
  auto t = Tensor::Uninitialized(*out_shape);
  if (!t.ok()) return t.status();
  ConvProblem pb;
  pb.N = x.dim(0);
  pb.C = x.dim(1);
  pb.H = x.dim(2);
  pb.W = x.dim(3);
  pb.O = weights.dim(0);
  pb.kh = weights.dim(2);
  pb.kw = weights.dim(3);
  pb.sh = params.strides[0];
  pb.sw = params.strides[1];
  pb.dh = params.dilations[0];
  pb.dw = params.dilations[1];
  pb.pads = params.pads;
  pb.group = params.group;
  pb.OH = (*out_shape)[2];
  pb.OW = (*out_shape)[3];
  pb.has_bias = bias != nullptr;
  pb.activation = params.activation;
  auto program = SelectConvProgram(pb, precision, DeviceDType::kFloat32);
  if (!program.ok()) return program.status();
  EmuGeometry g{};
  g.N = pb.N;
  g.C = pb.C;
  g.H = pb.H;
  g.W = pb.W;
  g.O = pb.O;
  g.G = pb.group;
  g.Cg = g.C / g.G;
  g.Og = g.O / g.G;
  g.kh = pb.kh;
  g.kw = pb.kw;
  g.sh = pb.sh;
  g.sw = pb.sw;
  g.dh = pb.dh;
  g.dw = pb.dw;
  g.pt = params.pads[0];
  g.pl = params.pads[1];
  g.OH = pb.OH;
  g.OW = pb.OW;
  g.O_pad = program->cout_padded;
  g.M = g.N * g.OH * g.OW;
  const auto t_run = std::chrono::steady_clock::now();
  // The engine's output rows (M x O patterns) where it does not write `t` itself (the fast level,
  // depthwise): a buffer kept per thread between calls, so that repeated convs reuse its pages
  // instead of faulting in fresh ones (ScratchBuffer).
  ScratchBuffer out_buf(ScratchSlot::kOutput);
  std::vector<uint32_t>& out = out_buf.v;
  EmuStats stats;
  const int nthreads = threads > 0 ? threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  KILN_RETURN_IF_ERROR(program->path == ConvProgramPath::kDepthwise2d
                           ? RunDepthwiseProgram(g, *program, precision, program->activation, level, x.data<float>(),
                                                 weights.data<float>(), bias ? bias->data<float>() : nullptr, cancel,
                                                 nthreads, &out)
                           : RunConvProgram(g, *program, precision, program->activation, level, x.data<float>(),
                                            weights.data<float>(), bias ? bias->data<float>() : nullptr, cancel,
                                            nthreads, &out, &stats, t->data<float>()));
  const auto t_done = std::chrono::steady_clock::now();

  if (!stats.nchw_written) {
    // Rows m = (n, s) of O patterns into NCHW (the fast level's and depthwise's; the exact level
    // writes the tensor itself), in tiles of 16 pixels: each tile's pixels (src[s * O + o]) into O
    // channel runs dst[o * P + s] (Transpose32), the tile's rows staying in cache while read.
    float* dst = t->data<float>();
    const int64_t P = g.OH * g.OW;
    constexpr int64_t kTile = 16;
    const int64_t tiles = (P + kTile - 1) / kTile;
    // Split over the conv's threads when there is enough of it (tiles are independent).
    const int tthreads = static_cast<int>(std::min<int64_t>(nthreads, g.M * g.O / 65536 + 1));
#pragma omp parallel for collapse(2) num_threads(tthreads) schedule(static) if (tthreads > 1)
    for (int64_t n = 0; n < g.N; ++n)
      for (int64_t ti = 0; ti < tiles; ++ti) {
        const int64_t s0 = ti * kTile, s1 = std::min(P, s0 + kTile);
        Transpose32(&out[static_cast<size_t>((n * P + s0) * g.O)], s1 - s0, g.O, g.O, dst + n * g.O * P + s0, P);
      }
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
    report->blocking = ConvProgramSummary(*program);
    report->program = ToProgramReport(*program);
    report->precision = precision.Resolved();
    report->output_shape = *out_shape;
    report->macs = g.N * g.O * g.OH * g.OW * g.Cg * g.kh * g.kw;
    report->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
    report->notes = extra_notes;
    auto secs = [](auto a, auto b) { return std::to_string(std::chrono::duration<double>(b - a).count()); };
    report->notes.emplace_back("run_s", secs(t_run, t_done));
    if (level == EmuLevel::kFast) report->notes.emplace_back("fast_matmul_s", std::to_string(stats.fast_matmul_seconds));
    // Where the exact level's SrcB operands came from (conv_engine.h kMaxSrcBImageBytes): "image",
    // prepared once per input pixel, or "rows", prepared per im2col row.
    if (level == EmuLevel::kExact && program->path != ConvProgramPath::kDepthwise2d)
      report->notes.emplace_back("exact_srcb", stats.srcb_image ? "image" : "rows");
  }
  return result;
}

}  // namespace

Result<Tensor> Conv2d(const Tensor& input, const Tensor& weights, const Tensor* bias, const Conv2dParams& params,
                      const PrecisionConfig& precision, EmuLevel level, const CancelToken* cancel, OpReport* report,
                      int threads) {
  return RunConv(input, weights, bias, params, precision, level, cancel, report, "conv2d", {}, threads);
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
                                             " with the mirrored kernel (mirror_kernel=true)"}},
                   0);
  if (!r.ok()) return r.status();
  if (report) report->macs = N * C * H * W * Og * kh * kw;
  if (input.layout() != Layout::kNCHW) return r->ToLayout(input.layout());
  return r;
}

}  // namespace kiln::device::tt_emu
