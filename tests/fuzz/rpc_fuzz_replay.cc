// Runs the RPC request fuzz target (rpc_request_fuzzer.cc) without libFuzzer, in every build:
//   rpc_fuzz_replay [--seed S] [--runs N] [--max-len L] <file-or-dir>...
// replays the given inputs, then N generated ones (splitmix64 from S, lengths 2..L) — a fixed
// structured-generation batch under ctest. Exits 1 when nothing ran.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
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
  return done > 0 ? 0 : 1;
}
