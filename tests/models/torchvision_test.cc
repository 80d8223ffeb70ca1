// torchvision CNNs (exported by scripts/torchvision_models.py into the build tree: random init,
// torch.manual_seed(0), PyTorch's input and outputs) through the in-process path
// onnx_fe::LoadModel → convplan::BuildConvPlan(model, runtime::HostKernels()) →
// runtime::RunConvPlan:
//   * reference backend vs PyTorch: max |err| <= 1e-4 · max |ref| for every output;
//   * tt-emu (default precision, RunMode::kPerLayer): every device layer meets its PCC threshold
//     (runtime/accuracy.h), RunResult::all_pass; layers below it are named in the status.
// The observed status of each (model, backend) must equal tests/models/torchvision_status.tsv
// (tests/models/status_table.h): a model that starts or stops running fails until the table is
// regenerated (tests/models/README.md).
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "device/npy.h"
#include "tests/models/model_run.h"
#include "tests/models/status_table.h"

namespace kiln::models {
namespace {

const std::string kDir = KILN_TORCHVISION_DIR;
const std::string kTablePath = std::string(KILN_MODELS_SOURCE_DIR) + "/torchvision_status.tsv";
constexpr bool kHeavy = KILN_MODELS_HEAVY != 0;
constexpr double kRelTol = 1e-4;  // max |err| <= kRelTol · max |ref|

const StatusTable& Table() {
  static const StatusTable t = [] {
    auto r = ReadStatusTable(kTablePath);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : StatusTable{};
  }();
  return t;
}

/// Table keys of the enabled tiers ("ci" always, "heavy" with KILN_MODEL_TESTS_HEAVY).
std::vector<std::string> Keys() {
  std::vector<std::string> keys;
  for (const auto& k : Table().keys) {
    const std::string tier = Table().Get(k, "tier");
    if (tier == "ci" || (kHeavy && tier == "heavy")) keys.push_back(k);
  }
  return keys;
}

/// manifest.tsv of the export: key -> number of outputs.
std::map<std::string, int> Manifest() {
  std::map<std::string, int> m;
  std::ifstream f(kDir + "/manifest.tsv");
  std::string line;
  while (std::getline(f, line)) {
    std::vector<std::string> cells;
    std::istringstream is(line);
    for (std::string c; std::getline(is, c, '\t');) cells.push_back(c);
    if (cells.size() == 5) m[cells[0]] = std::stoi(cells[4]);
  }
  return m;
}

TEST(TorchvisionTable, CoversTheExportedSet) {
  ASSERT_FALSE(Table().keys.empty()) << kTablePath;
  EXPECT_EQ(Table().columns, (std::vector<std::string>{"tier", "reference", "tt-emu"}));
  std::set<std::string> table_keys, exported;
  for (const auto& k : Keys()) table_keys.insert(k);
  for (const auto& [k, n] : Manifest()) exported.insert(k);
  EXPECT_EQ(table_keys, exported) << "scripts/torchvision_models.py --set " << (kHeavy ? "all" : "test")
                                  << " and " << kTablePath << " list different models";
  for (const auto& k : Table().keys) {
    const std::string tier = Table().Get(k, "tier");
    EXPECT_TRUE(tier == "ci" || tier == "heavy") << k << ": tier '" << tier << "'";
  }
  EXPECT_NE(table_keys.count("resnet18_224"), 0u);
}

class TorchvisionModel : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    key_ = GetParam();
    const auto m = Manifest();
    auto it = m.find(key_);
    ASSERT_NE(it, m.end()) << key_ << " not exported into " << kDir << " (fixture models.torchvision.export)";
    outputs_ = it->second;
    auto x = device::ReadNpy(kDir + "/" + key_ + ".input.npy");
    ASSERT_TRUE(x.ok()) << x.status().ToString();
    inputs_["input"] = std::move(*x);
  }
  std::string key_;
  int outputs_ = 0;
  runtime::RunInputs inputs_;
};

TEST_P(TorchvisionModel, ReferenceMatchesPyTorch) {
  const double t0 = Now();
  Planned p = LoadAndPlan(kDir + "/" + key_ + ".onnx");
  std::string status = p.status, detail = p.detail;
  if (p.plan) {
    runtime::RunOptions o;
    o.compare_to_reference = false;  // the device is the reference
    auto r = runtime::RunConvPlan(*p.plan, inputs_, Reference(), o);
    if (!r.ok()) {
      status = NotYetSupported("run", r.status());
      detail = r.status().ToString();
    } else if (static_cast<int>(r->outputs.size()) != outputs_) {
      status = "wrong: " + std::to_string(r->outputs.size()) + " outputs, PyTorch " + std::to_string(outputs_);
    } else {
      status = "pass";
      for (int i = 0; i < outputs_; ++i) {
        auto want = device::ReadNpy(kDir + "/" + key_ + ".output" + std::to_string(i) + ".npy");
        ASSERT_TRUE(want.ok()) << want.status().ToString();
        const Diff d = Compare(r->outputs[i].second, *want);
        char buf[200];
        std::snprintf(buf, sizeof buf, "output%d max|err| %.3g, max|ref| %.3g (%.3g of tolerance)", i,
                      d.max_abs_err, d.max_abs_ref, d.max_abs_err / (kRelTol * d.max_abs_ref));
        if (!d.same_shape) {
          status = "wrong: output" + std::to_string(i) + " shape or dtype differs from PyTorch's";
        } else if (!(d.max_abs_err <= kRelTol * d.max_abs_ref)) {
          status = std::string("wrong: ") + buf;
        }
        std::printf("[torchvision] %s reference %s\n", key_.c_str(), buf);
      }
    }
  }
  std::printf("[torchvision] %s reference: %s (%.2f s)\n", key_.c_str(), status.c_str(), SecondsSince(t0));
  CheckStatus(Table(), key_, "reference", status, detail);
}

TEST_P(TorchvisionModel, TtEmuPerLayerMeetsPccThresholds) {
  const double t0 = Now();
  Planned p = LoadAndPlan(kDir + "/" + key_ + ".onnx");
  std::string status = p.status, detail = p.detail;
  if (p.plan) {
    runtime::RunOptions o;  // default precision
    o.mode = runtime::RunMode::kPerLayer;
    o.reference = &Reference();
    auto r = runtime::RunConvPlan(*p.plan, inputs_, TtEmu(), o);
    if (!r.ok()) {
      status = NotYetSupported("run", r.status());
      detail = r.status().ToString();
    } else {
      int device = 0;
      std::string failing;
      int failed = 0;
      for (const auto& l : r->layers) {
        if (!l.on_device) continue;
        ++device;
        EXPECT_TRUE(l.compared) << l.name;
        if (!l.pass && ++failed <= 3) {
          char buf[160];
          std::snprintf(buf, sizeof buf, " (pcc %.5f < %.3f)", l.pcc, l.threshold);
          failing += " " + l.name;  // the table names layers only (PCC digits vary with threads)
          detail += l.name + buf + "\n";
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
      std::printf("[torchvision] %s tt-emu per_layer: %d device layers, %zu ops\n", key_.c_str(), device,
                  r->layers.size());
    }
  }
  std::printf("[torchvision] %s tt-emu: %s (%.2f s)\n", key_.c_str(), status.c_str(), SecondsSince(t0));
  CheckStatus(Table(), key_, "tt-emu", status, detail);
}

INSTANTIATE_TEST_SUITE_P(Torchvision, TorchvisionModel, ::testing::ValuesIn(Keys()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
}  // namespace kiln::models
