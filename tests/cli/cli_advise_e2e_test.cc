// `kiln advise --local` end to end (cli/advise_command.h): the kiln.advise/1 JSON (docs/cli-json.md)
// records the seed, input hashes and cache keys and carries the TT-NN and `kiln run` snippets; the
// advised `--layer-precision` flags, run as is by `kiln run --local`, give every conv its advised
// precision and the advised network PCC; command-line errors are status 2.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "tests/server/kilnd_test_util.h"

namespace kiln::testing {
namespace {

const std::string kCases = std::string(KILN_TEST_DATA) + "/conv-cases/";

std::string Kiln(const std::string& args, int* rc) {
  return RunShell(std::string(KILN_BINARY) + " " + args + " 2>/dev/null", rc);
}

TEST(CliAdviseE2E, JsonAndItsKilnRunFlagsRunAsAdvised) {
  int rc = -1;
  // A small space (weights only) keeps this a few seconds; the search itself is tested in
  // tests/api/advisor_test.cc.
  const std::string input = "input=" + kCases + "unet_small.input.npy";
  const std::string html = (std::filesystem::temp_directory_path() / ("advise-" + std::to_string(getpid()) + ".html")).string();
  const std::string out = Kiln("advise " + kCases + "unet_small.onnx --local --input " + input +
                                   " --space weights --target-pcc 0.99 --max-refine 2 --seed 5 --json --quiet"
                                   " --report-html " + html,
                               &rc);
  ASSERT_EQ(rc, 0) << out;
  const auto doc = nlohmann::json::parse(out);
  EXPECT_EQ(doc["schema"], "kiln.advise/1");
  EXPECT_EQ(doc["seed"], 5);
  EXPECT_EQ(doc["space"], nlohmann::json::array({"weights"}));
  EXPECT_EQ(doc["model"]["sha256"].get<std::string>().size(), 64u);
  ASSERT_EQ(doc["inputs"].size(), 1u);
  EXPECT_EQ(doc["inputs"][0]["sha256"].get<std::string>().size(), 64u);
  EXPECT_EQ(doc["partial"], false);
  EXPECT_TRUE(doc["stopped_in"].is_null());
  EXPECT_EQ(doc["target_met"], true);
  const double pcc = doc["network"]["pcc"];
  EXPECT_GE(pcc, 0.99);
  EXPECT_LE(doc["network"]["relative_cost"].get<double>(), doc["network"]["best_uniform"]["relative_cost"].get<double>());
  EXPECT_EQ(doc["network"]["baseline"]["config"]["key"], "HiFi4/bfloat16");
  ASSERT_EQ(doc["layers"].size(), 13u);
  EXPECT_GT(doc["search"]["layer_runs"].get<int>(), 0);
  EXPECT_GE(doc["cache_keys"].size(), 13u);
  const std::string py = doc["snippet"]["ttnn_python"];
  EXPECT_NE(py.find("ttnn.WormholeComputeKernelConfig(math_fidelity=ttnn.MathFidelity.HiFi4"), std::string::npos) << py;
  EXPECT_NE(py.find("ttnn.Conv2dConfig(weights_dtype=ttnn.bfloat"), std::string::npos) << py;

  // The flags as `kiln run --local` takes them.
  std::string flags;
  for (const auto& f : doc["snippet"]["kiln_run_layer_precision"]) flags += " --layer-precision '" + f.get<std::string>() + "'";
  const std::string run = Kiln("run --local " + kCases + "unet_small.onnx --input " + input + flags + " --report json", &rc);
  ASSERT_TRUE(rc == 0 || rc == 3) << run;
  const auto r = nlohmann::json::parse(run)["configurations"][0];
  std::map<std::string, nlohmann::json> advised;
  for (const auto& l : doc["layers"]) advised[l["name"]] = l["config"];
  int convs = 0;
  double head_pcc = 0;
  for (const auto& l : r["layers"]) {
    auto it = advised.find(l["name"]);
    if (it == advised.end()) continue;
    ++convs;
    EXPECT_EQ(l["layer_precision"], true);
    EXPECT_EQ(l["precision"]["weights_dtype"], it->second["weights_dtype"]) << l["name"];
    EXPECT_EQ(l["precision"]["math_fidelity"], it->second["math_fidelity"]) << l["name"];
    if (l["name"] == "/head/Conv") head_pcc = l["pcc"];  // the graph output
  }
  EXPECT_EQ(convs, 13);
  // The run compares against the fp32 reference rounded to the bf16 output (tt-metal's rule), the
  // advisor against the fp32 graph output: the same run, PCCs within 1e-4.
  EXPECT_NEAR(head_pcc, pcc, 1e-4);

  // --report-html: the advised assignment's run report, one row per layer, precision per layer.
  std::ifstream in(html);
  std::stringstream page;
  page << in.rdbuf();
  const std::string h = page.str();
  std::filesystem::remove(html);
  EXPECT_NE(h.find("<html"), std::string::npos);
  size_t rows = 0;
  for (size_t at = h.find("<tr class=\"layer"); at != std::string::npos; at = h.find("<tr class=\"layer", at + 1)) ++rows;
  EXPECT_EQ(rows, 17u) << "13 convs, 4 host ops";
}

TEST(CliAdviseE2E, CommandLineErrorsAreStatus2) {
  int rc = -1;
  std::string out = Kiln("advise " + kCases + "unet_small.onnx", &rc);
  EXPECT_EQ(rc, 2) << out;
  out = Kiln("advise " + kCases + "unet_small.onnx --local --space fidelity,speed", &rc);
  EXPECT_EQ(rc, 2) << out;
  out = Kiln("advise " + kCases + "unet_small.onnx --local --target-pcc 1.5", &rc);
  EXPECT_EQ(rc, 2) << out;
  out = Kiln("advise " + kCases + "unet_small.onnx --local --report-html /no/such/dir/r.html", &rc);
  EXPECT_EQ(rc, 2) << out;
}

}  // namespace
}  // namespace kiln::testing
