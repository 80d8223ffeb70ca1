// The exact MVMUL kernel (device/numerics/mvmul_kernel.h) against the golden vectors and against the
// per-MVMUL model numerics::MvmulPhase (device/numerics/fpu.h), on both paths: the scalar one
// (forced with SetMvmulKernel) and the AVX2 and AVX-512 ones where the CPU has them. The oracle runs every
// MVMUL of docs/specs/tt-numerics.md §5.6's order, none skipped.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <fstream>
#include <map>
#include <iterator>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "device/numerics/fpu.h"
#include "device/numerics/mvmul_kernel.h"

namespace kiln::numerics {
namespace {

const std::string kDir = std::string(KILN_TEST_DATA) + "/tt-vectors";

// The kernel paths to run on this machine.
std::vector<MvmulKernelPath> Paths() {
  std::vector<MvmulKernelPath> p{MvmulKernelPath::kScalar};
  for (auto v : {MvmulKernelPath::kAvx2, MvmulKernelPath::kAvx512, MvmulKernelPath::kAvx512Fp16}) {
    if (MvmulKernelSupported(v)) p.push_back(v);
  }
  return p;
}

// Selects a path for the scope; restores the automatic choice afterwards.
class UsePath {
 public:
  explicit UsePath(MvmulKernelPath p) {
    SetMvmulKernel(p);
    EXPECT_EQ(ActiveMvmulKernel(), p);
  }
  ~UsePath() { ResetMvmulKernel(); }
};

// A conv-like problem: a[o * K + k] weights (SrcA), b[k] one activation row (SrcB).
struct Problem {
  int64_t cols = 0, K = 0;
  std::vector<uint32_t> a, b;
  SrcFormat a_fmt = SrcFormat::kBf16, b_fmt = SrcFormat::kBf16;
};

// The §5.6 chain with numerics::MvmulPhase for columns [o0, o1), K tiles [k0, k1), phases [p0, p1).
std::vector<uint32_t> Oracle(const Problem& pr, int64_t k0, int64_t k1, int64_t o0, int64_t o1, int p0, int p1,
                             bool fp32_dst, Arch arch, std::vector<uint32_t> dst) {
  const FpuConfig cfg{fp32_dst, arch, pr.a_fmt, pr.b_fmt};
  for (int64_t o = o0; o < o1; ++o) {
    uint32_t d = dst[static_cast<size_t>(o - o0)];
    for (int64_t t0 = k0; t0 < k1; t0 += 32)
      for (int p = p0; p < p1; ++p)
        for (int64_t h = t0; h < t0 + 32; h += 16) {
          std::span<const uint32_t, 16> a(&pr.a[static_cast<size_t>(o * pr.K + h)], 16);
          std::span<const uint32_t, 16> b(&pr.b[static_cast<size_t>(h)], 16);
          d = MvmulPhase(a, b, d, p, cfg);
        }
    dst[static_cast<size_t>(o - o0)] = d;
  }
  return dst;
}

std::vector<uint32_t> Kernel(const Problem& pr, MathFidelity prep_fid, int64_t k0, int64_t k1, int64_t o0, int64_t o1,
                             int p0, int p1, bool fp32_dst, Arch arch, std::vector<uint32_t> dst) {
  auto a = PrepareSrcA(pr.a.data(), pr.cols, pr.K, prep_fid, pr.a_fmt);
  EXPECT_TRUE(a.ok()) << a.status().ToString();
  PreparedSrcB b;
  EXPECT_TRUE(PrepareSrcBRow(pr.b.data(), pr.K, prep_fid, pr.b_fmt, &b).ok());
  Status s = RunKBlockPhases(*a, b, k0, k1, o0, o1, p0, p1, fp32_dst, arch, dst.data());
  EXPECT_TRUE(s.ok()) << s.ToString();
  return dst;
}

std::string Hex(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08x", v);
  return buf;
}

// Every path against the model over the whole problem (all columns and K, every phase of `fid`),
// bit for bit; `what` names the case in a failure. Adds the values compared to *compared.
void ExpectPathsMatchModel(const Problem& pr, MathFidelity fid, bool fp32, Arch arch, const std::vector<uint32_t>& dst,
                           const std::string& what, size_t* compared) {
  const int phases = NumPhases(fid);
  const auto want = Oracle(pr, 0, pr.K, 0, pr.cols, 0, phases, fp32, arch, dst);
  for (MvmulKernelPath path : Paths()) {
    UsePath use(path);
    const auto got = Kernel(pr, fid, 0, pr.K, 0, pr.cols, 0, phases, fp32, arch, dst);
    for (size_t i = 0; i < want.size(); ++i, ++*compared)
      ASSERT_EQ(Hex(got[i]), Hex(want[i])) << MvmulKernelPathName(path) << " " << what << " column " << i
                                           << " fp32_dst=" << fp32 << " arch=" << ArchName(arch)
                                           << " dst_in=" << Hex(dst[i]);
  }
}

uint32_t ParseHex(const nlohmann::json& j) { return static_cast<uint32_t>(std::stoul(j.get<std::string>(), nullptr, 16)); }

SrcFormat ParseFmt(const nlohmann::json& o, const char* key) {
  return o.contains(key) && o[key].get<std::string>() == "tf32" ? SrcFormat::kTf32 : SrcFormat::kBf16;
}

std::vector<nlohmann::json> ReadLines(const std::string& name) {
  std::ifstream in(kDir + "/" + name);
  EXPECT_TRUE(in) << name;
  std::vector<nlohmann::json> out;
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  return out;
}

const std::array<std::pair<const char*, Arch>, 2> kArchs{{{"wh", Arch::kWormholeB0}, {"bh", Arch::kBlackhole}}};
const std::array<std::pair<const char*, MathFidelity>, 4> kFids{{{"LoFi", MathFidelity::kLoFi},
                                                                 {"HiFi2", MathFidelity::kHiFi2},
                                                                 {"HiFi3", MathFidelity::kHiFi3},
                                                                 {"HiFi4", MathFidelity::kHiFi4}}};

// mvmul.jsonl: one 16-lane MVMUL per phase. Through the kernel as the first K half of a 32-deep tile
// whose second half is zero (a zero MVMUL leaves an MVMUL result unchanged), in 9 columns (two
// vector blocks, one partial) that all hold the vector's column.
TEST(MvmulKernelVectors, MvmulJsonlThroughKernel) {
  const auto lines = ReadLines("mvmul.jsonl");
  ASSERT_EQ(lines.size(), 1354u);  // tests/data/tt-vectors/README.md
  for (MvmulKernelPath path : Paths()) {
    UsePath use(path);
    size_t checked = 0, failed = 0;
    for (const auto& o : lines) {
      Problem pr;
      pr.cols = 9;
      pr.K = 32;
      pr.a_fmt = ParseFmt(o, "a_fmt");
      pr.b_fmt = ParseFmt(o, "b_fmt");
      pr.a.assign(static_cast<size_t>(pr.cols * pr.K), 0);
      pr.b.assign(32, 0);
      for (int k = 0; k < 16; ++k) {
        pr.b[static_cast<size_t>(k)] = ParseHex(o["b"][k]);
        for (int64_t c = 0; c < pr.cols; ++c) pr.a[static_cast<size_t>(c * 32 + k)] = ParseHex(o["a"][k]);
      }
      const bool fp32 = o["fp32_acc"].get<bool>();
      const std::vector<uint32_t> dst(9, ParseHex(o["dst_in"]));
      for (const auto& [key, arch] : kArchs) {
        if (!o.contains(key)) continue;
        const auto& r = o[key];
        auto expect = [&](const std::string& field, uint32_t want, const std::vector<uint32_t>& got) {
          ++checked;
          for (uint32_t g : got) {
            if (g == want) continue;
            if (++failed <= 5)
              ADD_FAILURE() << MvmulKernelPathName(path) << " id " << o["id"] << " " << key << "." << field
                            << ": expected " << Hex(want) << ", got " << Hex(g);
            break;
          }
        };
        for (int p = 0; p < 4; ++p)
          expect("phase[" + std::to_string(p) + "]", ParseHex(r["phase"][p]),
                 Kernel(pr, MathFidelity::kHiFi4, 0, 32, 0, 9, p, p + 1, fp32, arch, dst));
        for (const auto& [fname, fid] : kFids)
          if (r.contains(fname))
            expect(fname, ParseHex(r[fname]), Kernel(pr, fid, 0, 32, 0, 9, 0, NumPhases(fid), fp32, arch, dst));
      }
    }
    EXPECT_EQ(failed, 0u) << MvmulKernelPathName(path);
    EXPECT_EQ(checked, 1354u * 2 * 8) << "every line has wh and bh with 4 phases and 4 fidelities";
  }
}

// kacc32.jsonl: K = 32 × 16 columns from Dst = 0, the whole §5.6 sequence.
TEST(MvmulKernelVectors, Kacc32JsonlThroughKernel) {
  const auto lines = ReadLines("kacc32.jsonl");
  ASSERT_EQ(lines.size(), 48u);
  for (MvmulKernelPath path : Paths()) {
    UsePath use(path);
    size_t checked = 0, failed = 0;
    for (const auto& o : lines) {
      Problem pr;
      pr.cols = 16;
      pr.K = 32;
      pr.a_fmt = ParseFmt(o, "a_fmt");
      pr.b_fmt = ParseFmt(o, "b_fmt");
      pr.a.assign(16 * 32, 0);
      pr.b.assign(32, 0);
      for (int k = 0; k < 32; ++k) {
        pr.b[static_cast<size_t>(k)] = ParseHex(o["x"][k]);
        for (int c = 0; c < 16; ++c) pr.a[static_cast<size_t>(c * 32 + k)] = ParseHex(o["w"][k][c]);
      }
      for (const auto& [key, arch] : kArchs) {
        if (!o.contains(key)) continue;
        for (const auto& [rkey, res] : o[key].items()) {
          const bool fp32 = rkey.rfind("fp32_", 0) == 0;
          ASSERT_TRUE(fp32 || rkey.rfind("bf16_", 0) == 0) << rkey;
          MathFidelity fid{};
          bool known = false;
          for (const auto& [fname, f] : kFids)
            if (rkey.substr(5) == fname) fid = f, known = true;
          ASSERT_TRUE(known) << rkey;
          const auto got = Kernel(pr, fid, 0, 32, 0, 16, 0, NumPhases(fid), fp32, arch, std::vector<uint32_t>(16, 0));
          ++checked;
          for (int c = 0; c < 16; ++c) {
            const uint32_t want = ParseHex(res["dst"][c]);
            if (got[static_cast<size_t>(c)] != want && ++failed <= 5)
              ADD_FAILURE() << MvmulKernelPathName(path) << " id " << o["id"] << " " << key << "." << rkey << " col " << c
                            << ": expected " << Hex(want) << ", got " << Hex(got[static_cast<size_t>(c)]);
          }
        }
      }
    }
    EXPECT_EQ(failed, 0u) << MvmulKernelPathName(path);
    EXPECT_EQ(checked, 48u * 2 * 8) << "wh and bh, fp32_ and bf16_ × 4 fidelities per line";
  }
}

// Operand patterns with the exponent edges: zeros and denormals (exponent 0), exponents 1, 2, 254,
// Inf/NaN patterns (255), values near 1 and wide random ones; `zero_share` of them exponent 0.
uint32_t RandOperand(std::mt19937& rng, double zero_share) {
  std::uniform_real_distribution<double> u(0, 1);
  const uint32_t sign = (rng() & 1u) << 31, mant = rng() & 0x7FFFFFu;
  if (u(rng) < zero_share) {
    switch (rng() % 3) {
      case 0: return 0;
      case 1: return 0x80000000u;
      default: return sign | (mant | 1u);  // denormal
    }
  }
  const double r = u(rng);
  uint32_t e;
  if (r < 0.04) e = 1 + rng() % 2;
  else if (r < 0.08) e = 254;
  else if (r < 0.11) e = 255;
  else if (r < 0.6) e = 120 + rng() % 16;
  else e = 1 + rng() % 254;
  return sign | (e << 23) | mant;
}

// Dst patterns of every class: ±0, denormals, normals, exponent 1 and 254, ±Inf, NaN patterns.
uint32_t RandDst(std::mt19937& rng, bool fp32_dst) {
  static const uint32_t kSpecial[] = {0x00000000u, 0x80000000u, 0x00000001u, 0x807FFFFFu, 0x00400000u,
                                      0x7F800000u, 0xFF800000u, 0x7FC00000u, 0xFF800001u, 0x7F800001u,
                                      0x00800000u, 0x80800000u, 0x7F7FFFFFu, 0x3F800000u, 0xBF800001u};
  uint32_t d = rng() % 3 == 0 ? kSpecial[rng() % std::size(kSpecial)] : RandOperand(rng, 0.1);
  // A bf16 Dst holds bf16 patterns (low 16 bits 0); now and then a pattern with low bits set too,
  // which the model (and so the kernel) still defines.
  if (!fp32_dst && rng() % 8 != 0) d &= 0xFFFF0000u;
  return d;
}

struct Case {
  Problem pr;
  int64_t k0, k1, o0, o1;
  int p0, p1;
  MathFidelity prep;
  bool fp32;
  Arch arch;
  std::vector<uint32_t> dst;
};

Case RandCase(std::mt19937& rng) {
  Case c;
  std::uniform_real_distribution<double> u(0, 1);
  c.pr.cols = 1 + rng() % 37;
  c.pr.K = 32 * (1 + rng() % 5);
  c.pr.a_fmt = rng() % 3 == 0 ? SrcFormat::kTf32 : SrcFormat::kBf16;
  c.pr.b_fmt = rng() % 3 == 0 ? SrcFormat::kTf32 : SrcFormat::kBf16;
  const double za = u(rng) < 0.3 ? u(rng) : 0.05, zb = u(rng) < 0.3 ? u(rng) : 0.05;
  c.pr.a.resize(static_cast<size_t>(c.pr.cols * c.pr.K));
  c.pr.b.resize(static_cast<size_t>(c.pr.K));
  for (auto& v : c.pr.a) v = RandOperand(rng, za);
  for (auto& v : c.pr.b) v = RandOperand(rng, zb);
  // Whole zero 16-lane halves and zero columns, to exercise the skips.
  for (int64_t h = 0; h < c.pr.K; h += 16) {
    if (rng() % 5 == 0) std::fill(&c.pr.b[static_cast<size_t>(h)], &c.pr.b[static_cast<size_t>(h)] + 16, 0u);
    for (int64_t o = 0; o < c.pr.cols; ++o)
      if (rng() % 7 == 0) std::fill_n(&c.pr.a[static_cast<size_t>(o * c.pr.K + h)], 16, 0u);
  }
  const int64_t tiles = c.pr.K / 32;
  c.k0 = 32 * static_cast<int64_t>(rng() % tiles);
  c.k1 = c.k0 + 32 * (1 + static_cast<int64_t>(rng() % (tiles - c.k0 / 32)));
  c.o0 = rng() % 2 ? 0 : static_cast<int64_t>(rng() % c.pr.cols);
  c.o1 = rng() % 2 ? c.pr.cols : c.o0 + static_cast<int64_t>(rng() % (c.pr.cols - c.o0 + 1));
  c.prep = static_cast<MathFidelity>(1 + rng() % 4);
  c.p0 = 0;
  c.p1 = NumPhases(c.prep);
  if (rng() % 4 == 0) {  // a sub-range of phases
    c.p0 = static_cast<int>(rng() % c.p1);
    c.p1 = c.p0 + 1 + static_cast<int>(rng() % (c.p1 - c.p0));
  }
  c.fp32 = rng() % 2;
  c.arch = rng() % 2 ? Arch::kWormholeB0 : Arch::kBlackhole;
  c.dst.resize(static_cast<size_t>(c.o1 - c.o0));
  for (auto& d : c.dst) d = RandDst(rng, c.fp32);
  return c;
}

// Randomised differential test: scalar path, AVX2 path and the oracle agree bit for bit over all
// fidelities and phase ranges, both Dst formats, both archs, both Src formats, exponent edges,
// zero halves / columns, every Dst class, partial column and K ranges.
TEST(MvmulKernelDifferential, RandomCasesMatchModel) {
  std::mt19937 rng(20261201);
  size_t compared = 0;
  for (int it = 0; it < 1500; ++it) {
    const Case c = RandCase(rng);
    const auto want = Oracle(c.pr, c.k0, c.k1, c.o0, c.o1, c.p0, c.p1, c.fp32, c.arch, c.dst);
    for (MvmulKernelPath path : Paths()) {
      UsePath use(path);
      const auto got = Kernel(c.pr, c.prep, c.k0, c.k1, c.o0, c.o1, c.p0, c.p1, c.fp32, c.arch, c.dst);
      for (size_t i = 0; i < want.size(); ++i) {
        ++compared;
        ASSERT_EQ(Hex(got[i]), Hex(want[i]))
            << MvmulKernelPathName(path) << " case " << it << " column " << (c.o0 + static_cast<int64_t>(i))
            << " cols=" << c.pr.cols << " K=" << c.pr.K << " k=[" << c.k0 << "," << c.k1 << ") phases=[" << c.p0 << ","
            << c.p1 << ") fp32_dst=" << c.fp32 << " arch=" << ArchName(c.arch) << " dst_in=" << Hex(c.dst[i]);
      }
    }
  }
  EXPECT_GT(compared, 20000u);
}

// The Wormhole −1 quirk (§5.5 step 5, §12.5): columns whose single product is cancelled by a Dst one
// ulp larger in magnitude, so that the total is −1. Wormhole then gives −2^(X+4−127), Blackhole a
// 1-ulp value; both paths must follow the model in every such column.
TEST(MvmulKernelDifferential, WormholeQuirkColumns) {
  std::mt19937 rng(5);
  size_t quirk_hits = 0;
  for (int it = 0; it < 200; ++it) {
    Problem pr;
    pr.cols = 16;
    pr.K = 32;
    pr.a.assign(16 * 32, 0);
    pr.b.assign(32, 0);
    const int lane = static_cast<int>(rng() % 16);
    pr.b[static_cast<size_t>(lane)] = (rng() & 0x80000000u) | ((120u + rng() % 16) << 23) | (rng() & 0x7FFFFFu);
    for (int c = 0; c < 16; ++c)
      pr.a[static_cast<size_t>(c * 32 + lane)] = (rng() & 0x80000000u) | ((120u + rng() % 16) << 23) | (rng() & 0x7FFFFFu);
    // Dst = −(the LoFi result from 0), one ulp larger in magnitude.
    std::vector<uint32_t> dst = Oracle(pr, 0, 32, 0, 16, 0, 1, true, Arch::kBlackhole, std::vector<uint32_t>(16, 0));
    for (uint32_t& d : dst) d = (d ^ 0x80000000u) + 1;
    const auto wh = Oracle(pr, 0, 32, 0, 16, 0, 1, true, Arch::kWormholeB0, dst);
    const auto bh = Oracle(pr, 0, 32, 0, 16, 0, 1, true, Arch::kBlackhole, dst);
    for (int c = 0; c < 16; ++c) quirk_hits += wh[static_cast<size_t>(c)] != bh[static_cast<size_t>(c)];
    for (MvmulKernelPath path : Paths()) {
      UsePath use(path);
      EXPECT_EQ(Kernel(pr, MathFidelity::kLoFi, 0, 32, 0, 16, 0, 1, true, Arch::kWormholeB0, dst), wh)
          << MvmulKernelPathName(path) << " case " << it;
      EXPECT_EQ(Kernel(pr, MathFidelity::kLoFi, 0, 32, 0, 16, 0, 1, true, Arch::kBlackhole, dst), bh)
          << MvmulKernelPathName(path) << " case " << it;
    }
  }
  EXPECT_GT(quirk_hits, 500u) << "the construction must reach the quirk in most columns";
}

// Zero-MVMUL skipping (§5.5 on all-zero lanes): over every Dst class, both Dst formats, both archs,
// every fidelity, skipped MVMULs give what the unskipped model gives — −0 and denormals become +0,
// exponent-255 patterns ±Inf, +0 and normals stay — whether the zeros come from the activations
// (shared by all columns) or from a block of all-zero weight columns, before or after a computed MVMUL.
TEST(MvmulKernelSkip, EveryDstClassMatchesModel) {
  const uint32_t classes[] = {0x00000000u, 0x80000000u, 0x00000001u, 0x007FFFFFu, 0x80400000u, 0x00800000u,
                              0x3F800000u, 0xC0490000u, 0x7F7F0000u, 0xFF7FFFFFu, 0x7F800000u, 0xFF800000u,
                              0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0xFF80FFFFu, 0x3F801234u};
  std::mt19937 rng(11);
  size_t skip_checks = 0;
  for (MvmulKernelPath path : Paths()) {
    UsePath use(path);
    for (bool fp32 : {true, false}) {
      for (Arch arch : {Arch::kWormholeB0, Arch::kBlackhole}) {
        for (const auto& [fname, fid] : kFids) {
          // Layouts over K = 96 (3 tiles) and 12 columns: 0 = activations zero everywhere; 1 = weights of
          // columns 0..7 zero, 8..11 not; 2 = tile 0 zero, tiles 1–2 not; 3 = tile 2 zero only;
          // 4 = the second half of every tile zero.
          for (int layout = 0; layout < 5; ++layout) {
            Problem pr;
            pr.cols = 12;
            pr.K = 96;
            pr.a.resize(12 * 96);
            pr.b.resize(96);
            for (auto& v : pr.a) v = RandOperand(rng, 0.0);
            for (auto& v : pr.b) v = RandOperand(rng, 0.0);
            if (layout == 0) std::fill(pr.b.begin(), pr.b.end(), 0u);
            if (layout == 1) std::fill(pr.a.begin(), pr.a.begin() + 8 * 96, 0x80000000u);
            if (layout == 2) std::fill(pr.b.begin(), pr.b.begin() + 32, 0x00000001u);
            if (layout == 3) std::fill(pr.b.begin() + 64, pr.b.end(), 0u);
            if (layout == 4)
              for (int64_t h = 16; h < 96; h += 32) std::fill_n(pr.b.begin() + h, 16, 0u);
            for (uint32_t cls : classes) {
              const uint32_t d_in = fp32 ? cls : (cls & 0xFFFF0000u);
              const std::vector<uint32_t> dst(12, d_in);
              const auto want = Oracle(pr, 0, 96, 0, 12, 0, NumPhases(fid), fp32, arch, dst);
              const auto got = Kernel(pr, fid, 0, 96, 0, 12, 0, NumPhases(fid), fp32, arch, dst);
              for (int c = 0; c < 12; ++c)
                ASSERT_EQ(Hex(got[static_cast<size_t>(c)]), Hex(want[static_cast<size_t>(c)]))
                    << MvmulKernelPathName(path) << " layout " << layout << " column " << c << " " << fname
                    << " fp32_dst=" << fp32 << " arch=" << ArchName(arch) << " dst_in=" << Hex(d_in);
              // Where every MVMUL is zero, the result is the §5.5 mapping itself.
              const uint32_t e = (d_in >> 23) & 0xFFu;
              const uint32_t mapped = e == 0 ? 0u : e == 255 ? ((d_in & 0x80000000u) | 0x7F800000u) : d_in;
              const int zero_cols = layout == 0 ? 12 : layout == 1 ? 8 : 0;
              for (int c = 0; c < zero_cols; ++c, ++skip_checks)
                ASSERT_EQ(Hex(got[static_cast<size_t>(c)]), Hex(mapped)) << MvmulKernelPathName(path) << " layout " << layout;
            }
          }
        }
      }
    }
  }
  EXPECT_GT(skip_checks, 0u);
}

// Live-lane visiting (mvmul_kernel.h): lanes zero in every column of a block (a Cin = 3 conv pads
// each tap's 8 channels with 5 zero lanes) or zero in SrcB (post-ReLU zeros), in every combination
// within a group, including groups whose live SrcA and SrcB lanes do not meet, against the model
// over every fidelity, both Dst formats, both archs and random Dst classes.
TEST(MvmulKernelDifferential, ZeroLanePatternsMatchModel) {
  std::mt19937 rng(77);
  size_t compared = 0;
  for (int it = 0; it < 400; ++it) {
    Problem pr;
    pr.cols = 1 + static_cast<int64_t>(rng() % 40);
    pr.K = 32 * (1 + static_cast<int64_t>(rng() % 4));
    pr.a.resize(static_cast<size_t>(pr.cols * pr.K));
    pr.b.resize(static_cast<size_t>(pr.K));
    for (auto& v : pr.a) v = RandOperand(rng, 0.05);
    for (auto& v : pr.b) v = RandOperand(rng, 0.05);
    const bool channel_pad = it % 2 == 0;
    for (int64_t q = 0; q < pr.K / 8; ++q) {
      // SrcA: lanes >= 3 zero in all columns (channel padding), or a random lane mask per group;
      // SrcB: a random lane mask per group (with zeros of every encoding).
      const unsigned amask = channel_pad ? 0x07u : rng() & 0xFFu, bmask = rng() % 3 == 0 ? 0xFFu : rng() & 0xFFu;
      for (int l = 0; l < 8; ++l) {
        const int64_t k = q * 8 + l;
        if (!((amask >> l) & 1u))
          for (int64_t o = 0; o < pr.cols; ++o) pr.a[static_cast<size_t>(o * pr.K + k)] = (rng() & 1u) ? 0x80000000u : 0u;
        if (!((bmask >> l) & 1u)) pr.b[static_cast<size_t>(k)] = rng() % 2 ? 0u : 0x00000001u;
      }
    }
    const MathFidelity fid = static_cast<MathFidelity>(1 + rng() % 4);
    const bool fp32 = rng() % 2;
    const Arch arch = rng() % 2 ? Arch::kWormholeB0 : Arch::kBlackhole;
    std::vector<uint32_t> dst(static_cast<size_t>(pr.cols));
    for (auto& d : dst) d = RandDst(rng, fp32);
    ASSERT_NO_FATAL_FAILURE(ExpectPathsMatchModel(pr, fid, fp32, arch, dst, "case " + std::to_string(it), &compared));
  }
  EXPECT_GT(compared, 5000u);
}

// Group sums at their extremes, where a bf16 Dst's int16 combine (mvmul_kernel_avx512fp16.cc) leaves
// int16: every product at its largest slices (a = ±1.9375·2^e, b = ±1.984375·2^e: |S| = 8 · 31 · 127
// per group at LoFi) with equal signs in both groups of an MVMUL (totals near ±2^16, which saturate),
// opposite signs (totals near 0, and exactly 0), the second group's exponents lowered by 12..18 and
// the first group at half its lanes (so that the total stays in int16 while the lowered group is
// aligned by about 12..18; the rounding edges at those alignments are the next test's), and Dst
// starting from large, small, zero and infinite values. Every path against the model, both Dst
// formats and archs.
TEST(MvmulKernelDifferential, ExtremeGroupSumsMatchModel) {
  std::mt19937 rng(20261203);
  const uint32_t dsts[] = {0x00000000u, 0x80000000u, 0x47800000u, 0xC7FF0000u, 0x3F800000u, 0x4B7F0000u,
                           0xCB000000u, 0x7F800000u, 0x00010000u, 0x7F7F0000u};
  size_t compared = 0;
  for (int it = 0; it < 60; ++it) {
    Problem pr;
    pr.cols = 40;
    pr.K = 64;
    pr.a.resize(static_cast<size_t>(pr.cols * pr.K));
    pr.b.resize(static_cast<size_t>(pr.K));
    const uint32_t e = 120 + rng() % 16;  // the common exponent field
    for (int64_t k = 0; k < pr.K; ++k) pr.b[static_cast<size_t>(k)] = (e << 23) | 0x7E0000u | (rng() % 8 == 0 ? 0x80000000u : 0);
    for (int64_t o = 0; o < pr.cols; ++o) {
      const int mode = static_cast<int>(rng() % 4);  // 0 equal signs, 1 opposite signs, 2 lowered second group, 3 mixed
      const uint32_t drop = 12 + rng() % 7;
      for (int64_t k = 0; k < pr.K; ++k) {
        const bool second = (k % 16) >= 8;
        uint32_t ea = e, sign = 0;
        if (mode == 1 && second) sign = 0x80000000u;
        if (mode == 2 && second) ea = e - drop;
        if (mode == 2 && !second && k % 8 >= 4) {
          pr.a[static_cast<size_t>(o * pr.K + k)] = 0;
          continue;
        }
        if (mode == 3) sign = rng() % 2 ? 0x80000000u : 0u;
        // Signs against b's so that a column's products mostly share one sign.
        sign ^= pr.b[static_cast<size_t>(k)] & 0x80000000u;
        pr.a[static_cast<size_t>(o * pr.K + k)] = sign | (ea << 23) | 0x780000u;
      }
    }
    std::vector<uint32_t> dst(static_cast<size_t>(pr.cols));
    for (auto& d : dst) d = dsts[rng() % std::size(dsts)];
    const MathFidelity fid = kFids[static_cast<size_t>(it % 4)].second;
    for (bool fp32 : {false, true}) {
      for (Arch arch : {Arch::kWormholeB0, Arch::kBlackhole}) {
        ASSERT_NO_FATAL_FAILURE(
            ExpectPathsMatchModel(pr, fid, fp32, arch, dst, "case " + std::to_string(it), &compared));
      }
    }
  }
  EXPECT_EQ(compared, 60u * 4 * 40 * Paths().size());
}

// A group term aligned by d = 13..16 whose rounding sits at its edge: §5.5 step 2's tie rule (to +inf)
// and step 3's bf16 pre-rounding (half up in units of 2^13) compose to floor(S / 2^d + 1/2 + 2^−14),
// which differs from floor(S / 2^d + 1/2) only for S ≡ 2^13 − 1 (mod 2^14) at d = 14 and S ≡ 2^14 − 2,
// 2^14 − 1 (mod 2^15) at d = 15. One MVMUL (LoFi): group 0 sums exactly S (lanes of equal exponents,
// products P = slice_a · slice_b chosen to add up to S), group 1 holds two lanes d binades higher whose
// products differ by 80, so the total 80 + T0 needs no rounding and shows T0 itself.
TEST(MvmulKernelDifferential, GroupTermRoundingAtLargeAlignments) {
  std::map<int, std::pair<int, int>> prod;  // P → (slice_a − 16, slice_b − 64)
  for (int ma = 0; ma < 16; ++ma)
    for (int mb = 0; mb < 64; ++mb) prod.emplace((16 + ma) * (64 + mb), std::make_pair(ma, mb));
  // Operands with slices (16 + ma, 64 + mb): bf16 significand bits 1.ma(4) and 1.mb(6).
  auto a_op = [](int ma, uint32_t exp, bool neg) { return (neg ? 0x80000000u : 0u) | (exp << 23) | (uint32_t(ma) << 19); };
  auto b_op = [](int mb, uint32_t exp) { return (exp << 23) | (uint32_t(mb) << 17); };
  size_t compared = 0;
  for (int target : {8191, -8193, 24575, -24577, 16382, 16383, -16385, -16386, 8190, 16381}) {
    // Lanes of group 0: m products of 31 · 127 and two found by search.
    std::vector<std::pair<int, int>> lanes;
    const int t = target < 0 ? -target : target;
    for (int m = 0; m <= 6 && lanes.empty(); ++m) {
      const int r = t - m * 31 * 127;
      for (auto it = prod.begin(); it != prod.end() && lanes.empty(); ++it) {
        auto jt = prod.find(r - it->first);
        if (jt == prod.end()) continue;
        lanes.assign(static_cast<size_t>(m), {15, 63});
        lanes.push_back(it->second);
        lanes.push_back(jt->second);
      }
    }
    ASSERT_FALSE(lanes.empty()) << target;
    ASSERT_LE(lanes.size(), 8u);
    for (int d : {13, 14, 15, 16}) {
      Problem pr;
      pr.cols = 3;
      pr.K = 32;
      pr.a.assign(96, 0);
      pr.b.assign(32, 0);
      const uint32_t e = 110;
      for (size_t j = 0; j < lanes.size(); ++j) {
        pr.b[j] = b_op(lanes[j].second, e);
        for (int c = 0; c < 3; ++c) pr.a[static_cast<size_t>(c * 32) + j] = a_op(lanes[j].first, e, target < 0);
      }
      pr.b[8] = b_op(5, e);
      pr.b[9] = b_op(0, e);
      for (int c = 0; c < 3; ++c) {
        pr.a[static_cast<size_t>(c * 32 + 8)] = a_op(0, e + static_cast<uint32_t>(d), false);
        pr.a[static_cast<size_t>(c * 32 + 9)] = a_op(0, e + static_cast<uint32_t>(d), true);
      }
      for (bool fp32 : {false, true}) {
        ASSERT_NO_FATAL_FAILURE(ExpectPathsMatchModel(pr, MathFidelity::kLoFi, fp32, Arch::kBlackhole,
                                                      std::vector<uint32_t>(3, 0u),
                                                      "S " + std::to_string(target) + " d " + std::to_string(d),
                                                      &compared));
      }
    }
  }
  EXPECT_EQ(compared, 10u * 4 * 2 * 3 * Paths().size());
}

// Results do not depend on how columns and rows are split between calls and threads.
TEST(MvmulKernelThreads, SplitOverThreadsIsBitIdentical) {
  std::mt19937 rng(3);
  const int64_t cols = 64, K = 576, rows = 6;
  Problem pr;
  pr.cols = cols;
  pr.K = K;
  pr.a.resize(static_cast<size_t>(cols * K));
  for (auto& v : pr.a) v = RandOperand(rng, 0.02);
  std::vector<std::vector<uint32_t>> b(rows, std::vector<uint32_t>(K));
  for (auto& r : b)
    for (auto& v : r) v = RandOperand(rng, 0.4);
  auto a = PrepareSrcA(pr.a.data(), cols, K, MathFidelity::kHiFi4, SrcFormat::kBf16);
  ASSERT_TRUE(a.ok());
  for (MvmulKernelPath path : Paths()) {
    UsePath use(path);
    // One thread: whole rows, three K blocks of 192.
    std::vector<uint32_t> one(static_cast<size_t>(rows * cols), 0), two(one.size(), 0);
    PreparedSrcB pb;
    for (int64_t m = 0; m < rows; ++m) {
      ASSERT_TRUE(PrepareSrcBRow(b[m].data(), K, MathFidelity::kHiFi4, SrcFormat::kBf16, &pb).ok());
      for (int64_t k0 = 0; k0 < K; k0 += 192)
        ASSERT_TRUE(RunKBlock(*a, pb, k0, k0 + 192, 0, cols, MathFidelity::kHiFi4, true, Arch::kWormholeB0,
                              &one[static_cast<size_t>(m * cols)]).ok());
    }
    // Two threads, each a share of rows and of unaligned column ranges.
    auto work = [&](int t) {
      PreparedSrcB tb;
      for (int64_t m = t; m < rows; m += 2) {
        (void)PrepareSrcBRow(b[m].data(), K, MathFidelity::kHiFi4, SrcFormat::kBf16, &tb);
        for (int64_t k0 = 0; k0 < K; k0 += 192)
          for (int64_t c0 : {int64_t{0}, int64_t{13}, int64_t{40}}) {
            const int64_t c1 = c0 == 0 ? 13 : c0 == 13 ? 40 : cols;
            (void)RunKBlock(*a, tb, k0, k0 + 192, c0, c1, MathFidelity::kHiFi4, true, Arch::kWormholeB0,
                            &two[static_cast<size_t>(m * cols + c0)]);
          }
      }
    };
    std::thread t1(work, 0), t2(work, 1);
    t1.join();
    t2.join();
    EXPECT_EQ(one, two) << MvmulKernelPathName(path);
  }
}

// A row read through group pointers (ShapeSrcBRow + PrepareSrcBGroups, as the conv engine's SrcB
// image does: groups prepared in another order, elsewhere, some pointing at ZeroSrcBGroup) gives
// the model's results on every path, as PrepareSrcBRow's own storage does. The groups are prepared
// in odd counts, so the AVX-512 preparation's single-group step runs; its words and masks equal
// the scalar preparation's (tf32 and bf16 operands, every fidelity's variants).
TEST(MvmulKernelSrcBGroups, PointersIntoAnImageMatchModel) {
  std::mt19937 rng(707);
  size_t compared = 0;
  for (auto [fname, fid] : kFids) {
    for (SrcFormat bf : {SrcFormat::kBf16, SrcFormat::kTf32}) {
      Problem pr;
      pr.cols = 40;
      pr.K = 96;
      pr.b_fmt = bf;
      pr.a.resize(static_cast<size_t>(pr.cols * pr.K));
      for (auto& v : pr.a) v = RandOperand(rng, 0.1);
      pr.b.resize(static_cast<size_t>(pr.K));
      for (auto& v : pr.b) v = RandOperand(rng, 0.2);
      for (int64_t k = 32; k < 40; ++k) pr.b[static_cast<size_t>(k)] = 0;  // group 4: read as the zero group
      // The image: the row's groups in reverse order after one unrelated group, prepared 3 + 9 + 1
      // groups at a time (odd counts), on the active path and on the scalar one.
      const int64_t G = pr.K / 8, gw = SrcBGroupWords(SrcBVariants(fid));
      std::vector<uint32_t> src(static_cast<size_t>(8 * (G + 1)));
      for (int64_t q = 0; q < G; ++q)
        std::copy_n(&pr.b[static_cast<size_t>(8 * q)], 8, &src[static_cast<size_t>(8 * (G - q))]);
      for (int l = 0; l < 8; ++l) src[static_cast<size_t>(l)] = RandOperand(rng, 0.0);
      std::vector<uint32_t> words(static_cast<size_t>((G + 1) * gw)), scalar_words(words.size());
      std::vector<uint8_t> nz(static_cast<size_t>(G + 1)), scalar_nz(nz.size());
      for (auto [g0, n] : {std::pair<int64_t, int64_t>{0, 3}, {3, 9}, {12, 1}})
        PrepareSrcBGroups(&src[static_cast<size_t>(8 * g0)], n, fid, bf, &words[static_cast<size_t>(g0 * gw)],
                          &nz[static_cast<size_t>(g0)]);
      {
        UsePath use(MvmulKernelPath::kScalar);
        PrepareSrcBGroups(src.data(), G + 1, fid, bf, scalar_words.data(), scalar_nz.data());
      }
      ASSERT_EQ(words, scalar_words) << fname;
      ASSERT_EQ(nz, scalar_nz) << fname;
      ASSERT_EQ(nz[static_cast<size_t>(G - 4)], 0) << "the zero group's mask";
      PreparedSrcB b;
      ASSERT_TRUE(ShapeSrcBRow(pr.K, fid, &b).ok());
      for (int64_t q = 0; q < G; ++q) {
        b.group[static_cast<size_t>(q)] = q == 4 ? ZeroSrcBGroup() : &words[static_cast<size_t>((G - q) * gw)];
        b.nz_mask[static_cast<size_t>(q)] = nz[static_cast<size_t>(G - q)];
      }
      const int phases = NumPhases(fid);
      const std::vector<uint32_t> dst(static_cast<size_t>(pr.cols), 0u);
      const auto want = Oracle(pr, 0, pr.K, 0, pr.cols, 0, phases, false, Arch::kWormholeB0, dst);
      for (MvmulKernelPath path : Paths()) {
        UsePath use(path);
        auto got = dst;
        ASSERT_TRUE(RunKBlock(*PrepareSrcA(pr.a.data(), pr.cols, pr.K, fid, pr.a_fmt), b, 0, pr.K, 0, pr.cols, fid,
                              false, Arch::kWormholeB0, got.data())
                        .ok());
        for (size_t i = 0; i < want.size(); ++i, ++compared)
          ASSERT_EQ(Hex(got[i]), Hex(want[i])) << MvmulKernelPathName(path) << " " << fname << " column " << i;
      }
    }
  }
  EXPECT_EQ(compared, Paths().size() * 4 * 2 * 40);
}

// ElwaddRow (the conv's bias add over a row) against the scalar model numerics::Elwadd on every
// path: operand exponent edges (zeros, denormals, exponents 1, 2, 254, 255), equal magnitudes of
// both signs (cancellation to 0), both operand formats, both Dst formats, both archs, row lengths
// that end inside a 16-value step.
TEST(ElwaddRow, MatchesModelOnEveryPath) {
  std::mt19937 rng(606);
  size_t compared = 0;
  for (int it = 0; it < 400; ++it) {
    const int64_t n = 1 + static_cast<int64_t>(rng() % 40);
    std::vector<uint32_t> a(static_cast<size_t>(n)), b(a.size());
    for (size_t i = 0; i < a.size(); ++i) {
      a[i] = RandOperand(rng, 0.1);
      b[i] = RandOperand(rng, 0.1);
      if (rng() % 8 == 0) b[i] = a[i] ^ 0x80000000u;  // x + (−x)
      if (rng() % 8 == 0) b[i] = (a[i] & 0xFF800000u) | (rng() & 0x7FFFFFu);  // same exponent
    }
    FpuConfig cfg;
    cfg.fp32_dst = rng() % 2;
    cfg.arch = rng() % 2 ? Arch::kWormholeB0 : Arch::kBlackhole;
    cfg.a_fmt = rng() % 2 ? SrcFormat::kTf32 : SrcFormat::kBf16;
    cfg.b_fmt = rng() % 2 ? SrcFormat::kTf32 : SrcFormat::kBf16;
    for (MvmulKernelPath path : Paths()) {
      UsePath use(path);
      std::vector<uint32_t> got(a.size(), 0xDEADBEEFu);
      ElwaddRow(a.data(), b.data(), n, cfg, got.data());
      for (size_t i = 0; i < a.size(); ++i, ++compared)
        ASSERT_EQ(Hex(got[i]), Hex(Elwadd(a[i], b[i], 0, false, cfg)))
            << MvmulKernelPathName(path) << " case " << it << " i " << i << " a " << Hex(a[i]) << " b " << Hex(b[i])
            << " fp32_dst=" << cfg.fp32_dst << " arch=" << ArchName(cfg.arch);
    }
  }
  EXPECT_GT(compared, 400u * 2);
}

// AddIntoDstRow (the fast level's rounding of a block's fp32 sums into Dst): hand-checked values
// (a bf16 Dst rounds half away from zero to 8 significant bits and carries into the exponent; NaN
// becomes ±Inf; results with exponent 0 become +0; an fp32 Dst keeps the fp32 sum), then every path
// against the scalar one on random Dst patterns and sums of every class, row lengths ending inside
// a 16-value step.
TEST(AddIntoDstRow, RoundsLikeTheFastLevelOnEveryPath) {
  struct Hand {
    uint32_t dst;
    float s;
    bool fp32;
    uint32_t want;
  };
  const Hand hand[] = {
      {0x3F800000u, 0.0f, false, 0x3F800000u},                       // 1.0 stays
      {0x3F800000u, BitsFloat(0x3B800000u), false, 0x3F810000u},     // 1 + 2^-8: half of a bf16 ulp, up
      {0xBF800000u, -BitsFloat(0x3B800000u), false, 0xBF810000u},    // −(1 + 2^-8): away from zero
      {0x3F800000u, BitsFloat(0x3B000000u), false, 0x3F800000u},     // 1 + 2^-9: below half, down
      {0x3FFF8000u, 0.0f, false, 0x40000000u},                       // rounding carries into the exponent
      {0x00000000u, BitsFloat(0x7FC00000u), false, 0x7F800000u},     // NaN → +Inf
      {0x00000000u, BitsFloat(0xFFC00001u), true, 0xFF800000u},      // −NaN → −Inf
      {0x00000000u, BitsFloat(0x00400000u), true, 0x00000000u},      // denormal sum → +0
      {0x80000000u, -0.0f, true, 0x00000000u},                       // −0 → +0
      {0x3F800000u, BitsFloat(0x34000000u), true, 0x3F800001u},      // fp32 Dst: 1 + 2^-23 kept
  };
  for (MvmulKernelPath path : Paths()) {
    UsePath use(path);
    for (const Hand& h : hand) {
      uint32_t d = h.dst;
      AddIntoDstRow(&h.s, 1, h.fp32, &d);
      EXPECT_EQ(Hex(d), Hex(h.want)) << MvmulKernelPathName(path) << " dst " << Hex(h.dst) << " s " << Hex(FloatBits(h.s));
    }
  }
  std::mt19937 rng(707);
  size_t compared = 0;
  for (int it = 0; it < 300; ++it) {
    const int64_t n = 1 + static_cast<int64_t>(rng() % 40);
    const bool fp32 = rng() % 2;
    std::vector<uint32_t> dst(static_cast<size_t>(n));
    std::vector<float> sum(dst.size());
    for (size_t i = 0; i < dst.size(); ++i) {
      dst[i] = RandDst(rng, fp32);
      sum[i] = BitsFloat(rng() % 4 == 0 ? RandOperand(rng, 0.2) : (dst[i] ^ (rng() % 2 ? 0x80000000u : 0u)));
    }
    std::vector<uint32_t> want = dst;
    {
      UsePath use(MvmulKernelPath::kScalar);
      AddIntoDstRow(sum.data(), n, fp32, want.data());
    }
    for (MvmulKernelPath path : Paths()) {
      UsePath use(path);
      std::vector<uint32_t> got = dst;
      AddIntoDstRow(sum.data(), n, fp32, got.data());
      for (size_t i = 0; i < got.size(); ++i, ++compared)
        ASSERT_EQ(Hex(got[i]), Hex(want[i])) << MvmulKernelPathName(path) << " case " << it << " i " << i;
    }
  }
  EXPECT_GT(compared, 300u);
}

TEST(MvmulKernelArgs, RejectsBadShapesAndRanges) {
  std::vector<uint32_t> w(2 * 64, 0x3F800000u), x(64, 0x3F800000u), dst(2, 0);
  EXPECT_EQ(PrepareSrcA(w.data(), 2, 48, MathFidelity::kLoFi, SrcFormat::kBf16).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(PrepareSrcA(w.data(), 0, 64, MathFidelity::kLoFi, SrcFormat::kBf16).status().code(), StatusCode::kInvalidArgument);
  PreparedSrcB b;
  EXPECT_EQ(PrepareSrcBRow(x.data(), 40, MathFidelity::kLoFi, SrcFormat::kBf16, &b).code(), StatusCode::kInvalidArgument);
  auto a = PrepareSrcA(w.data(), 2, 64, MathFidelity::kHiFi2, SrcFormat::kBf16);
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(PrepareSrcBRow(x.data(), 64, MathFidelity::kHiFi2, SrcFormat::kBf16, &b).ok());
  EXPECT_EQ(a->bytes(), size_t{64 * 3 * 64 + 64 / 8});  // one 32-column block, 3 rows of 64 bytes per k
  const auto run = [&](int64_t k0, int64_t k1, int64_t o0, int64_t o1, MathFidelity f) {
    return RunKBlock(*a, b, k0, k1, o0, o1, f, true, Arch::kBlackhole, dst.data()).code();
  };
  EXPECT_EQ(run(0, 64, 0, 2, MathFidelity::kHiFi2), StatusCode::kOk);
  EXPECT_EQ(dst[0], 0x42800000u);  // 64 products of 1·1 (exact at any fidelity's first two phases)
  EXPECT_EQ(run(16, 64, 0, 2, MathFidelity::kLoFi), StatusCode::kInvalidArgument);
  EXPECT_EQ(run(0, 96, 0, 2, MathFidelity::kLoFi), StatusCode::kInvalidArgument);
  EXPECT_EQ(run(0, 64, 1, 3, MathFidelity::kLoFi), StatusCode::kInvalidArgument);
  EXPECT_EQ(run(0, 64, 0, 2, MathFidelity::kHiFi3), StatusCode::kInvalidArgument);  // prepared for HiFi2
  PreparedSrcB b32;
  ASSERT_TRUE(PrepareSrcBRow(x.data(), 32, MathFidelity::kHiFi2, SrcFormat::kBf16, &b32).ok());
  EXPECT_EQ(RunKBlock(*a, b32, 0, 32, 0, 2, MathFidelity::kLoFi, true, Arch::kBlackhole, dst.data()).code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kiln::numerics
