// OnnxCheckpointProblem (compiler/ai8x/passes.h): whether ai8x-synthesis' ONNX weight reader,
// izer/onnxcp.py load() (ab4f4c0), can take the model's .onnx as the --checkpoint-file of the YAML.
// What load() does, which this file replays on the graph:
//  * it walks the graph's nodes in order and reads only Conv and Gemm nodes (not ConvTranspose, not
//    MatMul), numbering them `seq`, and applies node `seq`'s weight width and output_shift to YAML
//    layer `seq` (izer.py re-inserts empty weights at the YAML's weightless layers only after
//    load() returns, so the weights line up again but those values stay on the wrong layers);
//  * it reads W of a Gemm as [out, in] (transB = 1);
//  * of a node it reads only inputs that are initializers (a weight behind a QAT quantize chain is
//    not read);
//  * for every initializer input it appends a kernel to one list (Gemm [1, 1], Conv its
//    kernel_shape attribute when present), biases included, and checks the weight of node `seq`
//    against the list's entry `seq`: with biases and mixed kernel sizes the entries shift; a
//    Conv1d's single-value kernel_shape ends in an IndexError.
#include <string>
#include <unordered_set>
#include <vector>

#include "compiler/ai8x/passes.h"

namespace kiln::ai8x {

std::string OnnxCheckpointProblem(const onnx_fe::Graph* graph, const Network& net) {
  if (net.qat_weight_chains) {
    return "the weights sit behind QAT quantize chains, which izer/onnxcp.py does not follow (it reads the "
           "initializers of Conv and Gemm nodes)";
  }
  if (graph == nullptr) return "";  // a network built elsewhere: no ONNX file
  const onnx_fe::Graph& g = *graph;
  std::unordered_set<std::string> inits(g.initializer_order().begin(), g.initializer_order().end());
  std::vector<std::vector<int64_t>> kernels;  // onnxcp.py's kernel_size_onnx
  const size_t n_layers = net.layers.size();
  size_t seq = 0;
  auto layer_text = [&](size_t i) {
    const Layer& l = net.layers[i];
    return "YAML layer " + std::to_string(i) + " ('" + l.name + "'" +
           (l.onnx_nodes.empty() ? std::string() : ", ONNX node '" + l.onnx_nodes.front() + "'") + ")";
  };
  for (const onnx_fe::Node& n : g.nodes()) {
    const bool gemm = n.op_type == "Gemm";
    if (!gemm && n.op_type != "Conv") continue;
    if (gemm) {  // onnxcp reads W as [out, in]: a Gemm with transB = 0 stores it [in, out]
      auto tb = n.GetInt("transB", 0);
      if (!tb.ok() || *tb == 0) {
        return "izer/onnxcp.py reads the weights of Gemm node '" + n.name + "' as [out, in], but transB is 0 ([in, out])";
      }
    }
    bool weight_read = false;
    for (const std::string& in : n.inputs) {
      if (in.empty() || inits.count(in) == 0) continue;
      if (gemm) {
        kernels.push_back({1, 1});
        if (seq >= n_layers) continue;
      } else if (const onnx_fe::Attribute* a = n.FindAttribute("kernel_shape"); a != nullptr && !a->from_default) {
        kernels.push_back(a->ints);
      }
      const onnx_fe::Tensor* t = g.FindTensor(in);
      const size_t rank = t == nullptr ? 0 : t->shape.rank();
      if (rank <= 1) continue;  // a bias
      weight_read = true;
      if (seq >= n_layers) {
        return "izer/onnxcp.py finds more Conv/Gemm weights than the YAML has layers (node '" + n.name + "')";
      }
      const Layer& l = net.layers[seq];
      if (!l.has_weights()) {
        // izer.py re-inserts empty weights at the YAML's weightless layers afterwards, but load()
        // has already applied this node's quantization and output_shift at index `seq`.
        return "izer/onnxcp.py applies the weight width and output_shift of Conv/Gemm node number " +
               std::to_string(seq) + " ('" + n.name + "') to " + layer_text(seq) +
               ", a layer without weights: it numbers the YAML's layers by Conv and Gemm nodes only";
      }
      if (l.onnx_nodes.empty() || l.onnx_nodes.front() != n.name) {
        return "izer/onnxcp.py gives the weights of Conv/Gemm node number " + std::to_string(seq) + " ('" + n.name +
               "') to " + layer_text(seq) + ": it numbers the YAML's layers by Conv and Gemm nodes only";
      }
      std::vector<int64_t> dims;
      if (t != nullptr) {
        for (const onnx_fe::Dim& d : t->shape.dims()) dims.push_back(d.value());
      }
      bool ok = seq < kernels.size() && kernels[seq].size() >= 2;  // onnxcp indexes [0] and [1]
      if (ok && rank == 2) ok = kernels[seq][0] == 1 && kernels[seq][1] == 1;
      if (ok && rank == 3) ok = kernels[seq][0] == dims[2] && kernels[seq][1] == 1;
      if (ok && rank == 4) ok = kernels[seq][0] == dims[2] && kernels[seq][1] == dims[3];
      if (!ok) {
        return "izer/onnxcp.py checks the kernel of " + layer_text(seq) +
               " against the wrong entry of its kernel list (one entry per initializer, biases included; a Conv1d's "
               "single-value kernel_shape fails)";
      }
    }
    if (!weight_read) {
      // A weight that is not an initializer of the node in the graph (a Constant node's, a
      // computed one): onnxcp reads none, yet counts the node, so every later layer shifts.
      for (size_t i = 0; i < n_layers; ++i) {
        const Layer& l = net.layers[i];
        if (l.has_weights() && !l.onnx_nodes.empty() && l.onnx_nodes.front() == n.name) {
          return "izer/onnxcp.py reads no weights for " + layer_text(i) +
                 " (they are not an initializer of the node) but counts the node";
        }
      }
    }
    ++seq;
  }
  for (size_t i = seq; i < n_layers; ++i) {
    const Layer& l = net.layers[i];
    if (l.has_weights()) {
      return layer_text(i) + " is a " + std::string(OpKindName(l.op)) +
             " whose weights izer/onnxcp.py does not read (it reads Conv and Gemm nodes only)";
    }
  }
  return "";
}

}  // namespace kiln::ai8x
