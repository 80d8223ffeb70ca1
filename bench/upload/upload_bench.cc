// Upload throughput of a 256 MiB model over loopback, beside the physical limit of a durable,
// verified upload measured in the same run: a raw loopback TCP copy of the same bytes that also
// computes SHA-256 and writes + fsyncs them to the same disk. Target: kiln >= 0.5 x the limit.
//
// The client's SHA-256 (needed for the upload header) is computed before timing starts, as the
// raw copy's sender does not hash either.
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>
#include <vector>

#include "common/sha256.h"
#include "kiln/v1/model.grpc.pb.h"
#include "tests/server/kilnd_process.h"
#include "tests/server/onnx_bytes.h"

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Receiver: accept one connection, hash + write every byte, fsync. Sender: write all bytes.
double RawDurableCopy(const std::string& bytes, const fs::path& dir) {
  int ls = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(ls, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  getsockname(ls, reinterpret_cast<sockaddr*>(&addr), &len);
  listen(ls, 1);
  fs::path out = dir / "raw-copy.bin";
  std::string digest;
  auto start = Clock::now();
  std::thread receiver([&] {
    int c = accept(ls, nullptr, nullptr);
    int fd = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    kiln::Sha256 hash;
    std::vector<char> buf(1 << 20);
    ssize_t n;
    while ((n = read(c, buf.data(), buf.size())) > 0) {
      hash.Update(buf.data(), static_cast<size_t>(n));
      ssize_t w = write(fd, buf.data(), static_cast<size_t>(n));
      (void)w;
    }
    fsync(fd);
    close(fd);
    close(c);
    digest = hash.HexDigest();
  });
  int s = socket(AF_INET, SOCK_STREAM, 0);
  connect(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  size_t off = 0;
  while (off < bytes.size()) {
    ssize_t n = write(s, bytes.data() + off, std::min<size_t>(1 << 20, bytes.size() - off));
    if (n <= 0) break;
    off += static_cast<size_t>(n);
  }
  close(s);
  receiver.join();
  double t = Seconds(start, Clock::now());
  close(ls);
  fs::remove(out);
  if (digest != kiln::Sha256Hex(bytes)) std::fprintf(stderr, "raw copy digest mismatch\n");
  return t;
}

double KilnUpload(kiln::v1::ModelService::Stub& stub, const std::string& bytes,
                  const std::string& sha) {
  auto start = Clock::now();
  grpc::ClientContext ctx;
  kiln::v1::UploadModelResponse resp;
  auto writer = stub.UploadModel(&ctx, &resp);
  kiln::v1::UploadModelRequest req;
  req.mutable_header()->set_name("bench");
  req.mutable_header()->set_size_bytes(bytes.size());
  req.mutable_header()->set_sha256(sha);
  writer->Write(req);
  for (size_t off = 0; off < bytes.size(); off += 1 << 20) {
    req.set_chunk(bytes.data() + off, std::min<size_t>(1 << 20, bytes.size() - off));
    if (!writer->Write(req)) break;
  }
  writer->WritesDone();
  grpc::Status st = writer->Finish();
  double t = Seconds(start, Clock::now());
  if (!st.ok()) {
    std::fprintf(stderr, "upload failed: %s\n", st.error_message().c_str());
    return -1;
  }
  grpc::ClientContext dctx;
  kiln::v1::DeleteModelRequest del;
  del.set_model_id(resp.model().model_id());
  kiln::v1::DeleteModelResponse dresp;
  stub.DeleteModel(&dctx, del, &dresp);
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  size_t mib = argc > 1 ? std::stoul(argv[1]) : 256;
  int reps = argc > 2 ? std::stoi(argv[2]) : 3;
  fs::path dir = fs::path(KILN_BENCH_DIR) / "upload-bench";
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::string bytes = kiln::testing::MakeOnnxBytes(mib << 20);
  std::string sha = kiln::Sha256Hex(bytes);
  double size_mib = bytes.size() / 1048576.0;

  kiln::testing::KilndProcess kilnd(KILND_BINARY,
                                    {"--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
                                     "--data-dir", (dir / "store").string(), "--log-level", "warn"},
                                    (dir / "kilnd.log").string());
  grpc::ChannelArguments args;
  auto channel = grpc::CreateCustomChannel(kilnd.grpc_address(), grpc::InsecureChannelCredentials(), args);
  auto stub = kiln::v1::ModelService::NewStub(channel);

  double best_raw = 1e9, best_kiln = 1e9;
  for (int r = 0; r < reps; ++r) {
    best_raw = std::min(best_raw, RawDurableCopy(bytes, dir));
    double k = KilnUpload(*stub, bytes, sha);
    if (k < 0) return 1;
    best_kiln = std::min(best_kiln, k);
  }
  kilnd.Stop();
  fs::remove_all(dir);
  double raw_mibs = size_mib / best_raw, kiln_mibs = size_mib / best_kiln;
  std::printf("model size                         %.0f MiB (best of %d)\n", size_mib, reps);
  std::printf("physical limit (tcp+sha256+fsync)  %.1f MiB/s (%.3f s)\n", raw_mibs, best_raw);
  std::printf("kiln UploadModel                   %.1f MiB/s (%.3f s)\n", kiln_mibs, best_kiln);
  std::printf("ratio kiln/limit                   %.2f (target >= 0.50) %s\n", kiln_mibs / raw_mibs,
              kiln_mibs / raw_mibs >= 0.5 ? "PASS" : "BELOW TARGET");
  return 0;
}
