// Benchmark: kiln::onnx_fe::LoadModel on a ~100 MB model (42 Conv 256->256 3x3 layers, fp32
// raw_data weights) against a bare onnx::ModelProto::ParseFromArray of the same bytes, measured
// side by side in one run. Target (issue 3): LoadModel <= 2x the bare parse.
// After the benchmarks it prints "ratio load/parse = X" and exits 1 when X > 2.
//   ./onnx_load_bench [--benchmark_min_time=...]   (KILN_BENCH_LAYERS=n for a smaller model)
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "compiler/onnx/loader.h"
#include "onnx/onnx_pb.h"
#include "tests/support/onnx_model_builder.h"

namespace {

const std::string& ModelBytes() {
  static const std::string bytes = [] {
    int layers = 42;  // 42 x 256*256*9*4 B = 99.1 MB of weights
    if (const char* env = std::getenv("KILN_BENCH_LAYERS")) layers = std::atoi(env);
    constexpr int C = 256;
    kiln::testing::OnnxModelBuilder b(13);
    b.Input("x", onnx::TensorProto::FLOAT, {1, C, 8, 8});
    const auto w = kiln::testing::RandomFloats(static_cast<size_t>(C) * C * 9, 42);
    std::string prev = "x";
    for (int i = 0; i < layers; ++i) {
      const std::string wn = "w" + std::to_string(i), c = "c" + std::to_string(i), r = "r" + std::to_string(i);
      b.FloatInitializer(wn, {C, C, 3, 3}, w);
      auto& conv = b.Node("Conv", {prev, wn}, {c}, "conv" + std::to_string(i));
      kiln::testing::SetInts(conv, "pads", {1, 1, 1, 1});
      b.Node("Relu", {c}, {r}, "relu" + std::to_string(i));
      prev = r;
    }
    b.Output(prev);
    return b.Serialize();
  }();
  return bytes;
}

void BM_ProtobufParse(benchmark::State& state) {
  const std::string& bytes = ModelBytes();
  for (auto _ : state) {
    onnx::ModelProto m;
    if (!m.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) state.SkipWithError("parse failed");
    benchmark::DoNotOptimize(m.graph().node_size());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes.size()));
}

void BM_LoadModel(benchmark::State& state) {
  const std::string& bytes = ModelBytes();
  for (auto _ : state) {
    auto m = kiln::onnx_fe::LoadModel(bytes);
    if (!m.ok()) state.SkipWithError(m.status().ToString().c_str());
    benchmark::DoNotOptimize(m);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes.size()));
}

BENCHMARK(BM_ProtobufParse)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_LoadModel)->Unit(benchmark::kMillisecond)->UseRealTime();

// Console output plus the per-iteration real time of each benchmark, for the ratio.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) {
      if (r.run_type == Run::RT_Iteration && r.iterations > 0) {
        seconds[r.benchmark_name()] = r.real_accumulated_time / static_cast<double>(r.iterations);
      }
    }
    ConsoleReporter::ReportRuns(runs);
  }
  std::map<std::string, double> seconds;
};

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  std::printf("model: %.1f MB\n", static_cast<double>(ModelBytes().size()) / 1e6);
  RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  const auto parse = reporter.seconds.find("BM_ProtobufParse/real_time");
  const auto load = reporter.seconds.find("BM_LoadModel/real_time");
  if (parse == reporter.seconds.end() || load == reporter.seconds.end()) return 0;  // filtered run
  const double ratio = load->second / parse->second;
  std::printf("ratio load/parse = %.2f (parse %.1f ms, load %.1f ms; target <= 2.00)\n", ratio, parse->second * 1e3,
              load->second * 1e3);
  return ratio <= 2.0 ? 0 : 1;
}
