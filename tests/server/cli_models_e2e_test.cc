// `kiln` against a real kilnd: model arguments (no such file, short id prefixes,
// stored bytes never sent twice) and `kiln compile` (--arch from the export name or required,
// --json, the resource table, the izer command line, the bit-width warning after overrides).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "common/sha256.h"
#include "tests/server/kilnd_process.h"
#include "tests/server/kilnd_test_util.h"
#include "tests/server/onnx_bytes.h"

namespace fs = std::filesystem;

namespace kiln::testing {
namespace {

class CliModelsE2E : public KilndTest {
 protected:
  void SetUp() override {
    KilndTest::SetUp();
    k_ = StartKilnd();
  }
  void TearDown() override {
    if (k_) {
      EXPECT_EQ(k_->Stop(), 0);
    }
    KilndTest::TearDown();
  }

  // `kiln --server ADDR ARGS`; stdout only, or stdout and stderr together.
  std::string Kiln(const std::string& args, int* rc, bool with_stderr = true) {
    std::string cmd = std::string(KILN_BINARY) + " --server " + k_->grpc_address() + " " + args +
                      (with_stderr ? " 2>&1" : " 2>/dev/null");
    return RunShell(cmd, rc);
  }

  double UploadedBytes() { return ScrapeMetrics(k_->metrics_address())["kiln_upload_bytes_total"]; }

  // A copy of a reference export in the test's directory.
  std::string Export(const std::string& file, const std::string& as = "") {
    std::string path = (dir_ / (as.empty() ? file : as)).string();
    std::ofstream(path, std::ios::binary) << ReadFileBytes(std::string(KILN_TEST_DATA) + "/ai8x/models/" + file);
    return path;
  }

  std::unique_ptr<KilndProcess> k_;
};

bool Has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// A path that is not there is "no such file", not a lookup of a model by that name.
TEST_F(CliModelsE2E, MissingFileIsNoSuchFile) {
  int rc = -1;
  for (const std::string cmd : {"compile nosuchfile.onnx --arch ai85net5", "compile --local nosuchfile.onnx --arch ai85net5",
                                "run nosuchfile.onnx", "upload nosuchfile.onnx"}) {
    std::string out = Kiln(cmd, &rc);
    EXPECT_EQ(rc, 1) << cmd << ": " << out;
    EXPECT_TRUE(Has(out, "no such file: nosuchfile.onnx")) << cmd << ": " << out;
    EXPECT_FALSE(Has(out, "no model with id or name")) << cmd << ": " << out;
  }
  std::string out = Kiln("compile some/dir/model --arch ai85net5", &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_TRUE(Has(out, "no such file: some/dir/model")) << out;
  // Not path-like: a stored model's name, looked up by the server as before.
  out = Kiln("compile nosuchmodel --arch ai85net5", &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_TRUE(Has(out, "NOT_FOUND")) << out;
}

// The name and the sha256 are checked before any byte is streamed: stored bytes are named from
// the header alone (a new name) or not touched at all (the same name).
TEST_F(CliModelsE2E, StoredBytesAreNeverSentAgain) {
  const std::string bytes = MakeOnnxBytes(200000);
  const std::string sha = Sha256Hex(bytes);
  const std::string file = (dir_ / "tiny.onnx").string();
  std::ofstream(file, std::ios::binary) << bytes;
  int rc = -1;
  std::string out = Kiln("upload " + file, &rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "upload 100%")) << out;
  const double sent = UploadedBytes();
  EXPECT_EQ(sent, static_cast<double>(bytes.size()));

  out = Kiln("upload " + file, &rc);  // same name, same bytes
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "already stored as 'tiny'")) << out;
  EXPECT_FALSE(Has(out, "upload 100%")) << out;
  EXPECT_TRUE(Has(out, sha + "\n")) << out;  // the id on stdout, as after an upload

  out = Kiln("upload " + file + " --name tiny2", &rc);  // a new name for stored bytes
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "nothing re-sent")) << out;
  EXPECT_FALSE(Has(out, "upload 100%")) << out;
  EXPECT_EQ(UploadedBytes(), sent);
  out = Kiln("model tiny2", &rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "model_id: " + sha)) << out;
  EXPECT_TRUE(Has(out, "names: tiny, tiny2")) << out;

  // `kiln compile FILE` / `kiln run FILE` store the file the same way.
  const std::string qat = Export("mnist-ai85net5.qat.onnx");
  out = Kiln("compile " + qat + " -o " + (dir_ / "a.yaml").string(), &rc);
  ASSERT_EQ(rc, 0) << out;
  const double after_first = UploadedBytes();
  EXPECT_GT(after_first, sent);
  out = Kiln("compile " + qat + " -o " + (dir_ / "b.yaml").string(), &rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "nothing sent")) << out;
  out = Kiln("run " + file + " --skip-reference", &rc);
  EXPECT_TRUE(Has(out, "already stored as 'tiny'")) << out;
  EXPECT_EQ(UploadedBytes(), after_first);

  // A bad name is refused before any byte goes out.
  out = Kiln("upload " + file + " --name .hidden", &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_TRUE(Has(out, "INVALID_ARGUMENT")) << out;
  EXPECT_EQ(UploadedBytes(), after_first);
}

// A unique prefix of 8+ hex digits names the model in every command that takes one.
TEST_F(CliModelsE2E, ShortIdPrefixResolvesOnTheServer) {
  const std::string qat = Export("mnist-ai85net5.qat.onnx");
  const std::string sha = Sha256Hex(ReadFileBytes(qat));
  int rc = -1;
  std::string out = Kiln("upload " + qat, &rc);
  ASSERT_EQ(rc, 0) << out;
  out = Kiln("model " + sha.substr(0, 8), &rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "model_id: " + sha)) << out;
  out = Kiln("model " + sha.substr(0, 7), &rc);  // too short to be a prefix
  EXPECT_EQ(rc, 1);
  EXPECT_TRUE(Has(out, "NOT_FOUND")) << out;
  // compile by prefix: --arch comes from the stored model's name.
  out = Kiln("compile " + sha.substr(0, 10) + " --dataset MNIST", &rc, /*with_stderr=*/false);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "\narch: ai85net5\n")) << out;
  // run by prefix (SubmitRun resolves it too).
  out = Kiln("run " + sha.substr(0, 9) + " --backend reference", &rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_FALSE(Has(out, "NOT_FOUND")) << out;
  out = Kiln("rm " + sha.substr(0, 12), &rc);
  EXPECT_EQ(rc, 0) << out;
  out = Kiln("models", &rc);
  EXPECT_FALSE(Has(out, sha)) << out;
}

// `kiln compile NAME` of a model that is not stored is NOT_FOUND (status 1), not a missing
// --arch; an -o that cannot be written is status 2 before anything is uploaded or compiled.
TEST_F(CliModelsE2E, CompileChecksTheModelAndOutputFirst) {
  int rc = -1;
  std::string out = Kiln("compile nosuchmodel", &rc);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_TRUE(Has(out, "NOT_FOUND")) << out;
  EXPECT_FALSE(Has(out, "--arch is required")) << out;
  const std::string qat = Export("mnist-ai85net5.qat.onnx");
  for (const std::string& o : {(dir_ / "no-dir" / "net.yaml").string(), dir_.string()}) {
    out = Kiln("compile " + qat + " --dataset MNIST -o " + o, &rc);
    EXPECT_EQ(rc, 2) << o << ": " << out;
    EXPECT_TRUE(Has(out, "-o " + o)) << out;
    EXPECT_FALSE(Has(out, "upload")) << out;
  }
  EXPECT_EQ(UploadedBytes(), 0.0);
}

// `kiln models --json` / `kiln model --json` (docs/cli-json.md); a failed `kiln models` prints
// the error alone, no table header.
TEST_F(CliModelsE2E, ModelsJson) {
  const std::string qat = Export("mnist-ai85net5.qat.onnx");
  const std::string sha = Sha256Hex(ReadFileBytes(qat));
  int rc = -1;
  std::string out = Kiln("upload " + qat + " --name net5", &rc);
  ASSERT_EQ(rc, 0) << out;
  out = Kiln("models --json", &rc, /*with_stderr=*/false);
  ASSERT_EQ(rc, 0) << out;
  auto doc = nlohmann::json::parse(out);
  EXPECT_EQ(doc["schema"], "kiln.models/1");
  ASSERT_EQ(doc["models"].size(), 1u) << out;
  EXPECT_EQ(doc["models"][0]["model_id"], sha);
  EXPECT_EQ(doc["models"][0]["names"], nlohmann::json::array({"net5"}));
  EXPECT_EQ(doc["models"][0]["size_bytes"], ReadFileBytes(qat).size());
  EXPECT_EQ(doc["models"][0]["opset"], 14);
  EXPECT_TRUE(doc["models"][0]["created_unix_seconds"].is_number_integer()) << out;
  out = Kiln("model " + sha.substr(0, 8) + " --json", &rc, false);
  ASSERT_EQ(rc, 0) << out;
  doc = nlohmann::json::parse(out);
  EXPECT_EQ(doc["schema"], "kiln.model/1");
  EXPECT_EQ(doc["model_id"], sha);
  EXPECT_EQ(doc["inputs"].size(), 1u) << out;
  const std::string cmd = std::string(KILN_BINARY) + " --server 127.0.0.1:1 --timeout 5 models 2>/dev/null";
  rc = -1;
  const std::string stdout_text = RunShell(cmd, &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_EQ(stdout_text, "");
}

// --arch: from the export name when it names a known factory, else required (before anything
// is uploaded); --json; the table's resources; the whole izer command line.
TEST_F(CliModelsE2E, CompileArchJsonTableAndIzerCommand) {
  int rc = -1;
  const std::string odd = Export("mnist-ai85net5.qat.onnx", "mnist-mynet.qat.onnx");
  std::string out = Kiln("compile " + odd + " --device MAX78000", &rc);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_TRUE(Has(out, "--arch is required")) << out;
  out = Kiln("compile --local " + odd, &rc);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_TRUE(Has(out, "--arch is required")) << out;
  EXPECT_FALSE(Has(Kiln("models", &rc), "mnist-mynet")) << "refused before the upload";

  const std::string qat = Export("mnist-ai85net5.qat.onnx");
  const std::string yaml = (dir_ / "out dir" / "net.yaml").string();
  fs::create_directories(dir_ / "out dir");
  out = Kiln("compile " + qat + " --device MAX78000 --dataset MNIST --json -o '" + yaml + "'", &rc, false);
  ASSERT_EQ(rc, 0) << out;
  nlohmann::json j = nlohmann::json::parse(out);
  EXPECT_EQ(j["arch"], "ai85net5");
  EXPECT_EQ(j["device"], "MAX78000");
  EXPECT_EQ(j["dataset"], "MNIST");
  EXPECT_TRUE(j["input_format"] == "CHW" || j["input_format"] == "HWC") << j["input_format"];
  EXPECT_EQ(j["ok"], true);
  EXPECT_EQ(j["output"], yaml);
  ASSERT_GE(j["layers"].size(), 4u);
  EXPECT_EQ(j["layers"][0]["in_shape"], nlohmann::json::parse("[1, 28, 28]")) << j["layers"][0];
  EXPECT_GT(j["layers"][0]["kernel_words"].get<int64_t>(), 0);
  EXPECT_GE(j["layers"][0]["data_peak_bytes"].get<int64_t>(), j["layers"][0]["data_in_bytes"].get<int64_t>());
  EXPECT_GT(j["resources"]["data_bytes_peak"].get<int64_t>(), 0);
  int64_t peak = 0;
  for (const auto& l : j["layers"]) peak = std::max(peak, l["data_peak_bytes"].get<int64_t>());
  EXPECT_EQ(peak, j["resources"]["data_bytes_peak"].get<int64_t>());
  const auto& cmd = j["izer_command"];
  ASSERT_GE(cmd.size(), 9u) << cmd;
  EXPECT_EQ(cmd[0], "ai8xize.py");
  auto after = [&cmd](const std::string& flag) {
    for (size_t i = 0; i + 1 < cmd.size(); ++i) {
      if (cmd[i] == flag) return cmd[i + 1].get<std::string>();
    }
    return std::string("(missing)");
  };
  EXPECT_EQ(after("--device"), "MAX78000");
  EXPECT_EQ(after("--config-file"), yaml);
  EXPECT_NE(after("--checkpoint-file"), "(missing)");
  EXPECT_TRUE(Has(ReadFileBytes(yaml), "\narch: ai85net5\n"));

  // The human form: the inferred arch said, the resource columns, the command quoted for a shell.
  out = Kiln("compile " + qat + " --device MAX78000 --dataset MNIST --table -o '" + yaml + "'", &rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "note: --arch ai85net5 from the export name 'mnist-ai85net5.qat.onnx'")) << out;
  EXPECT_TRUE(Has(out, "DATA_PEAK")) << out;
  EXPECT_TRUE(Has(out, "resources: ")) << out;
  EXPECT_TRUE(Has(out, "ai8xize.py --device MAX78000 --config-file '" + yaml + "' --checkpoint-file ")) << out;
}

// A float export carries no bit widths: the warning says so until --set gives every weight layer one.
TEST_F(CliModelsE2E, BitWidthWarningGoesOnceEveryLayerHasAQuantization) {
  const std::string fl = Export("mnist-ai85net5.float.onnx");
  int rc = -1;
  std::string out = Kiln("compile " + fl + " --dataset MNIST --json", &rc, false);
  ASSERT_EQ(rc, 0) << out;
  nlohmann::json j = nlohmann::json::parse(out);
  bool warned = false;
  for (const auto& d : j["diagnostics"]) warned |= d["code"] == "AI8X_BITS_NOT_DERIVED";
  EXPECT_TRUE(warned) << j["diagnostics"];
  // The izer reads the float export's weights itself: it is the checkpoint.
  bool onnx_checkpoint = false;
  for (size_t i = 0; i + 1 < j["izer_command"].size(); ++i) {
    onnx_checkpoint |= j["izer_command"][i] == "--checkpoint-file" && j["izer_command"][i + 1] == fl;
  }
  EXPECT_TRUE(onnx_checkpoint) << j["izer_command"];
  std::string sets;
  for (const auto& l : j["layers"]) {
    if (l["kernel_words"].get<int64_t>() > 0) sets += " --set " + l["name"].get<std::string>() + ".quantization=8";
  }
  ASSERT_FALSE(sets.empty());
  out = Kiln("compile " + fl + " --dataset MNIST" + sets, &rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_FALSE(Has(out, "AI8X_BITS_NOT_DERIVED")) << out;
}

}  // namespace
}  // namespace kiln::testing
