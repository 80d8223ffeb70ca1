// Minimal valid ONNX models as bytes, for store and server tests (Relu over one input, plus an
// initializer whose raw_data pads the model to about the requested size).
#pragma once

#include <onnx/onnx_pb.h>

#include <string>

namespace kiln::testing {

inline std::string MakeOnnxBytes(size_t approx_size, unsigned seed = 1) {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.set_producer_name("kiln-test");
  auto* opset = model.add_opset_import();
  opset->set_domain("");
  opset->set_version(13);
  auto* g = model.mutable_graph();
  g->set_name("g");
  auto* in = g->add_input();
  in->set_name("x");
  in->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  in->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(4);
  auto* out = g->add_output();
  out->set_name("y");
  out->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  auto* node = g->add_node();
  node->set_op_type("Relu");
  node->set_name("relu");
  node->add_input("x");
  node->add_output("y");
  size_t floats = approx_size / 4;
  if (floats > 0) {
    auto* init = g->add_initializer();
    init->set_name("pad");
    init->set_data_type(onnx::TensorProto::FLOAT);
    init->add_dims(static_cast<int64_t>(floats));
    std::string raw(floats * 4, '\0');
    uint32_t s = seed * 2654435761u + 1;
    for (size_t i = 0; i < raw.size(); ++i) {
      s = s * 1664525u + 1013904223u;
      raw[i] = static_cast<char>(s >> 24);
    }
    init->set_raw_data(std::move(raw));
  }
  return model.SerializeAsString();
}

}  // namespace kiln::testing
