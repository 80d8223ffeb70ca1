// FuseRelu: Relu reading a device op's only output (conditions: passes/fuse_unary_activation.h).
#include "compiler/convplan/passes/fuse_unary_activation.h"
#include "compiler/convplan/passes/rules.h"

namespace kiln::convplan {

std::unique_ptr<RewritePass> MakeFuseRelu() {
  return std::make_unique<FuseUnaryActivation>("FuseRelu", "Relu", device::Activation::kRelu);
}

}  // namespace kiln::convplan
