// The ai8x-training exports of tests/data/ai8x/models (manifest.json: 14 networks × qat, float
// and simplified forms) through the in-process run path, checked by relations that can fail:
//   * reference: the model plans and runs on the reference backend, every output finite;
//   * folding: the plan folds the constant subgraphs (the QAT calc_out_shift / calc_weight_scale /
//     calc_out_scale / quantize_weight chains) to the values numpy computes from the initializers
//     (scripts/ai8x_fold.py, run into the build tree as a fixture): the model and its numpy-folded
//     copy give bit-identical outputs on the reference backend (every folded value is an integer
//     shift, a power of two or a rounded weight, so there is no rounding to allow for), and no
//     op of the run stands for a node numpy folded (folding happens when the plan is built);
//   * tt-emu (default precision, RunMode::kPerLayer): every device layer meets its PCC threshold;
//   * float-vs-simplified (float rows): the float and simplified forms of one network agree,
//     max |a - b| <= 1e-4 · max |float| on the reference backend, same generated input; where
//     they do not, the numpy-folded copies must disagree as well ("does not hold": the two
//     exports compute different functions, tests/models/README.md), else the status is "wrong".
// Statuses are compared with tests/models/ai8x_status.tsv (tests/models/status_table.h).
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>

#include "tests/models/model_run.h"
#include "tests/models/status_table.h"

namespace kiln::models {
namespace {

const std::string kModels = std::string(KILN_TEST_DATA) + "/ai8x/models/";
const std::string kFolded = KILN_AI8X_FOLDED_DIR;
const std::string kTablePath = std::string(KILN_MODELS_SOURCE_DIR) + "/ai8x_status.tsv";
constexpr double kRelTol = 1e-4;
constexpr uint64_t kSeed = 0;  // generated inputs (runtime/inputs.h): same name, same data

struct Entry {
  std::string key;   // file name without .onnx, non-alphanumerics as '_' (scripts/ai8x_fold.py)
  std::string name;  // network ("mnist-ai85net5")
  std::string form;  // qat | float | simplified
  std::string file;
};

std::vector<Entry> Entries() {
  std::ifstream f(kModels + "manifest.json");
  std::ostringstream ss;
  ss << f.rdbuf();
  std::vector<Entry> out;
  const auto m = nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (!m.is_array()) return out;
  for (const auto& e : m) {
    Entry x;
    x.file = e.value("file", "");
    x.name = e.value("name", "");
    x.form = e.value("form", "");
    x.key = x.file.substr(0, x.file.size() - 5);
    for (char& c : x.key) {
      if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
    }
    out.push_back(x);
  }
  return out;
}

const Entry* Find(const std::string& key) {
  static const std::vector<Entry> all = Entries();
  for (const auto& e : all) {
    if (e.key == key) return &e;
  }
  return nullptr;
}

const StatusTable& Table() {
  static const StatusTable t = [] {
    auto r = ReadStatusTable(kTablePath);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : StatusTable{};
  }();
  return t;
}

std::vector<std::string> Keys() {
  std::vector<std::string> k;
  for (const auto& e : Entries()) k.push_back(e.key);
  return k;
}

struct Ran {
  std::shared_ptr<const convplan::ConvPlan> plan;
  std::optional<runtime::RunResult> result;
  std::string status;  // "" when it ran
  std::string detail;
};

/// Plans and runs `path` on the reference backend with generated inputs (seed kSeed).
Ran RunReference(const std::string& path) {
  Ran r;
  Planned p = LoadAndPlan(path);
  r.plan = p.plan;
  r.status = p.status;
  r.detail = p.detail;
  if (!p.plan) return r;
  runtime::RunOptions o;
  o.compare_to_reference = false;
  o.input_seed = kSeed;
  auto res = runtime::RunConvPlan(*p.plan, {}, Reference(), o);
  if (!res.ok()) {
    r.status = NotYetSupported("run", res.status());
    r.detail = res.status().ToString();
    return r;
  }
  r.result = std::move(*res);
  return r;
}

TEST(Ai8xTable, CoversTheManifest) {
  const auto entries = Entries();
  EXPECT_EQ(entries.size(), 42u);
  std::set<std::string> manifest, table(Table().keys.begin(), Table().keys.end());
  for (const auto& e : entries) manifest.insert(e.key);
  EXPECT_EQ(manifest, table) << kTablePath << " and " << kModels << "manifest.json list different models";
  EXPECT_EQ(Table().columns, (std::vector<std::string>{"reference", "folding", "tt-emu", "float-vs-simplified"}));
  for (const auto& e : entries) {
    if (e.form != "float") {
      EXPECT_EQ(Table().Get(e.key, "float-vs-simplified"), "n/a") << e.key << ": the relation is on float rows";
    }
  }
}

class Ai8xModel : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    entry_ = Find(GetParam());
    ASSERT_NE(entry_, nullptr) << GetParam();
  }
  const Entry* entry_ = nullptr;
};

TEST_P(Ai8xModel, ReferenceRuns) {
  const double t0 = Now();
  Ran r = RunReference(kModels + entry_->file);
  std::string status = r.status;
  if (r.result) {
    status = "pass";
    for (const auto& [name, t] : r.result->outputs) {
      for (float v : t.span<float>()) {
        if (!std::isfinite(v)) {
          status = "wrong: output " + name + " is not finite";
          break;
        }
      }
    }
  }
  std::printf("[ai8x] %s reference: %s (%.2f s)\n", entry_->key.c_str(), status.c_str(), SecondsSince(t0));
  CheckStatus(Table(), entry_->key, "reference", status, r.detail);
}

TEST_P(Ai8xModel, FoldingMatchesNumpy) {
  const double t0 = Now();
  std::ifstream names_file(kFolded + "/" + entry_->key + ".folded.txt");
  ASSERT_TRUE(names_file) << kFolded << "/" << entry_->key << ".folded.txt (fixture models.ai8x.fold)";
  std::set<std::string> folded;
  for (std::string line; std::getline(names_file, line);) {
    if (!line.empty()) folded.insert(line);
  }
  ASSERT_FALSE(folded.empty()) << "every ai8x export has a scale subgraph";
  Ran original = RunReference(kModels + entry_->file);
  std::string status = original.status, detail = original.detail;
  if (original.result) {
    Ran numpy = RunReference(kFolded + "/" + entry_->key + ".folded.onnx");
    if (!numpy.result) {
      status = "not yet supported: numpy-folded copy: " + numpy.status;
      detail = numpy.detail;
    } else {
      status = "pass";
      int run_time = 0;
      std::string first;
      for (const auto& l : original.result->layers) {
        for (const auto& n : l.source_nodes) {
          if (folded.count(n) && run_time++ == 0) first = n;
        }
        if (folded.count(l.name) && l.source_nodes.empty() && run_time++ == 0) first = l.name;
      }
      if (run_time > 0) {
        status = "wrong: " + std::to_string(run_time) + " folded node(s) run at run time, first " + first;
      }
      const auto& a = original.result->outputs;
      const auto& b = numpy.result->outputs;
      if (a.size() != b.size()) status = "wrong: output count differs from the numpy-folded copy";
      for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
        const Diff d = Compare(a[i].second, b[i].second);
        if (!d.same_shape || d.max_abs_err != 0.0) {
          char buf[160];
          std::snprintf(buf, sizeof buf, "wrong: output %s differs from the numpy-folded copy by %.3g (max %.3g)",
                        a[i].first.c_str(), d.max_abs_err, d.max_abs_ref);
          status = buf;
        }
      }
    }
  }
  std::printf("[ai8x] %s folding (%zu nodes): %s (%.2f s)\n", entry_->key.c_str(), folded.size(), status.c_str(),
              SecondsSince(t0));
  CheckStatus(Table(), entry_->key, "folding", status, detail);
}

TEST_P(Ai8xModel, TtEmuPerLayerMeetsPccThresholds) {
  const double t0 = Now();
  Planned p = LoadAndPlan(kModels + entry_->file);
  std::string status = p.status, detail = p.detail;
  if (p.plan) {
    runtime::RunOptions o;  // default precision
    o.mode = runtime::RunMode::kPerLayer;
    o.reference = &Reference();
    o.input_seed = kSeed;
    auto r = runtime::RunConvPlan(*p.plan, {}, TtEmu(), o);
    if (!r.ok()) {
      status = NotYetSupported("run", r.status());
      detail = r.status().ToString();
    } else {
      int device = 0, failed = 0;
      std::string failing;
      for (const auto& l : r->layers) {
        if (!l.on_device) continue;
        ++device;
        if (!l.pass && ++failed <= 3) {
          failing += " " + l.name;
          detail += l.name + " pcc " + std::to_string(l.pcc) + " < " + std::to_string(l.threshold) + "\n";
        }
      }
      if (device == 0) {
        status = "wrong: no device layer";
      } else if (!r->all_pass || failed > 0) {
        status = "below PCC threshold: " + std::to_string(failed) + " of " + std::to_string(device) +
                 " device layers:" + failing;
      } else {
        status = "pass";
      }
    }
  }
  std::printf("[ai8x] %s tt-emu: %s (%.2f s)\n", entry_->key.c_str(), status.c_str(), SecondsSince(t0));
  CheckStatus(Table(), entry_->key, "tt-emu", status, detail);
}

TEST_P(Ai8xModel, FloatAgreesWithSimplified) {
  if (entry_->form != "float") GTEST_SKIP() << "the relation is checked on the float row";
  const Entry* simplified = nullptr;
  for (const auto& key : Keys()) {
    const Entry* e = Find(key);
    if (e->name == entry_->name && e->form == "simplified") simplified = e;
  }
  ASSERT_NE(simplified, nullptr) << entry_->name << " has no simplified form";
  const double t0 = Now();
  // max |simplified - float| <= kRelTol · max |float| over every output; the numbers in `why`.
  auto agree = [](const Ran& f, const Ran& s, std::string* why) {
    if (f.result->outputs.size() != s.result->outputs.size()) {
      *why = "output counts differ";
      return false;
    }
    bool ok = true;
    for (size_t i = 0; i < f.result->outputs.size(); ++i) {
      const Diff d = Compare(s.result->outputs[i].second, f.result->outputs[i].second);
      char buf[160];
      std::snprintf(buf, sizeof buf, "output %zu max|err| %.3g, max|float| %.3g", i, d.max_abs_err, d.max_abs_ref);
      *why += buf;
      ok = ok && d.same_shape && d.max_abs_err <= kRelTol * d.max_abs_ref;
    }
    return ok;
  };
  // The numpy-folded copies (scripts/ai8x_fold.py) tell whether the exported graphs themselves
  // compute the same function, independently of Kiln's folding.
  Ran fc = RunReference(kFolded + "/" + entry_->key + ".folded.onnx");
  Ran sc = RunReference(kFolded + "/" + simplified->key + ".folded.onnx");
  std::string copies_why;
  const bool copies_ran = fc.result && sc.result;
  const bool copies_agree = copies_ran && agree(fc, sc, &copies_why);
  if (copies_ran) std::printf("[ai8x] %s numpy-folded copies: %s\n", entry_->name.c_str(), copies_why.c_str());
  Ran f = RunReference(kModels + entry_->file);
  Ran s = RunReference(kModels + simplified->file);
  const std::string nys = "not yet supported: ";
  std::string status, detail, why;
  if (!f.result) {
    status = nys + "float: " + f.status.substr(nys.size());
    detail = f.detail;
  } else if (!s.result) {
    status = nys + "simplified: " + s.status.substr(nys.size());
    detail = s.detail;
  } else if (agree(f, s, &why)) {
    status = "pass";
  } else if (copies_ran && !copies_agree) {
    // A property of the exports (tests/models/README.md), not of Kiln: expectable.
    status = "does not hold: the numpy-folded copies differ too";
    detail = why;
  } else {
    status = "wrong: " + why + (copies_ran ? " (the numpy-folded copies agree)" : "");
  }
  if (!why.empty()) std::printf("[ai8x] %s float vs simplified: %s\n", entry_->name.c_str(), why.c_str());
  std::printf("[ai8x] %s float-vs-simplified: %s (%.2f s)\n", entry_->name.c_str(), status.c_str(), SecondsSince(t0));
  CheckStatus(Table(), entry_->key, "float-vs-simplified", CellText(status), detail);
}

INSTANTIATE_TEST_SUITE_P(Ai8x, Ai8xModel, ::testing::ValuesIn(Keys()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
}  // namespace kiln::models
