// Runs the RPC request fuzz target (rpc_request_fuzzer.cc) without libFuzzer, in every build:
//   rpc_fuzz_replay [--seed S] [--runs N] [--max-len L] <file-or-dir>...
// replays the given inputs, then N generated ones (splitmix64 from S, lengths 2..L) — a fixed
// structured-generation batch under ctest. Exits 1 when nothing ran, or when N > 0 and one of the
// fuzzed request messages received no input.
//   rpc_fuzz_replay --check-coverage <proto/kiln/v1>
// the static check that no RPC is forgotten: every *.proto file in that directory must be linked
// in (the generated descriptor pool knows it as kiln/v1/<file>), and every method of every
// service it declares must take a request message that the fuzzer dispatches to. Exits 1 with the
// missing methods otherwise.
#include <google/protobuf/descriptor.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tests/fuzz/rpc_request_fuzzer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

namespace fs = std::filesystem;

int CheckCoverage(const fs::path& proto_dir) {
  namespace pb = google::protobuf;
  const std::vector<std::string> fuzzed = KilnFuzzedRequestMessages();
  int files = 0, methods = 0, missing = 0;
  for (const auto& e : fs::directory_iterator(proto_dir)) {
    if (e.path().extension() != ".proto") continue;
    ++files;
    const std::string name = "kiln/v1/" + e.path().filename().string();
    const pb::FileDescriptor* file = pb::DescriptorPool::generated_pool()->FindFileByName(name);
    if (file == nullptr) {
      std::fprintf(stderr, "rpc_fuzz_replay: %s is not linked into the fuzzer: include its .pb.h in "
                   "rpc_request_fuzzer.cc and add its requests to Rows()\n", name.c_str());
      ++missing;
      continue;
    }
    for (int s = 0; s < file->service_count(); ++s) {
      const pb::ServiceDescriptor* service = file->service(s);
      for (int m = 0; m < service->method_count(); ++m) {
        const pb::MethodDescriptor* method = service->method(m);
        ++methods;
        const std::string& request = method->input_type()->full_name();
        if (std::find(fuzzed.begin(), fuzzed.end(), request) == fuzzed.end()) {
          std::fprintf(stderr, "rpc_fuzz_replay: %s takes %s, which rpc_request_fuzzer.cc Rows() does not fuzz\n",
                       method->full_name().c_str(), request.c_str());
          ++missing;
        }
      }
    }
  }
  std::printf("rpc_fuzz_replay --check-coverage: %d proto files, %d methods, %zu fuzzed request messages, %d missing\n",
              files, methods, fuzzed.size(), missing);
  return files > 0 && methods > 0 && missing == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "--check-coverage") == 0) return CheckCoverage(argv[2]);
  uint64_t seed = 1, runs = 0, max_len = 512;
  std::vector<fs::path> files;
  for (int i = 1; i < argc; ++i) {
    auto num = [&](uint64_t* out) { *out = i + 1 < argc ? std::strtoull(argv[++i], nullptr, 10) : 0; };
    if (std::strcmp(argv[i], "--seed") == 0) {
      num(&seed);
    } else if (std::strcmp(argv[i], "--runs") == 0) {
      num(&runs);
    } else if (std::strcmp(argv[i], "--max-len") == 0) {
      num(&max_len);
    } else if (fs::is_directory(argv[i])) {
      for (const auto& e : fs::recursive_directory_iterator(argv[i])) {
        if (e.is_regular_file()) files.push_back(e.path());
      }
    } else if (fs::is_regular_file(argv[i])) {
      files.push_back(argv[i]);
    }
  }
  size_t done = 0;
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    ++done;
  }
  uint64_t s = seed;
  auto next = [&s] {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  std::vector<uint8_t> buf;
  for (uint64_t r = 0; r < runs; ++r) {
    buf.resize(2 + next() % (max_len > 2 ? max_len - 1 : 1));
    for (auto& b : buf) b = static_cast<uint8_t>(next());
    buf[1] &= 0xfe;  // generated inputs use the structured way; the corpus covers raw bytes
    LLVMFuzzerTestOneInput(buf.data(), buf.size());
    ++done;
  }
  std::printf("rpc_fuzz_replay: %zu inputs without a crash (seed %llu)\n", done, static_cast<unsigned long long>(seed));
  const std::vector<std::string> fuzzed = KilnFuzzedRequestMessages();
  bool starved = false;
  for (size_t i = 0; i < fuzzed.size(); ++i) {
    uint64_t n = g_kiln_fuzz_row_inputs[i];
    if (i == 0) {  // the spare indexes go to the first message
      for (size_t j = fuzzed.size(); j < g_kiln_fuzz_row_inputs.size(); ++j) n += g_kiln_fuzz_row_inputs[j];
    }
    std::printf("  %-32s %llu inputs\n", fuzzed[i].c_str(), static_cast<unsigned long long>(n));
    if (runs > 0 && n == 0) {
      std::fprintf(stderr, "rpc_fuzz_replay: %s received no input\n", fuzzed[i].c_str());
      starved = true;
    }
  }
  return done > 0 && !starved ? 0 : 1;
}
