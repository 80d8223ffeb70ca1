// Shared pieces of the end-to-end tests that drive a real kilnd: a fixture with a per-test temp
// directory (kilnd's log printed on failure), chunked upload, /metrics scraping, file reading.
#pragma once

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>

#include "common/sha256.h"
#include "kiln/v1/model.grpc.pb.h"
#include "tests/server/kilnd_process.h"

namespace kiln::testing {

/// Whole file as bytes ("" when unreadable).
inline std::string ReadFileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// UploadModel in 1 MiB chunks; `token` adds the bearer header.
inline grpc::Status UploadBytes(kiln::v1::ModelService::Stub& stub, const std::string& name,
                                const std::string& bytes, kiln::v1::UploadModelResponse* resp,
                                const std::string& token = "") {
  grpc::ClientContext ctx;
  if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
  auto writer = stub.UploadModel(&ctx, resp);
  kiln::v1::UploadModelRequest req;
  req.mutable_header()->set_name(name);
  req.mutable_header()->set_size_bytes(bytes.size());
  req.mutable_header()->set_sha256(Sha256Hex(bytes));
  writer->Write(req);
  for (size_t off = 0; off < bytes.size(); off += 1 << 20) {
    req.set_chunk(bytes.substr(off, 1 << 20));
    if (!writer->Write(req)) break;
  }
  writer->WritesDone();
  return writer->Finish();
}

/// Runs `command` through /bin/sh: its stdout (fold stderr in with `2>&1` in `command`), its exit
/// status in *rc (-1 when the shell could not be started). The CLI tests' one way to run `kiln`.
inline std::string RunShell(const std::string& command, int* rc) {
  std::string out;
  FILE* p = popen(command.c_str(), "r");
  if (p == nullptr) {
    *rc = -1;
    return out;
  }
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  *rc = WEXITSTATUS(pclose(p));
  return out;
}

/// GET /metrics parsed into "name{labels}" -> value.
inline std::map<std::string, double> ScrapeMetrics(const std::string& metrics_address) {
  std::map<std::string, double> out;
  std::istringstream in(HttpGet(metrics_address, "/metrics"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    auto sp = line.rfind(' ');
    out[line.substr(0, sp)] = std::stod(line.substr(sp + 1));
  }
  return out;
}

/// Fixture: dir_ is a fresh temp directory per test; kilnd's log (dir_/kilnd.log) is printed
/// when the test fails or KILN_TEST_LOGS is set.
class KilndTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("kiln-test-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    if (HasFailure() || std::getenv("KILN_TEST_LOGS")) {
      // Every process's log: kilnd.log for StartKilnd, NAME.log for the farm tests' replicas and
      // workers.
      std::error_code ec;  // a test that never made dir_ has no logs
      for (const auto& e : std::filesystem::directory_iterator(dir_, ec)) {
        if (e.path().extension() != ".log") continue;
        std::string all = ReadFileBytes(e.path().string());
        std::cerr << "---- " << e.path().filename().string() << " (tail) ----\n"
                  << (all.size() > 8000 ? all.substr(all.size() - 8000) : all) << "\n";
      }
    }
    std::filesystem::remove_all(dir_);
  }

  /// Starts kilnd on ephemeral loopback ports (gRPC on `listen` when given: a restart on the
  /// same address) with its store in dir_/data, plus `extra` flags.
  std::unique_ptr<KilndProcess> StartKilnd(const std::vector<std::string>& extra = {},
                                           const std::string& listen = "127.0.0.1:0") {
    std::vector<std::string> args = {"--listen", listen, "--metrics-listen", "127.0.0.1:0",
                                     "--data-dir", (dir_ / "data").string(),
                                     "--shutdown-grace", "2"};
    args.insert(args.end(), extra.begin(), extra.end());
    return std::make_unique<KilndProcess>(KILND_BINARY, args, (dir_ / "kilnd.log").string());
  }

  std::filesystem::path dir_;
};

}  // namespace kiln::testing
