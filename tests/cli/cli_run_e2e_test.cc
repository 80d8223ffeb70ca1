// `kiln run` / `kiln result` reports through a real kilnd: the table keeps long layer names
// distinct and labels host emulation time, says where the inputs came from, --skip-reference is "0 compared" with exit status 4, JSON has numeric
// shapes and the command line's enum spellings (docs/cli-json.md), a bad --out / --report-file
// fails before anything runs, and --mode both / several jobs give one report with both modes.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "device/npy.h"
#include "kiln/v1/job.grpc.pb.h"
#include "tests/server/kilnd_process.h"
#include "tests/server/kilnd_test_util.h"

namespace kiln::testing {
namespace {

const std::string kCases = std::string(KILN_TEST_DATA) + "/conv-cases/";

class CliRunE2E : public KilndTest {
 protected:
  void SetUp() override {
    KilndTest::SetUp();
    kilnd_ = StartKilnd({"--devices", "tt-emu:1,reference:1", "--log-level", "warn"});
    server_ = kilnd_->grpc_address();
  }

  // Runs the kiln CLI; stdout (and stderr unless `stdout_only`) into the result, exit status in *rc.
  std::string Kiln(const std::string& args, int* rc, bool stdout_only = false) {
    std::string cmd = std::string(KILN_BINARY) + " --server " + server_ + " " + args +
                      (stdout_only ? " 2>/dev/null" : " 2>&1");
    return RunShell(cmd, rc);
  }

  int Jobs() {
    auto stub = kiln::v1::JobService::NewStub(grpc::CreateChannel(server_, grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    kiln::v1::ListJobsResponse list;
    EXPECT_TRUE(stub->ListJobs(&ctx, kiln::v1::ListJobsRequest(), &list).ok());
    return list.jobs_size();
  }

  void Upload(const std::string& name) {
    int rc = -1;
    std::string out = Kiln("upload " + kCases + name + ".onnx", &rc);
    ASSERT_EQ(rc, 0) << out;
  }

  std::unique_ptr<KilndProcess> kilnd_;
  std::string server_;
};

std::vector<std::string> Lines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// MobileNetV2's scope names share their first 28 characters three at a time; the table used to
// cut them there, making rows identical. Now every row's name is distinct and whole (they fit).
TEST_F(CliRunE2E, TableKeepsLayerNamesDistinctAndSaysWhatItMeasured) {
  Upload("mobilenet_v2_0.5");
  int rc = -1;
  const std::string out = Kiln("run mobilenet_v2_0.5 --backend reference --seed 7", &rc, true);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("inputs: every input random uniform [-1, 1), seed 7\n"), std::string::npos) << out;
  const auto lines = Lines(out);
  size_t header = 0;
  while (header < lines.size() && lines[header].rfind("LAYER ", 0) != 0) ++header;
  ASSERT_LT(header, lines.size()) << out;
  EXPECT_NE(lines[header].find("HOST_EMULATION_MS"), std::string::npos) << lines[header];
  EXPECT_EQ(lines[header].find("TIME_MS"), std::string::npos) << lines[header];
  std::set<std::string> names;
  size_t rows = 0;
  for (size_t i = header + 1; i < lines.size() && lines[i].rfind("backend ", 0) != 0; ++i) {
    if (lines[i].find(" node(s) evaluated") != std::string::npos) continue;
    ++rows;
    names.insert(lines[i].substr(0, lines[i].find(' ')));
  }
  EXPECT_GE(rows, 52u);  // its 52 convs at least
  EXPECT_EQ(names.size(), rows) << out;
  for (const char* n : {"/features/features.17/conv/conv.0/conv.0.0/Conv", "/features/features.17/conv/conv.1/conv.1.0/Conv",
                        "/features/features.17/conv/conv.2/Conv"}) {
    EXPECT_EQ(names.count(n), 1u) << n << "\n" << out;
  }
  EXPECT_NE(out.find("(times are host emulation, not device latency)"), std::string::npos) << out;
  EXPECT_NE(out.find(" compared, all layers pass"), std::string::npos) << out;
}

TEST_F(CliRunE2E, InputsFromAFileAreNamed) {
  Upload("residual_add_relu");
  int rc = -1;
  const std::string x = kCases + "residual_add_relu.input.npy";
  std::string out = Kiln("run residual_add_relu --backend reference --input X=" + x, &rc, true);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("inputs: X from " + x + "; any other input random uniform [-1, 1), seed 0\n"), std::string::npos)
      << out;
}

// A request over a gRPC message limit names the setting that governs it (cli/client.cc Describe):
// here the client's own --max-message-bytes, at its 4 MiB floor, against an 8 MB input.
TEST_F(CliRunE2E, AMessageOverTheLimitNamesTheFlag) {
  Upload("residual_add_relu");
  const std::string big = (std::filesystem::temp_directory_path() / ("big-" + std::to_string(getpid()) + ".npy")).string();
  auto t = device::Tensor::Zeros({1, 2, 1000, 1000});
  ASSERT_TRUE(t.ok());
  ASSERT_TRUE(device::WriteNpy(big, *t).ok());
  int rc = -1;
  const std::string out = Kiln("--max-message-bytes 4194304 run residual_add_relu --input X=" + big, &rc);
  std::filesystem::remove(big);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("RESOURCE_EXHAUSTED: Sent message larger than max"), std::string::npos) << out;
  EXPECT_NE(out.find("(the sender's --max-message-bytes, up to 2047 MiB: this kiln's for a request"), std::string::npos)
      << out;
}

// --skip-reference compares nothing: no "all layers pass", exit status 4 (remote and --local).
TEST_F(CliRunE2E, SkipReferenceIsZeroComparedWithStatus4) {
  Upload("residual_add_relu");
  int rc = -1;
  std::string out = Kiln("run residual_add_relu --skip-reference", &rc, true);
  EXPECT_EQ(rc, 4) << out;
  EXPECT_NE(out.find(": 0 compared (no reference: nothing checked)"), std::string::npos) << out;
  EXPECT_EQ(out.find("all layers pass"), std::string::npos) << out;
  out = Kiln("run --local " + kCases + "residual_add_relu.onnx --skip-reference --report json", &rc, true);
  EXPECT_EQ(rc, 4) << out;
  auto doc = nlohmann::json::parse(out);
  EXPECT_EQ(doc["configurations"][0]["compared"], 0);
  EXPECT_EQ(doc["configurations"][0]["passed"], false);
}

// docs/cli-json.md: shapes as numbers, enums as the flags spell them, the same document from
// `kiln run` and `kiln result`.
TEST_F(CliRunE2E, JsonHasNumericShapesAndCommandLineSpellings) {
  Upload("residual_add_relu");
  int rc = -1;
  const std::string out = Kiln("run residual_add_relu --math-fidelity LoFi --weights-dtype bfloat8_b --mode per_layer "
                               "--report json --seed 3",
                               &rc, true);
  ASSERT_TRUE(rc == 0 || rc == 3) << out;
  auto doc = nlohmann::json::parse(out);
  EXPECT_EQ(doc["schema"], "kiln.run/1");
  ASSERT_EQ(doc["jobs"].size(), 1u);
  EXPECT_EQ(doc["inputs"]["random_seed"], 3);
  const auto& c = doc["configurations"][0];
  EXPECT_EQ(c["mode"], "per_layer");
  EXPECT_EQ(c["requested"], nlohmann::json::parse(R"({"math_fidelity":"LoFi","weights_dtype":"bfloat8_b"})"));
  EXPECT_EQ(c["precision"]["math_fidelity"], "LoFi");
  EXPECT_EQ(c["precision"]["weights_dtype"], "bfloat8_b");
  EXPECT_EQ(c["precision"]["input_dtype"], "bfloat16");
  EXPECT_EQ(c["precision"]["arch"], "wormhole_b0");
  ASSERT_EQ(c["layers"].size(), 4u);
  const auto& conv = c["layers"][0];
  EXPECT_EQ(conv["name"], "conv_a");
  EXPECT_EQ(conv["output_shape"], nlohmann::json::parse("[1,4,8,8]"));
  EXPECT_TRUE(conv["pcc"].is_number());
  EXPECT_TRUE(conv["host_emulation_seconds"].is_number());
  EXPECT_TRUE(conv["program"]["shard_layout"].is_string());
  EXPECT_EQ(conv["program"]["act_dtype"], "bfloat16");
  EXPECT_EQ(c["outputs"][0]["shape"], nlohmann::json::parse("[1,4,8,8]"));
  // The same document from `kiln result` of that job (inputs unknown there).
  const std::string job = doc["jobs"][0];
  auto again = nlohmann::json::parse(Kiln("result " + job + " --report json", &rc, true));
  EXPECT_EQ(again["configurations"][0]["layers"], c["layers"]);
  EXPECT_TRUE(again["inputs"].is_null());
}

// --layer-precision: one layer's precision over the run's, in the JSON per layer and under the table.
TEST_F(CliRunE2E, LayerPrecisionFlagRunsThatLayerAtItsOwnPrecision) {
  Upload("residual_add_relu");
  int rc = -1;
  const std::string out = Kiln("run residual_add_relu --math-fidelity HiFi4 --mode per_layer --report json --seed 3 "
                               "--layer-precision conv_a:math_fidelity=LoFi --layer-precision conv_a:weights_dtype=bfloat4_b",
                               &rc, true);
  ASSERT_TRUE(rc == 0 || rc == 3) << out;
  const auto doc = nlohmann::json::parse(out);
  const auto& c = doc["configurations"][0];
  EXPECT_EQ(c["precision"]["math_fidelity"], "HiFi4");
  int named = 0;
  for (const auto& l : c["layers"]) {
    if (l["name"] == "conv_a") {
      ++named;
      EXPECT_EQ(l["layer_precision"], true);
      EXPECT_EQ(l["precision"]["math_fidelity"], "LoFi");
      EXPECT_EQ(l["precision"]["weights_dtype"], "bfloat4_b");
      EXPECT_NE(l["resolved_precision"].get<std::string>().find("LoFi"), std::string::npos);
    } else if (l["op"] == "conv2d") {
      EXPECT_EQ(l["layer_precision"], false);
      EXPECT_EQ(l["precision"]["math_fidelity"], "HiFi4");
    }
  }
  EXPECT_EQ(named, 1);
  const std::string table = Kiln("run residual_add_relu --layer-precision conv_a:math_fidelity=LoFi", &rc, true);
  EXPECT_NE(table.find("layer precision conv_a: "), std::string::npos) << table;
  // A key naming no layer is the server's INVALID_ARGUMENT; a malformed spec never leaves the CLI.
  std::string bad = Kiln("run residual_add_relu --layer-precision no_such_conv:math_fidelity=LoFi", &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(bad.find("no_such_conv"), std::string::npos) << bad;
  bad = Kiln("run residual_add_relu --layer-precision conv_a:fidelity=LoFi", &rc);
  EXPECT_EQ(rc, 2) << bad;
  EXPECT_NE(bad.find("unknown key 'fidelity'"), std::string::npos) << bad;
}

// An unusable --out or --report-file is a command-line error (2) before anything is uploaded or run.
TEST_F(CliRunE2E, BadOutFailsBeforeTheRun) {
  const std::string file = (dir_ / "a-file").string();
  std::ofstream(file) << "x";
  int rc = -1;
  std::string out = Kiln("run " + kCases + "residual_add_relu.onnx --out " + file + "/sub", &rc);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("--out " + file + "/sub"), std::string::npos) << out;
  out = Kiln("run " + kCases + "residual_add_relu.onnx --report html --report-file " + (dir_ / "no-dir/r.html").string(),
             &rc);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("--report-file"), std::string::npos) << out;
  EXPECT_EQ(Jobs(), 0);
  EXPECT_EQ(out.find("upload"), std::string::npos) << out;
  // `kiln result` checks before it fetches: no table printed.
  Upload("residual_add_relu");
  const std::string job = Kiln("run residual_add_relu --backend reference --detach", &rc, true);
  ASSERT_EQ(rc, 0) << job;
  out = Kiln("watch " + job.substr(0, job.size() - 1), &rc);
  ASSERT_EQ(rc, 0) << out;
  out = Kiln("result " + job.substr(0, job.size() - 1) + " --out " + file + "/sub", &rc);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_EQ(out.find("LAYER"), std::string::npos) << out;
}

// --mode both: a chained and a per_layer job, one report; the HTML puts the modes side by side,
// and `kiln result` of the two jobs gives the same page.
TEST_F(CliRunE2E, ModeBothShowsChainedAndPerLayerSideBySide) {
  Upload("residual_add_relu");
  int rc = -1;
  const std::string html = (dir_ / "r.html").string();
  std::string out = Kiln("run residual_add_relu --mode both --report html --report-file " + html, &rc);
  ASSERT_TRUE(rc == 0 || rc == 3) << out;
  const std::string page = ReadFileBytes(html);
  EXPECT_NE(page.find("<th>PCC<br>chained</th><th>PCC<br>per_layer</th>"), std::string::npos) << page;
  EXPECT_NE(page.find("<th>host emulation ms<br>chained</th>"), std::string::npos) << page;
  size_t rows = 0;
  for (size_t p = page.find("<tr class=\"layer"); p != std::string::npos; p = page.find("<tr class=\"layer", p + 1)) ++rows;
  EXPECT_EQ(rows, 4u);  // one row per layer, not per layer and mode
  EXPECT_NE(page.find("<svg class=\"chart pcc\""), std::string::npos);
  EXPECT_EQ(Jobs(), 2);
  // Both jobs given to `kiln result`: the same table as the run's.
  auto stub = kiln::v1::JobService::NewStub(grpc::CreateChannel(server_, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  kiln::v1::ListJobsResponse list;
  ASSERT_TRUE(stub->ListJobs(&ctx, kiln::v1::ListJobsRequest(), &list).ok());
  ASSERT_EQ(list.jobs_size(), 2);
  // Newest first: the per_layer job was submitted second.
  out = Kiln("result " + list.jobs(1).job_id() + " " + list.jobs(0).job_id() + " --report html", &rc, true);
  EXPECT_NE(out.find("<th>PCC<br>chained</th><th>PCC<br>per_layer</th>"), std::string::npos) << out;
  out = Kiln("result " + list.jobs(1).job_id() + " " + list.jobs(0).job_id(), &rc, true);
  EXPECT_NE(out.find("mode chained"), std::string::npos) << out;
  EXPECT_NE(out.find("mode per_layer"), std::string::npos) << out;
}

// Every command-line error of `kiln run` is status 2 before the FILE is uploaded: a bad --sweep (a
// repeated field or value, one spelled two ways, an empty one, more points than any kilnd takes)
// or --label (a key given twice, one kilnd refuses), report flags with --detach (which does not
// wait for the report), a --tt-emu-level tt-emu does not know or one
// given with another backend (refused by kilnd after the upload before, status 1); job options
// with --local (--label and --idempotency-key were ignored).
TEST_F(CliRunE2E, CommandLineErrorsComeBeforeTheUpload) {
  const std::string file = kCases + "residual_add_relu.onnx";
  int rc = -1;
  // 65 x 65 points: more than any kilnd takes (4096), refused before they are built.
  std::string many_a = "math_fidelity=", many_b = "weights_dtype=";
  for (int i = 0; i < 65; ++i) {
    many_a += (i ? "," : "") + std::string("a") + std::to_string(i);
    many_b += (i ? "," : "") + std::string("b") + std::to_string(i);
  }
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--sweep nosuchfield=1", "unknown field"},
      {"--sweep math_fidelity=LoFi,HiFi9", "HiFi9"},
      {"--sweep math_fidelity=LoFi,LoFi", "math_fidelity=LoFi is listed twice"},
      {"--sweep math_fidelity=LoFi --sweep math_fidelity=HiFi4", "math_fidelity is swept twice"},
      {"--sweep math_fidelity=,", "math_fidelity lists an empty value"},
      {"--sweep math_fidelity=LoFi,,HiFi4", "math_fidelity lists an empty value"},
      {"--sweep math_fidelity=lofi,LoFi", "points 0 and 1 are the same precision"},
      {"--sweep fp32_dest_acc_en=true,1", "points 0 and 1 are the same precision"},
      {"--sweep " + many_a + " --sweep " + many_b, "more than 4096 points"},
      {"--label novalue", "KEY=VALUE"},
      {"--label k=1 --label k=2", "--label k is given twice"},
      {"--label Suite=x", "label key 'Suite' must match"},
      {"--detach --report json", "give them to kiln result"},
      {"--detach --out /tmp", "give them to kiln result"},
      {"--tt-emu-level bogus", "bogus"},
      {"--backend reference --tt-emu-level fast", "tt-emu"}};
  for (const auto& [args, says] : cases) {
    std::string out = Kiln("run " + file + " " + args, &rc);
    EXPECT_EQ(rc, 2) << args << ": " << out;
    EXPECT_NE(out.find(says), std::string::npos) << args << ": " << out;
    EXPECT_EQ(out.find("upload"), std::string::npos) << args << ": " << out;
    EXPECT_EQ(out.find("already stored"), std::string::npos) << args << ": " << out;
  }
  EXPECT_EQ(ScrapeMetrics(kilnd_->metrics_address())["kiln_upload_bytes_total"], 0.0);
  EXPECT_EQ(Jobs(), 0);
  // Job options without a server are refused, not ignored.
  for (const std::string args : {"--label suite=x", "--idempotency-key k1", "--detach"}) {
    std::string out = Kiln("run --local " + file + " --backend reference " + args, &rc);
    EXPECT_EQ(rc, 2) << args << ": " << out;
    EXPECT_NE(out.find("need a server"), std::string::npos) << args << ": " << out;
  }
}

// `kiln jobs --model` takes a name or an id prefix like every model argument (kilnd resolves it);
// `kiln jobs | job | cancel | devices --json` follow docs/cli-json.md: a schema field, numbers as
// numbers, the state as --state spells it, null for what is not set.
TEST_F(CliRunE2E, JobsByModelNameOrPrefixAndJson) {
  Upload("residual_add_relu");
  int rc = -1;
  const std::string model_doc = Kiln("model residual_add_relu --json", &rc, true);
  ASSERT_EQ(rc, 0) << model_doc;
  const auto model = nlohmann::json::parse(model_doc);
  EXPECT_EQ(model["schema"], "kiln.model/1");
  const std::string sha = model["model_id"];
  ASSERT_EQ(sha.size(), 64u);
  EXPECT_TRUE(model["size_bytes"].is_number_integer()) << model_doc;
  std::string job = Kiln("run residual_add_relu --backend reference --label suite=r2 --detach", &rc, true);
  ASSERT_EQ(rc, 0) << job;
  job.pop_back();  // the newline
  std::string out = Kiln("watch " + job, &rc);
  ASSERT_EQ(rc, 0) << out;
  for (const std::string& ref : {std::string("residual_add_relu"), sha.substr(0, 8), sha}) {
    out = Kiln("jobs --model " + ref + " --json", &rc, true);
    ASSERT_EQ(rc, 0) << ref << ": " << out;
    const auto doc = nlohmann::json::parse(out);
    EXPECT_EQ(doc["schema"], "kiln.jobs/1");
    ASSERT_EQ(doc["jobs"].size(), 1u) << ref << ": " << out;
    const auto& j = doc["jobs"][0];
    EXPECT_EQ(j["job_id"], job);
    EXPECT_EQ(j["model_id"], sha);
    EXPECT_EQ(j["state"], "succeeded");
    EXPECT_EQ(j["backend"], "reference");
    EXPECT_EQ(j["labels"]["suite"], "r2");
    EXPECT_TRUE(j["progress"]["layers_total"].is_number_integer()) << out;
    EXPECT_GT(j["progress"]["layers_total"].get<int>(), 0) << out;
    EXPECT_TRUE(j["error"].is_null()) << out;
    EXPECT_TRUE(j["finished"].is_string()) << out;
  }
  out = Kiln("jobs --model residual_add_relu", &rc, true);  // the table, too
  EXPECT_NE(out.find(job), std::string::npos) << out;
  out = Kiln("jobs --model " + std::string(64, 'f'), &rc, true);  // no such model: no jobs, no error
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(out.find(job), std::string::npos) << out;
  for (const std::string cmd : {"job ", "cancel "}) {
    out = Kiln(cmd + job + " --json", &rc, true);
    ASSERT_EQ(rc, 0) << cmd << out;
    const auto doc = nlohmann::json::parse(out);
    EXPECT_EQ(doc["schema"], "kiln.job/1");
    EXPECT_EQ(doc["job_id"], job);
    EXPECT_EQ(doc["state"], "succeeded");  // cancelling a finished job changes nothing
    EXPECT_EQ(doc["attempt"], 1);
  }
  out = Kiln("cancel " + job, &rc, true);  // and the table says so
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(out, job + " SUCCEEDED (already ended: nothing to cancel)\n");
  out = Kiln("devices --json", &rc, true);
  ASSERT_EQ(rc, 0) << out;
  const auto devices = nlohmann::json::parse(out);
  EXPECT_EQ(devices["schema"], "kiln.devices/1");
  ASSERT_EQ(devices["devices"].size(), 2u) << out;
  EXPECT_EQ(devices["devices"][1]["name"], "reference:0");
  EXPECT_GE(devices["devices"][1]["jobs_done"].get<int>(), 1) << out;
  ASSERT_EQ(devices["queues"].size(), 2u) << out;
  EXPECT_TRUE(devices["queues"][0]["capacity"].is_number_integer()) << out;
}

}  // namespace
}  // namespace kiln::testing
