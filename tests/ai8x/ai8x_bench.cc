// Benchmark (not a test): parse + compile time of the reference models, the time of each pass of
// the pipeline (compiler/ai8x/pipeline.h), and per-layer time of the passes on synthetic conv
// chains of N = 100, 1,000, 10,000 layers (chip limits lifted with Ai8xOptions::lift_layer_limit).
// Usage: ai8x_bench [DATA_DIR]   (default: the source tree's tests/data/ai8x)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <yaml-cpp/yaml.h>

#include "compiler/ai8x/compile.h"
#include "compiler/ai8x/passes.h"
#include "compiler/ai8x/pipeline.h"
#include "compiler/onnx/loader.h"

using namespace kiln::ai8x;
using Clock = std::chrono::steady_clock;

static double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

static std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

static Network Chain(int n) {
  Network net;
  net.input_shape = {16, 16, 16};
  int prev = kNetworkInput;
  for (int i = 0; i < n; ++i) {
    Layer l;
    l.id = net.next_id++;
    l.name = "conv" + std::to_string(i);
    l.onnx_nodes = {"/" + l.name + "/Conv"};
    l.op = OpKind::kConv2d;
    l.kernel_h = l.kernel_w = 3;
    l.pad = 1;
    l.inputs = {prev};
    l.in_shape = l.out_shape = {16, 16, 16};
    l.in_channels_w = 16;
    l.weight_count = 16 * 16 * 9;
    l.quantization_known = true;
    net.Append(l);
    Layer a;
    a.id = net.next_id++;
    a.name = l.name + ".activate";
    a.onnx_nodes = {"/" + l.name + "/activate/Relu"};
    a.activation = Activation::kRelu;
    a.inputs = {l.id};
    a.in_shape = a.out_shape = l.out_shape;
    net.Append(a);
    prev = a.id;
  }
  return net;
}

// `ai8x_bench --loop MODEL.onnx N`: parse + compile one model N times (for perf record); prints
// the median and minimum of each phase, release of the model included.
static int Loop(const char* path, int n) {
  const std::string bytes = ReadFile(path);
  Ai8xOptions o;
  o.chip = Chip::kMAX78002;
  std::vector<double> parse, comp, release, total;
  for (int i = 0; i < n; ++i) {
    auto t0 = Clock::now();
    auto model = kiln::onnx_fe::LoadModel(bytes);
    if (!model.ok()) return 1;
    auto t1 = Clock::now();
    if (!CompileAi8x(**model, o).ok()) return 1;
    auto t2 = Clock::now();
    model = kiln::Status(kiln::StatusCode::kCancelled, "released");
    auto t3 = Clock::now();
    parse.push_back(Ms(t1 - t0));
    comp.push_back(Ms(t2 - t1));
    release.push_back(Ms(t3 - t2));
    total.push_back(Ms(t2 - t0));
  }
  for (auto* v : {&parse, &comp, &release, &total}) std::sort(v->begin(), v->end());
  auto med = [](const std::vector<double>& v) { return v[v.size() / 2]; };
  std::printf("median ms: parse %.3f compile %.3f release %.3f parse+compile %.3f (min %.3f)\n", med(parse),
              med(comp), med(release), med(total), total.front());
  return 0;
}

int main(int argc, char** argv) {
  if (argc == 4 && std::string(argv[1]) == "--loop") return Loop(argv[2], std::atoi(argv[3]));
  std::string data = argc > 1 ? argv[1] : std::string(KILN_TEST_DATA) + "/ai8x";
  YAML::Node m = YAML::LoadFile(data + "/models/manifest.json");
  // The seed's create() times (tests/data/ai8x/seed-times.json says how they were measured).
  YAML::Node seed = YAML::LoadFile(data + "/seed-times.json")["models"];
  std::printf("parse + compile per reference model (qat form), median of 15; seed = yamlwriter.create() min\n");
  std::printf("%-30s %9s %10s %9s %9s %9s %8s %7s %6s\n", "model", "parse ms", "compile ms", "total ms", "min ms",
              "seed ms", "seed/kiln", "target", "layers");
  int met = 0, models = 0;
  double worst_ratio = 1e30, mobilenet_ms = -1;
  for (const auto& e : m) {
    std::string form = e["form"].as<std::string>();
    if (form != "qat") continue;
    const std::string name = e["name"].as<std::string>();
    const std::string bytes = ReadFile(data + "/models/" + e["file"].as<std::string>());
    Ai8xOptions o;
    o.chip = *ParseChip(e["device"].as<std::string>());
    o.arch = e["factory"].as<std::string>();
    std::vector<double> parse, comp, total;
    size_t layers = 0;
    for (int rep = 0; rep < 15; ++rep) {
      auto t0 = Clock::now();
      auto model = kiln::onnx_fe::LoadModel(bytes);
      auto t1 = Clock::now();
      if (!model.ok()) return 1;
      auto r = CompileAi8x(**model, o);
      auto t2 = Clock::now();
      if (!r.ok()) return 1;
      layers = r->layers.size();
      parse.push_back(Ms(t1 - t0));
      comp.push_back(Ms(t2 - t1));
      total.push_back(Ms(t2 - t0));
    }
    for (auto* v : {&parse, &comp, &total}) std::sort(v->begin(), v->end());
    const double med = total[total.size() / 2];
    double seed_ms = seed[name] ? seed[name]["min_s"].as<double>() * 1000.0 : -1;
    const double ratio = seed_ms > 0 ? seed_ms / med : 0;
    ++models;
    const bool ok = ratio >= 50.0;
    met += ok ? 1 : 0;
    worst_ratio = std::min(worst_ratio, ratio);
    if (name == "cifar100-ai87mobilenetv2-0.5") mobilenet_ms = med;
    std::printf("%-30s %9.2f %10.3f %9.2f %9.2f %9.1f %8.0fx %7s %6zu\n", name.c_str(), parse[parse.size() / 2],
                comp[comp.size() / 2], med, total.front(), seed_ms, ratio, ok ? ">=50x" : "MISSED", layers);
  }
  std::printf("target 1/50 of the seed: %d of %d models (lowest ratio %.0fx); MobileNetV2-0.5 %.2f ms (target <= 10 ms: %s)\n\n",
              met, models, worst_ratio, mobilenet_ms, mobilenet_ms > 0 && mobilenet_ms <= 10.0 ? "met" : "MISSED");
  {
    // Per pass of the pipeline (compiler/ai8x/pipeline.h) on MobileNetV2-0.5 (the largest
    // reference model), median of 7.
    auto model = kiln::onnx_fe::LoadModel(ReadFile(data + "/models/cifar100-ai87mobilenetv2-0.5.qat.onnx"));
    if (!model.ok()) return 1;
    const auto passes = Ai8xPipeline();
    std::vector<std::vector<double>> t(passes.size());
    for (int rep = 0; rep < 7; ++rep) {
      Network net;
      net.chip = Chip::kMAX78002;
      Ai8xOptions o;
      o.chip = Chip::kMAX78002;
      PassContext ctx(net, o);
      ctx.graph = &(*model)->graph();
      for (size_t k = 0; k < passes.size(); ++k) {
        auto t0 = Clock::now();
        if (!RunPipeline(ctx, passes[k].name, passes[k].name).ok()) return 1;
        t[k].push_back(Ms(Clock::now() - t0));
      }
    }
    std::printf("\nMobileNetV2-0.5 per pass (ms, median of 7):");
    for (size_t k = 0; k < passes.size(); ++k) {
      std::sort(t[k].begin(), t[k].end());
      std::printf(" %.*s %.3f", static_cast<int>(passes[k].name.size()), passes[k].name.data(), t[k][3]);
    }
    std::printf("\n");
  }
  std::printf("\nsynthetic conv+relu chains (passes only, median of 3)\n%8s %12s %14s\n", "N", "total ms", "us per layer");
  for (int n : {100, 1000, 10000}) {
    std::vector<double> t;
    for (int rep = 0; rep < 3; ++rep) {
      Network net = Chain(n);
      Ai8xOptions o;
      o.lift_layer_limit = true;
      auto t0 = Clock::now();
      auto r = CompileAi8xNetwork(std::move(net), o);
      auto t1 = Clock::now();
      if (!r.ok() || r->layers.size() != static_cast<size_t>(n)) return 1;
      t.push_back(Ms(t1 - t0));
    }
    std::sort(t.begin(), t.end());
    std::printf("%8d %12.2f %14.2f\n", n, t[1], t[1] * 1000.0 / n);
  }
  std::printf("\nper pass, us per layer (N = 100 / 1000 / 10000)\n");
  const auto passes = Ai8xPipeline();
  std::vector<std::vector<double>> per(passes.size(), std::vector<double>(3, 0.0));
  int col = 0;
  for (int n : {100, 1000, 10000}) {
    Network net = Chain(n);
    net.lift_limits = true;
    Ai8xOptions o;
    o.lift_layer_limit = true;
    PassContext ctx(net, o);
    for (size_t k = 1; k < passes.size(); ++k) {  // the chain is built already: from CheckWeightOrder
      auto t0 = Clock::now();
      if (!RunPipeline(ctx, passes[k].name, passes[k].name).ok()) return 1;
      per[k][col] = Ms(Clock::now() - t0) * 1000.0 / n;
    }
    ++col;
  }
  for (size_t k = 1; k < passes.size(); ++k) {
    std::printf("%-30.*s %8.2f %8.2f %8.2f\n", static_cast<int>(passes[k].name.size()), passes[k].name.data(), per[k][0],
                per[k][1], per[k][2]);
  }
  return 0;
}
