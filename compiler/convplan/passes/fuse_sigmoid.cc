// FuseSigmoid: Sigmoid reading a device op's only output (conditions:
// passes/fuse_unary_activation.h).
#include "compiler/convplan/passes/fuse_unary_activation.h"
#include "compiler/convplan/passes/rules.h"

namespace kiln::convplan {

std::unique_ptr<RewritePass> MakeFuseSigmoid() {
  return std::make_unique<FuseUnaryActivation>("FuseSigmoid", "Sigmoid", device::Activation::kSigmoid);
}

}  // namespace kiln::convplan
