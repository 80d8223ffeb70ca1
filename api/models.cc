#include "api/models.h"

namespace kiln::api {

void ToProto(const store::ModelInfo& info, kiln::v1::Model* out) {
  out->set_model_id(info.model_id);
  for (const auto& n : info.names) out->add_names(n);
  out->set_size_bytes(info.size_bytes);
  out->set_opset(info.opset);
  for (const auto& s : info.inputs) out->add_inputs(s);
  for (const auto& s : info.outputs) out->add_outputs(s);
  out->set_node_count(info.node_count);
  out->set_producer_name(info.producer_name);
  out->set_created_unix_seconds(info.created_unix_seconds);
}

}  // namespace kiln::api
