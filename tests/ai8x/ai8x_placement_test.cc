// Placement is part of correctness: replays Kiln's placement (processor maps, offsets, write gaps
// as written in the YAML) word by word against the izer's data-memory model, for every ai8x export
// in tests/data/ai8x/models, so that a wrong offset fails here and not on a chip.
//
// The izer's rules reimplemented here (ai8x-synthesis):
// * Where a layer writes (izer/unload.py verify_unload): for output pixel `doffs` and pass
//   `expand`, the word out_offset/4 + (doffs * out_expand * out_size + expand * out_size) *
//   (write_gap + 1) (+0..out_size-1, out_size = output_width / 8) in every instance its output
//   processors touch. The input loader (izer/load.py) writes HWC pixel j, pass p at in_offset/4 +
//   j * in_expand + p; CHW data holds 4 pixels per word.
// * The izer's own overwrite check, on unless --overlap-data (unload.py check_overwrite,
//   max7800x.py L3243-3361): a layer may not write a word of `in_map` (the previous layer's output,
//   plus every `output: true` layer so far; the input loader's data for layer 0; with the next
//   layer streaming, everything so far) nor write one word twice; streaming layers are not checked.
// * Beyond the izer (it does not track skip connections): every word a layer reads still holds
//   what its producer wrote, and a layer that overwrites its own input (--overlap-data) does so
//   only in input pixels that neither the output pixel (r, c) being written nor a later one reads:
//   pixels before (pool_stride * max(0, r - pad), pool_stride * max(0, c - pad)) in row-major
//   order. Every word lies inside its instance.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include "compiler/ai8x/compile.h"
#include "compiler/ai8x/resources.h"
#include "compiler/onnx/loader.h"

namespace kiln::ai8x {
namespace {

const std::string kData = std::string(KILN_TEST_DATA) + "/ai8x";

struct Case {
  std::string file, device, arch, dataset;
  bool must_compile = true;
};

std::vector<Case> Cases() {
  std::vector<Case> cases;
  YAML::Node m = YAML::LoadFile(kData + "/models/manifest.json");
  for (const auto& e : m) {
    // the qat form: it carries the weight bit widths (the other forms need --set overrides, which
    // ai8x_models_test supplies; their placement is the same)
    if (!e["file"] || e["file"].IsNull() || e["form"].as<std::string>() != "qat") continue;
    cases.push_back({e["file"].as<std::string>(), e["device"].as<std::string>(), e["factory"].as<std::string>(),
                     e["dataset"].as<std::string>(), true});
  }
  // The ai8x-training factories of factories.json that fit the chip (`expect` "ok..."; the UNets
  // medium and large fit only with in-place layers, --overlap-data). Those beyond the chip are
  // ai8x_models_test's Ai8xFactoryLimits.
  for (const auto& e : YAML::LoadFile(kData + "/models/factories.json")) {
    if (e["expect"].as<std::string>().rfind("ok", 0) != 0) continue;
    cases.push_back({e["file"].as<std::string>(), e["device"].as<std::string>(), e["factory"].as<std::string>(),
                     e["dataset"].as<std::string>(), true});
  }
  return cases;
}

std::string ReadFile(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// "(16, 32, 32)" / "(128, 128)" -> c, h, w.
Shape3 ParseShape(const std::string& s) {
  std::vector<int> v;
  std::string num;
  for (char ch : s) {
    if (std::isdigit(static_cast<unsigned char>(ch))) {
      num += ch;
    } else if (!num.empty()) {
      v.push_back(std::stoi(num));
      num.clear();
    }
  }
  Shape3 r;
  if (v.size() >= 1) r.c = v[0];
  if (v.size() >= 2) r.h = v[1];
  if (v.size() >= 3) r.w = v[2];
  return r;
}

constexpr int kEmpty = -1000;

struct Word {
  int owner = kEmpty;  // layer, -1 input loader
  int64_t pixel = 0;   // the owner's output pixel (row-major; input pixel for the loader)
};

class Replay {
 public:
  Replay(const Ai8xCompileResult& r, int64_t instance_bytes)
      : r_(r), words_(instance_bytes / 4), layers_(YAML::Load(r.yaml)["layers"]) {
    for (const IzerFlag& f : r.izer_flags) overlap_ok_ |= f.flag == "--overlap-data";
    mem_.assign(16 * words_, Word{});
    n_ = layers_.size();
    for (size_t i = 0; i < n_; ++i) {
      const YAML::Node& y = layers_[i];
      std::vector<int> in;
      if (y["in_sequences"]) {
        for (const auto& s : y["in_sequences"]) in.push_back(s.as<int>());
      } else {
        in.push_back(static_cast<int>(i) - 1);
      }
      inputs_.push_back(in);
      gap_.push_back(y["write_gap"] ? y["write_gap"].as<int>() : 0);
      streaming_.push_back(y["streaming"] && y["streaming"].as<bool>());
      output_.push_back(y["output"] && y["output"].as<bool>());
      width_.push_back(y["output_width"] ? y["output_width"].as<int>() : 8);
      pad_.push_back(y["pad"] ? y["pad"].as<int>() : 0);
      int ps = 1;
      if (y["pool_stride"]) ps = y["pool_stride"].IsSequence() ? y["pool_stride"][0].as<int>() : y["pool_stride"].as<int>();
      pool_stride_.push_back((y["max_pool"] || y["avg_pool"]) ? ps : 1);
      std::string op = y["op"] ? y["op"].as<std::string>() : "";
      plain_.push_back(op == "conv2d" || op == "conv1d" || op == "passthrough" || op == "none");
    }
  }

  void Run() {
    ASSERT_EQ(n_, r_.layers.size());
    in_map_.assign(mem_.size(), false);
    LoadInput();
    std::vector<bool> all_outputs(mem_.size(), false);
    for (size_t i = 0; i < n_; ++i) {
      CheckReads(static_cast<int>(i));
      std::vector<bool> out_map(mem_.size(), false);
      Write(static_cast<int>(i), out_map);
      if (::testing::Test::HasFatalFailure() || failures_ > 20) return;
      // in_map for the next layer (max7800x.py L3343-3361)
      if (i + 1 < n_ && streaming_[i + 1]) {
        for (size_t w = 0; w < mem_.size(); ++w) in_map_[w] = in_map_[w] || out_map[w];
      } else {
        if (output_[i]) {
          for (size_t w = 0; w < mem_.size(); ++w) all_outputs[w] = all_outputs[w] || out_map[w];
        }
        for (size_t w = 0; w < mem_.size(); ++w) in_map_[w] = all_outputs[w] || out_map[w];
      }
    }
    CheckStreamBuffers();
  }

  // izer max7800x.py "overlaps streaming buffer": the last streaming layer's output, from
  // out_offset to out_offset + pixels * 4 * output_width / 8, and each streaming layer's buffer,
  // from its in_offset to in_offset + rollover * 4, are closed ranges (izer/utils.py overlap()
  // includes both ends) that must not meet on a shared data-memory instance. The rollover is the
  // izer's own; the buffer's start alone already fails an output that ends where it begins.
  void CheckStreamBuffers() {
    int last = -1;
    for (size_t i = 0; i < n_; ++i) last = streaming_[i] ? static_cast<int>(i) : last;
    if (last < 0) return;
    const Ai8xLayerSummary& o = r_.layers[last];
    int64_t a0 = o.out_offset, a1 = o.out_offset + ParseShape(o.out_shape).pixels() * 4 * width_[last] / 8;
    for (int pl = 0; pl <= last; ++pl) {
      const Ai8xLayerSummary& s = r_.layers[pl];
      if (!streaming_[pl] || !(InstanceMask(s.processors) & InstanceMask(o.output_processors))) continue;
      EXPECT_FALSE(s.in_offset >= a0 && s.in_offset <= a1)
          << "izer: the output of layer " << last << " (" << o.name << ", 0x" << std::hex << a0 << "-0x" << a1
          << ") meets the streaming buffer of layer " << std::dec << pl << " (" << s.name << ", from 0x" << std::hex
          << s.in_offset << ")";
    }
  }

 private:
  // Words of layer i's output, in the izer's write order, with the output pixel of each.
  template <typename F>
  void ForEachWrite(int i, F f) const {
    const Ai8xLayerSummary& l = r_.layers[i];
    Shape3 out = ParseShape(l.out_shape);
    int out_expand = ComputePasses(out.c).passes;
    int out_size = width_[i] / 8;
    uint32_t inst = InstanceMask(l.output_processors);
    for (int64_t doffs = 0; doffs < out.pixels(); ++doffs) {
      for (int e = 0; e < out_expand; ++e) {
        int64_t base = l.out_offset / 4 + (doffs * out_expand * out_size + int64_t{e} * out_size) * (gap_[i] + 1);
        for (int k = 0; k < 16; ++k) {
          if (!(inst >> k & 1)) continue;
          for (int b = 0; b < out_size; ++b) f(k, base + b, doffs);
        }
      }
    }
  }

  bool Addr(int inst, int64_t w, size_t& at) const {
    if (w < 0 || w >= words_) return false;
    at = static_cast<size_t>(inst) * words_ + static_cast<size_t>(w);
    return true;
  }

  void LoadInput() {
    if (streaming_[0]) return;  // FIFO input: no loader data in memory
    const Ai8xLayerSummary& l = r_.layers[0];
    Shape3 in = ParseShape(l.in_shape);
    uint32_t inst = InstanceMask(l.processors);
    bool chw = layers_[0]["data_format"] && layers_[0]["data_format"].as<std::string>() == "CHW";
    int64_t count = chw ? (in.pixels() + 3) / 4 : in.pixels() * ComputePasses(in.c).passes;
    int in_expand = chw ? 1 : ComputePasses(in.c).passes;
    for (int k = 0; k < 16; ++k) {
      if (!(inst >> k & 1)) continue;
      for (int64_t j = 0; j < count; ++j) {
        size_t at;
        ASSERT_TRUE(Addr(k, l.in_offset / 4 + j, at)) << "the input lies beyond data-memory instance " << k;
        mem_[at] = {-1, chw ? 0 : j / in_expand};
        in_map_[at] = true;
      }
    }
    input_loaded_ = true;
  }

  // Every word a producer of layer i wrote still holds its data.
  void CheckReads(int i) {
    if (streaming_[i]) return;
    for (int p : inputs_[i]) {
      if (p < 0) {
        if (!input_loaded_) continue;
        continue;  // the loader's words are checked through the overwrite rules below
      }
      if (streaming_[p] && p + 1 < static_cast<int>(n_) && streaming_[p + 1]) continue;  // rolling buffer
      int bad = 0;
      ForEachWrite(p, [&](int inst, int64_t w, int) {
        size_t at;
        if (!Addr(inst, w, at) || bad > 0) return;
        if (mem_[at].owner != p) {
          ++bad;
          ADD_FAILURE() << "layer " << i << " (" << r_.layers[i].name << ") reads layer " << p << "'s word " << w
                        << " of instance " << inst << ", overwritten by layer " << mem_[at].owner;
          ++failures_;
        }
      });
    }
  }

  // First input pixel that output pixel `k` of layer i, or a later one, reads.
  int64_t FirstPixelRead(int i, int64_t k) const {
    Shape3 in = ParseShape(r_.layers[i].in_shape), out = ParseShape(r_.layers[i].out_shape);
    int64_t r = k / out.w, c = k % out.w;
    int64_t row = pool_stride_[i] * std::max<int64_t>(0, r - pad_[i]);
    int64_t col = out.w == 1 ? 0 : pool_stride_[i] * std::max<int64_t>(0, c - pad_[i]);
    return row * in.w + col;
  }

  void Write(int i, std::vector<bool>& out_map) {
    int bad = 0;
    // a streaming layer followed by another writes a rolling buffer that wraps (izer rollover);
    // the last streaming layer writes its whole output, unchecked by the izer (streaming=True)
    if (streaming_[i] && i + 1 < static_cast<int>(n_) && streaming_[i + 1]) return;
    bool stream = streaming_[i];
    ForEachWrite(i, [&](int inst, int64_t w, int64_t pixel) {
      if (bad > 2) return;
      size_t at;
      if (!Addr(inst, w, at)) {
        ++bad;
        ++failures_;
        ADD_FAILURE() << "layer " << i << " (" << r_.layers[i].name << ") writes word " << w << " beyond instance "
                      << inst;
        return;
      }
      if (!overlap_ok_ && !stream && (in_map_[at] || out_map[at])) {
        ++bad;
        ++failures_;
        ADD_FAILURE() << "izer (no --overlap-data): layer " << i << " (" << r_.layers[i].name << ") overwrites word "
                      << w << " of instance " << inst << " written by " << (out_map[at] ? i : mem_[at].owner);
      }
      const Word& old = mem_[at];
      if (old.owner != kEmpty && old.owner != i) {
        bool mine = std::find(inputs_[i].begin(), inputs_[i].end(), old.owner) != inputs_[i].end();
        if (mine && LastReader(old.owner) == i) {
          // overwriting its own input: only pixels no later output pixel reads
          if (!plain_[i] || old.pixel >= FirstPixelRead(i, pixel)) {
            ++bad;
            ++failures_;
            ADD_FAILURE() << "layer " << i << " (" << r_.layers[i].name << ") output pixel " << pixel
                          << " overwrites input pixel " << old.pixel << " it still reads (word " << w << ", instance "
                          << inst << ")";
          }
        } else if (LastReader(old.owner) > i || Forever(old.owner)) {
          ++bad;
          ++failures_;
          ADD_FAILURE() << "layer " << i << " (" << r_.layers[i].name << ") overwrites word " << w << " of instance "
                        << inst << " holding layer " << old.owner << "'s data, read until layer "
                        << (Forever(old.owner) ? std::string("the end") : std::to_string(LastReader(old.owner)));
        }
      }
      mem_[at] = {i, pixel};
      out_map[at] = true;
    });
  }

  int LastReader(int p) const {
    int last = -1;
    for (size_t i = 0; i < n_; ++i) {
      for (int in : inputs_[i]) {
        if (in == p) last = static_cast<int>(i);
      }
    }
    return last;
  }
  bool Forever(int p) const { return p >= 0 && (output_[p] || p + 1 == static_cast<int>(n_)); }

  const Ai8xCompileResult& r_;
  const int64_t words_;
  YAML::Node layers_;
  size_t n_ = 0;
  bool overlap_ok_ = false;
  bool input_loaded_ = false;
  int failures_ = 0;
  std::vector<Word> mem_;
  std::vector<bool> in_map_;
  std::vector<std::vector<int>> inputs_;
  std::vector<int> gap_, width_, pad_, pool_stride_;
  std::vector<bool> streaming_, output_, plain_;
};

class Ai8xPlacement : public ::testing::TestWithParam<Case> {};

TEST_P(Ai8xPlacement, ReplaysAgainstTheIzerMemoryModel) {
  const Case& c = GetParam();
  auto model = onnx_fe::LoadModel(ReadFile(kData + "/models/" + c.file));
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  Ai8xOptions o;
  o.chip = *ParseChip(c.device);
  o.arch = c.arch;
  o.dataset = c.dataset;
  auto r = CompileAi8x(**model, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  if (!r->ok) {
    std::string why;
    for (const Diagnostic& d : r->diagnostics) {
      if (d.severity == Severity::kError) why += d.code + " " + d.layer_name + "; ";
    }
    if (c.must_compile) FAIL() << c.file << " does not compile: " << why;
    GTEST_SKIP() << c.file << " does not compile yet: " << why;
  }
  Replay(*r, GetChipSpec(o.chip).data_instance_bytes).Run();
}

void PrintTo(const Case& c, std::ostream* os) { *os << c.file; }

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  std::string s = info.param.file.substr(0, info.param.file.size() - 5);
  for (char& ch : s) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return s;
}

INSTANTIATE_TEST_SUITE_P(Models, Ai8xPlacement, ::testing::ValuesIn(Cases()), CaseName);

Ai8xCompileResult CompileUnet(const std::string& factory, const std::string& dataset) {
  auto model = onnx_fe::LoadModel(ReadFile(kData + "/models/camvid-" + factory + ".qat.onnx"));
  EXPECT_TRUE(model.ok());
  Ai8xOptions o;
  o.arch = factory;
  o.dataset = dataset;
  auto r = CompileAi8x(**model, o);
  EXPECT_TRUE(r.ok());
  return *r;
}

bool HasFlag(const Ai8xCompileResult& r, const std::string& flag) {
  for (const IzerFlag& f : r.izer_flags) {
    if (f.flag == flag) return !f.reason.empty();
  }
  return false;
}

// The small UNet fits without overlap (the izer's overwrite check stays on); the medium and large
// ones only with in-place layers, so the plan asks for --overlap-data, with its reason.
TEST(Ai8xUnet, OverlapDataOnlyWhereThePlanNeedsIt) {
  Ai8xCompileResult small = CompileUnet("ai85unetsmall", "CamVid_s80_c3");
  EXPECT_TRUE(small.ok);
  EXPECT_FALSE(HasFlag(small, "--overlap-data"));
  EXPECT_TRUE(small.izer_flags.empty());
  for (const char* f : {"ai85unetmedium", "ai85unetlarge"}) {
    Ai8xCompileResult r = CompileUnet(f, f == std::string("ai85unetlarge") ? "CamVid_s352_c3" : "CamVid_s80_c3");
    EXPECT_TRUE(r.ok) << f;
    EXPECT_TRUE(HasFlag(r, "--overlap-data")) << f;
  }
}

// camvid-ai85unetlarge: dec3 concatenates upconv3 (56) and enc3 (56) = two passes; enc3 is also
// read by bneck, so a passthrough copy writes it interleaved (write_gap 1, base + 4), as the
// hand-written camvid-unet-large.yaml's `pt`; enc1 and enc2 need no copy (single-pass).
TEST(Ai8xUnet, LargeCopiesOnlyTheMultipassSkip) {
  Ai8xCompileResult r = CompileUnet("ai85unetlarge", "CamVid_s352_c3");
  ASSERT_TRUE(r.ok);
  std::map<std::string, const Ai8xLayerSummary*> by;
  for (const Ai8xLayerSummary& l : r.layers) by[l.name] = &l;
  ASSERT_EQ(r.layers.size(), 19u);  // 18 weight layers + the copy, as the hand-written file
  ASSERT_TRUE(by.count("copy_enc3"));
  EXPECT_EQ(by.count("copy_enc1") + by.count("copy_enc2"), 0u);
  YAML::Node y = YAML::Load(r.yaml)["layers"];
  for (size_t i = 0; i < r.layers.size(); ++i) {
    const std::string& n = r.layers[i].name;
    int gap = y[i]["write_gap"] ? y[i]["write_gap"].as<int>() : 0;
    EXPECT_EQ(gap, n == "copy_enc3" || n == "upconv3" ? 1 : 0) << n;
  }
  EXPECT_EQ(by["copy_enc3"]->out_offset, by["upconv3"]->out_offset + 4);
  EXPECT_EQ(by["dec3"]->in_offset, by["upconv3"]->out_offset);
  EXPECT_EQ(by["copy_enc3"]->processors, by["enc3"]->output_processors);
  EXPECT_EQ(by["copy_enc3"]->output_processors, by["dec3"]->processors);
  // enc2 is read from its part map of dec2's concatenation
  EXPECT_EQ(by["enc2"]->output_processors, by["enc3"]->processors);
  EXPECT_EQ(by["enc2"]->output_processors & by["dec2"]->processors, by["enc2"]->output_processors);
}

// The replay itself catches a wrong offset: the same model with one layer's output moved onto data
// that is still read fails.
TEST(Ai8xPlacementReplay, AWrongOffsetFails) {
  auto model = onnx_fe::LoadModel(ReadFile(kData + "/models/camvid-ai85unetsmall.qat.onnx"));
  ASSERT_TRUE(model.ok());
  Ai8xOptions o;
  o.arch = "ai85unetsmall";
  auto good = CompileAi8x(**model, o);
  ASSERT_TRUE(good.ok() && good->ok);
  // enc2's output onto enc1's (still read by the concatenation of dec1), via the override the user has
  o.overrides.push_back({"enc2", "out_offset", std::to_string(good->layers[0].out_offset)});
  o.overrides.push_back({"enc2", "output_processors", "0x" + [&] {
                           char b[24];
                           std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(good->layers[0].output_processors));
                           return std::string(b);
                         }()});
  auto bad = CompileAi8x(**model, o);
  ASSERT_TRUE(bad.ok());
  ::testing::TestPartResultArray failures;
  {
    ::testing::ScopedFakeTestPartResultReporter reporter(::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ONLY_CURRENT_THREAD, &failures);
    Replay(*bad, GetChipSpec(o.chip).data_instance_bytes).Run();
  }
  EXPECT_GT(failures.size(), 0) << "the replay accepted enc2 written over enc1's live data";
}

}  // namespace
}  // namespace kiln::ai8x
