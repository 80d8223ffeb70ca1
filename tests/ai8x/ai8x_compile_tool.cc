// Developer tool (not a test): compiles one ONNX file with the ai8x back end and prints the YAML
// and diagnostics. Usage: ai8x_compile_tool MODEL.onnx CHIP ARCH DATASET [LAYER.KEY=VALUE ...];
// `ai8x_compile_tool --print-pipeline` prints compiler/ai8x/README.md's pass table.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

#include "compiler/ai8x/compile.h"
#include "compiler/ai8x/pipeline.h"
#include "compiler/onnx/loader.h"

int main(int argc, char** argv) {
  if (argc == 2 && std::string(argv[1]) == "--print-pipeline") {  // compiler/ai8x/README.md's pass table
    std::cout << kiln::ai8x::PipelineMarkdownTable();
    return 0;
  }
  if (argc < 5) {
    std::cerr << "usage: ai8x_compile_tool MODEL.onnx CHIP ARCH DATASET [LAYER.KEY=VALUE ...]\n"
                 "       ai8x_compile_tool --print-pipeline\n";
    return 2;
  }
  std::ifstream f(argv[1], std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  auto model = kiln::onnx_fe::LoadModel(ss.str());
  if (!model.ok()) {
    std::cerr << model.status().ToString() << "\n";
    return 2;
  }
  kiln::ai8x::Ai8xOptions opts;
  auto chip = kiln::ai8x::ParseChip(argv[2]);
  if (!chip.ok()) {
    std::cerr << chip.status().ToString() << "\n";
    return 2;
  }
  opts.chip = *chip;
  opts.arch = argv[3];
  if (const char* f = std::getenv("AI8X_INPUT_FORMAT")) {
    auto fmt = kiln::ai8x::ParseInputFormat(f);
    if (!fmt.ok()) return 2;
    opts.input_format = *fmt;
  }
  opts.dataset = argv[4];
  for (int i = 5; i < argc; ++i) {
    std::string s = argv[i];
    size_t dot = s.rfind('.', s.find('='));
    size_t eq = s.find('=');
    if (dot == std::string::npos || eq == std::string::npos) return 2;
    opts.overrides.push_back({s.substr(0, dot), s.substr(dot + 1, eq - dot - 1), s.substr(eq + 1)});
  }
  auto r = kiln::ai8x::CompileAi8x(**model, opts);
  if (!r.ok()) {
    std::cerr << r.status().ToString() << "\n";
    return 2;
  }
  std::cout << r->yaml;
  for (const auto& d : r->diagnostics) {
    std::cerr << kiln::ai8x::SeverityName(d.severity) << " " << d.code << " [" << d.layer << " " << d.layer_name
              << " / " << d.onnx_node << "] " << d.message << "\n";
  }
  if (std::getenv("AI8X_TABLE")) {
    for (const auto& l : r->layers) {
      std::fprintf(stderr, "%3d %-40s %-20s in %4d out %4d procs %016llx out %016llx in_off %05x out_off %05x data %6lld/%6lld kern %5lld bias %4lld\n",
                   l.index, l.name.c_str(), l.op.c_str(), l.in_channels, l.out_channels,
                   (unsigned long long)l.processors, (unsigned long long)l.output_processors, l.in_offset, l.out_offset,
                   (long long)l.data_in_bytes, (long long)l.data_out_bytes, (long long)l.kernel_words, (long long)l.bias_bytes);
    }
  }
  std::cerr << "flags: --device " << kiln::ai8x::GetChipSpec(r->resolved.chip).name;
  for (const auto& fl : r->izer_flags) std::cerr << " " << fl.flag;
  std::cerr << "\n" << (r->ok ? "OK" : "FAILED") << "\n";
  return r->ok ? 0 : 1;
}
