// Rule family "pooling" (AI8X_POOL): pooling sizes, strides and dilation (izer.py L507-524,
// max7800x.py L694-699, ai8x.py asserts).
#include "compiler/ai8x/rules/checks.h"

namespace kiln::ai8x::rules {

bool PoolAttributeInRange(Network& net, const Layer& l, const std::string& attr, const std::vector<int64_t>& v) {
  std::string why = AttributeProblem(attr, v, 1);
  if (why.empty()) return true;
  net.Report(Severity::kError, code::kPool, &l, why);
  return false;
}

void CheckPooling(RuleContext& c, const Layer& l, size_t) {
  if (l.pool == PoolType::kNone) return;
  Network& net = c.net;
  const ChipSpec& spec = c.spec;
  auto err = [&](const std::string& msg) { net.Report(Severity::kError, code::kPool, &l, msg); };
  if (l.pool_h < 1 || l.pool_h > spec.max_pool_size || l.pool_w < 1 || l.pool_w > spec.max_pool_size ||
      l.pool_stride_h < 1 || l.pool_stride_h > spec.max_pool_size) {
    std::string nodes;  // the pool's node is among the fused ones
    for (size_t k = 1; k < l.onnx_nodes.size(); ++k) nodes += (k > 1 ? ", " : "") + l.onnx_nodes[k];
    err("pooling kernel " + std::to_string(l.pool_h) + "x" + std::to_string(l.pool_w) + " and stride " +
        std::to_string(l.pool_stride_h) + " must be 1.." + std::to_string(spec.max_pool_size) +
        (nodes.empty() ? std::string() : " (fused ONNX nodes: " + nodes + ")"));
  }
  if (!l.one_d && l.pool_stride_h != l.pool_stride_w) err("pool stride must be square (izer.py L507-510)");
  Shape3 pooled = l.pooled_shape();
  if (pooled.h <= 0 || pooled.w <= 0) err("pooled dimension is zero (izer.py L522-524)");
  if (l.pool_dilation > spec.max_pool_dilation) {
    err("pool dilation exceeds " + std::to_string(spec.max_pool_dilation) + " (max7800x.py L694-699)");
  }
}

}  // namespace kiln::ai8x::rules
