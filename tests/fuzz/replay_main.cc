// Replays fuzz inputs through LLVMFuzzerTestOneInput without libFuzzer (any compiler), so the
// corpus is a regression test in every build: onnx_fuzz_corpus_replay <file-or-dir>...
// Exits 1 when no input was found (a replay that tests nothing must not pass).
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  std::vector<fs::path> files;
  for (int i = 1; i < argc; ++i) {
    const fs::path p(argv[i]);
    if (fs::is_directory(p)) {
      for (const auto& e : fs::recursive_directory_iterator(p)) {
        if (e.is_regular_file()) files.push_back(e.path());
      }
    } else if (fs::is_regular_file(p)) {
      files.push_back(p);
    }
  }
  size_t replayed = 0;
  for (const auto& f : files) {
    if (fs::file_size(f) > (1u << 20)) continue;  // the fuzz target caps inputs at 1 MiB anyway
    std::ifstream in(f, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    ++replayed;
  }
  std::printf("replayed %zu inputs without a crash\n", replayed);
  return replayed > 0 ? 0 : 1;
}
