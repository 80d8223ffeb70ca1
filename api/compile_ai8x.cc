#include "api/compile_ai8x.h"

#include <algorithm>
#include <cctype>
#include <chrono>

#include "common/sha256.h"
#include "compiler/ai8x/compile.h"
#include "compiler/onnx/loader.h"
#include "api/convert.h"
#include "api/models.h"
#include "api/version.h"

namespace kiln::api {
namespace {

ai8x::InputFormat FromProto(kiln::v1::InputFormat f) {
  switch (f) {
    case kiln::v1::INPUT_FORMAT_HWC: return ai8x::InputFormat::kHWC;
    case kiln::v1::INPUT_FORMAT_CHW: return ai8x::InputFormat::kCHW;
    default: return ai8x::InputFormat::kAuto;
  }
}

kiln::v1::InputFormat ToProto(ai8x::InputFormat f) {
  switch (f) {
    case ai8x::InputFormat::kHWC: return kiln::v1::INPUT_FORMAT_HWC;
    case ai8x::InputFormat::kCHW: return kiln::v1::INPUT_FORMAT_CHW;
    default: return kiln::v1::INPUT_FORMAT_AUTO;
  }
}

kiln::v1::Severity ToProto(ai8x::Severity s) {
  switch (s) {
    case ai8x::Severity::kError: return kiln::v1::ERROR;
    case ai8x::Severity::kWarning: return kiln::v1::WARNING;
    default: return kiln::v1::INFO;
  }
}

void ToProto(const ai8x::Ai8xOptions& o, kiln::v1::CompileAi8xOptions* out) {
  out->set_device(o.chip == ai8x::Chip::kMAX78002 ? kiln::v1::MAX78002 : kiln::v1::MAX78000);
  out->set_input_format(ToProto(o.input_format));
  out->set_use_fifos(o.use_fifos);
  out->set_move_l0(o.move_l0);
  out->set_arch(o.arch);
  out->set_dataset(o.dataset);
  for (const auto& ov : o.overrides) {
    auto* p = out->add_overrides();
    p->set_layer(ov.layer);
    p->set_key(ov.key);
    p->set_value(ov.value);
  }
  out->set_verbose(o.verbose);
}

}  // namespace

Result<kiln::v1::CompileAi8xResponse> CompileAi8x(std::string_view bytes,
                                                       const std::string& model_name,
                                                       const kiln::v1::CompileAi8xOptions& options,
                                                       const std::string& model_sha256) {
  KILN_RETURN_IF_ERROR(CheckEnumValues(options, "options"));
  auto start = std::chrono::steady_clock::now();
  onnx_fe::LoadOptions load;
  load.model_name = model_name;
  load.bind_symbols = {};
  auto model = onnx_fe::LoadModel(bytes, load);
  if (!model.ok()) return model.status();

  ai8x::Ai8xOptions opts;
  opts.chip = options.device() == kiln::v1::MAX78002 ? ai8x::Chip::kMAX78002
                                                       : ai8x::Chip::kMAX78000;
  opts.input_format = FromProto(options.input_format());
  opts.use_fifos = options.use_fifos();
  opts.move_l0 = options.move_l0();
  opts.arch = options.arch();
  opts.dataset = options.dataset();
  opts.default_arch = model_name;
  for (const auto& ov : options.overrides()) opts.overrides.push_back({ov.layer(), ov.key(), ov.value()});
  opts.verbose = options.verbose();

  auto result = ai8x::CompileAi8x(**model, opts);
  if (!result.ok()) return result.status().WithContext("model '" + model_name + "'");

  kiln::v1::CompileAi8xResponse resp;
  resp.set_ok(result->ok);
  resp.set_yaml(result->yaml);
  for (const auto& l : result->layers) {
    auto* p = resp.add_layers();
    p->set_index(l.index);
    p->set_name(l.name);
    p->set_op(l.op);
    for (const auto& n : l.onnx_nodes) p->add_onnx_nodes(n);
    p->set_in_channels(l.in_channels);
    p->set_out_channels(l.out_channels);
    p->set_in_shape(l.in_shape);
    p->set_out_shape(l.out_shape);
    p->set_processors(l.processors);
    p->set_output_processors(l.output_processors);
    p->set_in_offset(l.in_offset);
    p->set_out_offset(l.out_offset);
    p->set_data_in_bytes(l.data_in_bytes);
    p->set_data_out_bytes(l.data_out_bytes);
    p->set_kernel_words(l.kernel_words);
    p->set_bias_bytes(l.bias_bytes);
    p->set_streaming(l.streaming);
  }
  for (const auto& d : result->diagnostics) {
    auto* p = resp.add_diagnostics();
    p->set_severity(ToProto(d.severity));
    p->set_code(d.code);
    p->set_layer(d.layer);
    p->set_layer_name(d.layer_name);
    p->set_onnx_node(d.onnx_node);
    p->set_message(d.message);
  }
  const auto& r = result->resources;
  auto* res = resp.mutable_resources();
  res->set_layers(r.layers);
  res->set_max_layers(r.max_layers);
  res->set_max_kernel_words_used(r.max_kernel_words_used);
  res->set_kernel_words_per_processor(r.kernel_words_per_processor);
  res->set_bias_bytes_used(r.bias_bytes_used);
  res->set_bias_bytes_capacity(r.bias_bytes_capacity);
  res->set_data_bytes_peak(r.data_bytes_peak);
  res->set_data_instance_bytes(r.data_instance_bytes);
  res->set_streaming_layers(r.streaming_layers);
  resp.add_izer_flags("--device");
  resp.add_izer_flags(options.device() == kiln::v1::MAX78002 ? "MAX78002" : "MAX78000");
  for (const auto& f : result->izer_flags) {
    resp.add_izer_flags(f.flag);
    auto* p = resp.add_plan_flags();
    p->set_flag(f.flag);
    p->set_reason(f.reason);
  }
  resp.set_needs_quantized_checkpoint(result->needs_quantized_checkpoint);
  resp.set_quantized_checkpoint_reason(result->quantized_checkpoint_reason);
  resp.set_kiln_version(KilnVersion());
  ToProto(result->resolved, resp.mutable_resolved_options());
  resp.set_model_id(model_sha256.empty() ? Sha256Hex(bytes) : model_sha256);
  for (auto& a : IzerCommand(resp, model_name).argv) resp.add_izer_command(std::move(a));
  resp.set_compile_seconds(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  EnsureUtf8(&resp);  // layer names and diagnostics come from the model (api/models.h)
  return resp;
}

IzerCommandLine IzerCommand(const kiln::v1::CompileAi8xResponse& r, const std::string& model_name,
                            const IzerPaths& paths) {
  IzerCommandLine c;
  if (!r.ok()) return c;
  const auto& ro = r.resolved_options();
  std::string device = ro.device() == kiln::v1::MAX78002 ? "MAX78002" : "MAX78000";
  std::string arch = ro.arch().empty() ? model_name : ro.arch();
  auto add = [&c](std::string flag, std::string value, std::string reason) {
    c.argv.push_back(flag);
    if (!value.empty()) c.argv.push_back(std::move(value));
    kiln::v1::IzerFlag f;
    f.set_flag(std::move(flag));
    f.set_reason(std::move(reason));
    c.why.push_back(std::move(f));
  };
  c.argv.push_back("ai8xize.py");
  add("--device", device, "the chip the YAML was planned for (processors, memories, limits)");
  add("--config-file", paths.config_file.empty() ? arch + ".yaml" : paths.config_file, "the network YAML Kiln wrote");
  if (r.needs_quantized_checkpoint()) {
    add("--checkpoint-file", paths.checkpoint_file.empty() ? arch + "-q.pth.tar" : paths.checkpoint_file,
        "the weights: the .onnx cannot be the checkpoint here (" +
            (r.quantized_checkpoint_reason().empty() ? std::string("QAT quantize chains")
                                                     : r.quantized_checkpoint_reason()) +
            "), so give the quantized checkpoint (ai8x-synthesis quantize.py of the training checkpoint) of arch '" +
            arch + "'");
  } else {
    add("--checkpoint-file", paths.checkpoint_file.empty() ? model_name + ".onnx" : paths.checkpoint_file,
        "the weights: the ONNX model itself (izer/onnxcp.py reads its Conv/Gemm initializers), or the quantized "
        "checkpoint of arch '" + arch + "'");
  }
  add("--prefix", paths.prefix.empty() ? arch : paths.prefix, "the name of the generated C project");
  add("--test-dir", paths.test_dir.empty() ? "sdk/Examples/" + device + "/CNN" : paths.test_dir,
      "where the generated project is written");
  for (const auto& f : r.plan_flags()) add(f.flag(), "", f.reason());
  if (ro.dataset().empty() || ro.dataset() == "unknown") {
    add("--sample-input", paths.sample_input.empty() ? "sample.npy" : paths.sample_input,
        "the YAML names no dataset (--dataset), so the izer has no tests/sample_<dataset>.npy: an int8 .npy of "
        "the input shape");
  }
  return c;
}

const std::vector<std::string>& KnownAi8xFactories() {
  // The factories of tests/data/ai8x/models/{manifest,factories}.json (ai8x-training models/*.py).
  static const std::vector<std::string> kFactories = [] {
    std::vector<std::string> v = {
        "ai85afsknet", "ai85audionet", "ai85autoencoder", "ai85cdnet", "ai85faceidnet", "ai85faceidnet_112",
        "ai85kws20net", "ai85kws20netnas", "ai85kws20netv2", "ai85kws20netv2batchnorm", "ai85kws20netv3",
        "ai85nascifarnet", "ai85net5", "ai85net6", "ai85net80expansion", "ai85net80wide", "ai85netextrasmall",
        "ai85netwide", "ai85ressimplenet", "ai85simplenet", "ai85simplenetwide2x", "ai85squeezenet",
        "ai85tinierssd", "ai85tinierssdface", "ai85tinierssdqr", "ai85unetlarge", "ai85unetmedium",
        "ai85unetsmall", "ai87effnetv2", "ai87kws20netv3", "ai87netmobilefacenet_112",
        "ai87netmobilenetv2cifar100_m0_5", "bayer2rgbnet"};
    std::sort(v.begin(), v.end());
    return v;
  }();
  return kFactories;
}

std::string FactoryFromExportName(std::string_view file_name) {
  std::string stem(file_name.substr(file_name.find_last_of('/') == std::string_view::npos
                                        ? 0 : file_name.find_last_of('/') + 1));
  auto strip = [&stem](std::string_view suffix) {
    if (stem.size() > suffix.size() && stem.compare(stem.size() - suffix.size(), suffix.size(), suffix) == 0) {
      stem.resize(stem.size() - suffix.size());
    }
  };
  strip(".onnx");
  for (std::string_view form : {".qat", ".float", ".simplified"}) strip(form);
  const auto& known = KnownAi8xFactories();
  auto is_known = [&known](const std::string& s) { return std::binary_search(known.begin(), known.end(), s); };
  if (is_known(stem)) return stem;
  // <dataset>-<arch>: datasets hold no '-' in ai8x-training's names, factories may not either, but
  // try each split so that neither has to hold.
  for (size_t dash = stem.find('-'); dash != std::string::npos; dash = stem.find('-', dash + 1)) {
    std::string arch = stem.substr(dash + 1);
    if (is_known(arch)) return arch;
  }
  return "";
}

std::string CompileModelName(const store::ModelInfo& info, const std::string& requested) {
  const auto& names = info.names;
  if (std::find(names.begin(), names.end(), requested) != names.end()) return requested;
  return names.empty() ? info.model_id.substr(0, 12) : names.front();
}

namespace {

std::string Upper(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::toupper(c); });
  return s;
}

}  // namespace

Result<kiln::v1::CompileAi8xOptions> ParseCompileFlags(const CompileFlags& f) {
  kiln::v1::CompileAi8xOptions o;
  std::string dev = Upper(f.device);
  if (dev == "MAX78000" || dev == "AI85" || dev == "85") {
    o.set_device(kiln::v1::MAX78000);
  } else if (dev == "MAX78002" || dev == "AI87" || dev == "87") {
    o.set_device(kiln::v1::MAX78002);
  } else {
    return InvalidArgument("--device must be MAX78000 or MAX78002, got '" + f.device + "'");
  }
  std::string fmt = Upper(f.input_format);
  if (fmt == "AUTO") o.set_input_format(kiln::v1::INPUT_FORMAT_AUTO);
  else if (fmt == "HWC") o.set_input_format(kiln::v1::INPUT_FORMAT_HWC);
  else if (fmt == "CHW") o.set_input_format(kiln::v1::INPUT_FORMAT_CHW);
  else return InvalidArgument("--input-format must be auto, HWC or CHW, got '" + f.input_format + "'");
  o.set_arch(f.arch);
  o.set_dataset(f.dataset);
  o.set_use_fifos(f.use_fifos);
  o.set_move_l0(f.move_l0);
  o.set_verbose(f.verbose);
  for (const auto& s : f.sets) {
    // LAYER.KEY=VALUE; LAYER may itself contain dots, KEY never does.
    auto eq = s.find('=');
    auto dot = eq == std::string::npos ? std::string::npos : s.rfind('.', eq);
    if (eq == std::string::npos || dot == std::string::npos || dot == 0 || dot + 1 == eq) {
      return InvalidArgument("--set expects LAYER.KEY=VALUE, got '" + s + "'");
    }
    auto* ov = o.add_overrides();
    ov->set_layer(s.substr(0, dot));
    ov->set_key(s.substr(dot + 1, eq - dot - 1));
    ov->set_value(s.substr(eq + 1));
  }
  return o;
}

}  // namespace kiln::api
