#include "compiler/onnx/load_context.h"

#include <utility>

#include "compiler/onnx/tensor_decode.h"

namespace kiln::onnx_fe::internal {
namespace {

google::protobuf::ArenaOptions ArenaOptionsForModel() {
  google::protobuf::ArenaOptions o;
  o.start_block_size = 64 << 10;
  o.max_block_size = 1 << 20;
  return o;
}

}  // namespace

std::string FirstLines(const std::string& s, size_t max_chars) {
  std::string out = s.substr(0, max_chars);
  // Collapse onnx's multi-line messages.
  for (char& c : out) {
    if (c == '\n') c = ' ';
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  if (s.size() > max_chars) out += " ...";
  return out;
}

Site At(const onnx::NodeProto& node, std::string attribute, std::string tensor) {
  return Site{node.name(), node.op_type(), std::move(attribute), std::move(tensor),
              node.output_size() > 0 ? node.output(0) : std::string()};
}

LoadContext::LoadContext(std::string_view bytes_in, const LoadOptions& options_in)
    : bytes(bytes_in),
      options(options_in),
      arena(ArenaOptionsForModel()),
      model(*google::protobuf::Arena::CreateMessage<onnx::ModelProto>(&arena)) {
  error.model = options.model_name;
}

Status LoadContext::Fail(StatusCode code, std::string message, Site site) {
  return Record(code, stage, std::move(message), std::move(site));
}

Status LoadContext::FailLimit(std::string message, Site site) {
  return Record(StatusCode::kResourceExhausted, LoadStage::kLimits, std::move(message), std::move(site));
}

Status LoadContext::Record(StatusCode code, LoadStage at, std::string message, Site site) {
  error.code = code;
  error.stage = at;
  error.node = std::move(site.node);
  error.op_type = std::move(site.op_type);
  error.attribute = std::move(site.attribute);
  error.tensor = std::move(site.tensor);
  error.node_output = std::move(site.node_output);
  error.message = std::move(message);
  return error.ToStatus();
}

Status LoadContext::CheckPayload(const onnx::TensorProto& t, const std::string& name, const onnx::NodeProto* node,
                                 const std::string& attr) {
  const PayloadCheck c = CheckTensorPayload(t);
  if (c.code != StatusCode::kOk) {
    return Fail(c.code, c.error, node != nullptr ? At(*node, attr, name) : AtTensor(name));
  }
  total_tensor_bytes += c.payload_bytes;
  if (total_tensor_bytes > options.limits.max_total_tensor_bytes) {
    return FailLimit("the model's constant tensors hold more than " +
                     std::to_string(options.limits.max_total_tensor_bytes) +
                     " bytes (LoaderLimits::max_total_tensor_bytes)");
  }
  return Status::Ok();
}

const onnx::OpSchema* LoadContext::FindSchema(const std::string& op_type, int64_t version, const std::string& domain) {
  std::string key;
  key.reserve(domain.size() + 1 + op_type.size());
  key.append(domain).push_back('\0');
  key.append(op_type);
  auto it = schema_cache.find(key);
  if (it != schema_cache.end()) return it->second;
  const onnx::OpSchema* schema = onnx::OpSchemaRegistry::Schema(op_type, static_cast<int>(version), domain);
  schema_cache.emplace(std::move(key), schema);
  return schema;
}

std::string LoadContext::Resolve(int gi, const std::string& name) const {
  const std::string* cur = &name;  // points into `name` or into an aliases map, never copied
  for (int guard = 0; guard < 1'000'000; ++guard) {
    bool moved = false;
    for (int g = gi; g >= 0; g = graphs[g].parent) {
      const auto& aliases = graphs[g].aliases;
      if (aliases.empty()) continue;
      auto it = aliases.find(*cur);
      if (it != aliases.end()) {
        cur = &it->second;
        moved = true;
        break;
      }
    }
    if (!moved) break;
  }
  return *cur;
}

}  // namespace kiln::onnx_fe::internal
