// `kiln advise` end to end (cli/advise_command.h): the kiln.advise/1 JSON (docs/cli-json.md)
// records the seed, input hashes and cache keys and carries the TT-NN and `kiln run` snippets; the
// advised `--layer-precision` flags, run as is by `kiln run --local`, give every conv its advised
// precision and the advised network PCC; the same search as an advise job on a real kilnd
// (JobService.SubmitAdvise) gives the same document as --local, and `kiln jobs` / `kiln result`
// show the job and its answer; command-line errors are status 2.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "tests/server/kilnd_test_util.h"

namespace kiln::testing {
namespace {

const std::string kCases = std::string(KILN_TEST_DATA) + "/conv-cases/";

std::string Kiln(const std::string& args, int* rc) {
  return RunShell(std::string(KILN_BINARY) + " " + args + " 2>/dev/null", rc);
}
std::string KilnWithErrors(const std::string& args, int* rc) {
  return RunShell(std::string(KILN_BINARY) + " " + args + " 2>&1", rc);
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
  std::map<std::string, nlohmann::json> advised, threshold;
  int below = 0;  // advised below tt-metal's threshold in isolation
  for (const auto& l : doc["layers"]) {
    advised[l["name"]] = l["config"];
    threshold[l["name"]] = l["pcc_threshold"];
    ASSERT_TRUE(l["pcc_threshold"].is_number()) << l.dump();
    const double iso = l["isolated_pcc"].get<double>();
    below += iso != 0 && iso < l["pcc_threshold"].get<double>();  // 0: not run (the table's rule)
  }
  int convs = 0;
  double head_pcc = 0;
  for (const auto& l : r["layers"]) {
    auto it = advised.find(l["name"]);
    if (it == advised.end()) continue;
    ++convs;
    EXPECT_EQ(l["layer_precision"], true);
    EXPECT_EQ(l["precision"]["weights_dtype"], it->second["weights_dtype"]) << l["name"];
    EXPECT_EQ(l["precision"]["math_fidelity"], it->second["math_fidelity"]) << l["name"];
    // The advisor names the threshold the run checks the layer against.
    EXPECT_NEAR(l["pcc_threshold"].get<double>(), threshold[l["name"]].get<double>(), 1e-12) << l["name"];
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

  // The table marks the layers advised below their threshold and says what `kiln run` will make of
  // them (the search's target is the network's PCC alone).
  const std::string table = Kiln("advise " + kCases + "unet_small.onnx --local --input " + input +
                                     " --space weights --target-pcc 0.99 --max-refine 2 --seed 5 --quiet",
                                 &rc);
  ASSERT_EQ(rc, 0) << table;
  EXPECT_NE(table.find("ISOLATED_PCC  THRESHOLD"), std::string::npos) << table;
  if (below > 0) {
    EXPECT_NE(table.find("note: " + std::to_string(below) + " advised layer(s) run below tt-metal's PCC threshold"),
              std::string::npos)
        << table;
  } else {
    EXPECT_EQ(table.find("note: "), std::string::npos) << table;
  }
}

// The document without what differs between two runs of one search (its wall time) and between
// an in-process and a job search (the model as given: a file, or a stored model's id).
nlohmann::json Comparable(nlohmann::json doc) {
  doc["search"].erase("seconds");
  doc["model"].erase("file");
  return doc;
}

// Equal documents, floating-point numbers within 1e-9: kilnd's fp32 reference runs on its
// reference lane's threads, the in-process one on all cores (a sum's order may differ).
void ExpectSameDocument(const nlohmann::json& got, const nlohmann::json& want, const std::string& path = "") {
  if (got.is_number_float() || want.is_number_float()) {
    ASSERT_TRUE(got.is_number() && want.is_number()) << path;
    EXPECT_NEAR(got.get<double>(), want.get<double>(), 1e-9) << path;
  } else if (got.is_object() && want.is_object()) {
    EXPECT_EQ(got.size(), want.size()) << path;
    for (auto it = want.begin(); it != want.end(); ++it) {
      ASSERT_TRUE(got.contains(it.key())) << path << "." << it.key();
      ExpectSameDocument(got[it.key()], it.value(), path + "." + it.key());
    }
  } else if (got.is_array() && want.is_array()) {
    ASSERT_EQ(got.size(), want.size()) << path;
    for (size_t i = 0; i < want.size(); ++i) ExpectSameDocument(got[i], want[i], path + "[" + std::to_string(i) + "]");
  } else {
    EXPECT_EQ(got, want) << path;
  }
}

class CliAdviseJobE2E : public KilndTest {};

TEST_F(CliAdviseJobE2E, AdviseJobOnKilndGivesTheLocalAnswer) {
  auto kilnd = StartKilnd({"--devices", "tt-emu:1,reference:1"});
  int rc = -1;
  // --space fidelity and two refinement runs keep each search a few seconds on unet_small.
  const std::string input = "input=" + kCases + "unet_small.input.npy";
  const std::string search = " --input " + input + " --space fidelity --target-pcc 0.99 --max-refine 2 --seed 7 --json";
  const std::string local = Kiln("advise " + kCases + "unet_small.onnx --local --quiet" + search, &rc);
  ASSERT_EQ(rc, 0) << local;
  const std::string server = "--server " + kilnd->grpc_address() + " ";
  // The job's steps go to stderr: folded into the output here, then split off at the document.
  const std::string remote_all =
      RunShell(std::string(KILN_BINARY) + " " + server + "advise " + kCases + "unet_small.onnx" + search + " 2>&1", &rc);
  ASSERT_EQ(rc, 0) << remote_all;
  const size_t doc_at = remote_all.find("{\n");
  ASSERT_NE(doc_at, std::string::npos) << remote_all;
  const std::string steps = remote_all.substr(0, doc_at);
  EXPECT_NE(steps.find("submitted"), std::string::npos) << steps;
  EXPECT_NE(steps.find("kiln: advise: sweep 1/4 HiFi4/bfloat16"), std::string::npos) << steps;
  EXPECT_NE(steps.find("SUCCEEDED on tt-emu:0"), std::string::npos) << steps;
  const auto want = nlohmann::json::parse(local);
  const auto got = nlohmann::json::parse(remote_all.substr(doc_at));
  EXPECT_EQ(got["model"]["file"], kCases + "unet_small.onnx");
  ExpectSameDocument(Comparable(got), Comparable(want));
  EXPECT_EQ(got["target_met"], true);
  EXPECT_GE(got["network"]["pcc"].get<double>(), 0.99);
  EXPECT_EQ(got["space"], nlohmann::json::array({"fidelity"}));
  EXPECT_EQ(got["layers"].size(), 13u);

  // The job: kind advise, SUCCEEDED, its answer again through `kiln result`.
  const auto jobs = nlohmann::json::parse(Kiln(server + "jobs --json", &rc));
  ASSERT_EQ(rc, 0);
  ASSERT_EQ(jobs["jobs"].size(), 1u);
  const auto& job = jobs["jobs"][0];
  EXPECT_EQ(job["kind"], "advise");
  EXPECT_EQ(job["state"], "succeeded");
  EXPECT_EQ(job["backend"], "tt-emu");
  EXPECT_EQ(job["model_id"], want["model"]["sha256"]);
  EXPECT_EQ(job["progress"]["configurations_done"], 1);
  EXPECT_TRUE(job["progress"]["step"].is_string()) << job.dump(1);
  const std::string id = job["job_id"];
  const std::string result = Kiln(server + "result " + id + " --report json", &rc);
  ASSERT_EQ(rc, 0) << result;
  const auto again = nlohmann::json::parse(result);
  EXPECT_EQ(again["model"]["file"], want["model"]["sha256"]);  // no file: the stored model's id
  auto with_files = Comparable(again);
  with_files["inputs"][0]["files"] = want["inputs"][0]["files"];  // the job keeps tensors, not paths
  ExpectSameDocument(with_files, Comparable(want));
  const std::string table = Kiln(server + "result " + id, &rc);
  EXPECT_EQ(rc, 0) << table;
  EXPECT_NE(table.find("target met; answer from: "), std::string::npos) << table;
  EXPECT_NE(table.find("kiln run '" + want["model"]["sha256"].get<std::string>() + "'"), std::string::npos) << table;

  // A search that cannot run fails the job with the advisor's error (tests/data/conv-cases has no
  // conv-free model: an input of another shape than the model's is refused by the search instead).
  const std::string bad =
      RunShell(std::string(KILN_BINARY) + " " + server + "advise " + kCases + "unet_small.onnx --input input=" + kCases +
                   "avgpool_ceil_cip0_pads.input.npy --quiet 2>&1",
               &rc);
  EXPECT_EQ(rc, 1) << bad;
  EXPECT_NE(bad.find("FAILED: INVALID_ARGUMENT"), std::string::npos) << bad;
  EXPECT_NE(bad.find("the model declares [1,3,128,128]"), std::string::npos) << bad;
  // An input the model does not have is refused at submission: no job.
  const std::string unknown = RunShell(std::string(KILN_BINARY) + " " + server + "advise " + kCases +
                                           "unet_small.onnx --input nosuch=" + kCases +
                                           "unet_small.input.npy --quiet 2>&1",
                                       &rc);
  EXPECT_EQ(rc, 1) << unknown;
  EXPECT_NE(unknown.find("INVALID_ARGUMENT: advise.input_sets[0]: unknown input 'nosuch' (model inputs: input)"),
            std::string::npos)
      << unknown;
  EXPECT_EQ(unknown.find("FAILED"), std::string::npos) << unknown;
  EXPECT_EQ(kilnd->Stop(), 0);
}

TEST(CliAdviseE2E, CommandLineErrorsAreStatus2) {
  int rc = -1;
  std::string out = Kiln("advise " + kCases + "unet_small.onnx --local --detach", &rc);
  EXPECT_EQ(rc, 2) << out;
  out = Kiln("advise " + kCases + "unet_small.onnx --local --space fidelity,speed", &rc);
  EXPECT_EQ(rc, 2) << out;
  out = Kiln("advise " + kCases + "unet_small.onnx --local --target-pcc 1.5", &rc);
  EXPECT_EQ(rc, 2) << out;
  out = Kiln("advise " + kCases + "unet_small.onnx --local --report-html /no/such/dir/r.html", &rc);
  EXPECT_EQ(rc, 2) << out;
  // Numbers out of range name the bound (cli/options.h), and a negative seed is not wrapped:
  // arguments, then what the error says ("" where only the status is checked).
  const std::string advise = "advise " + kCases + "unet_small.onnx --local ";
  const std::vector<std::pair<std::string, std::string>> refused = {
      {advise + "--seed -1", "--seed: expected a whole number >= 0 in decimal, got '-1'"},
      {advise + "--seed 010", ""},  // not octal 8
      {advise + "--budget inf", ""},
      {advise + "--target-pcc 2", "--target-pcc: expected a number from 1e-09 to 1, got '2'"},
      {advise + "--seed 18446744073709551616", "is over 18446744073709551615"},
      {advise + "--budget -2", "--budget: expected a number >= 0, got '-2'"},
      {"jobs --limit 0", "--limit: expected a whole number >= 1, got '0'"},
  };
  for (const auto& [args, says] : refused) {
    out = KilnWithErrors(args, &rc);
    EXPECT_EQ(rc, 2) << args << ": " << out;
    EXPECT_NE(out.find(says), std::string::npos) << args << ": " << out;
  }
}

}  // namespace
}  // namespace kiln::testing
