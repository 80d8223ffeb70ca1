// The rewrite rules of compiler/convplan, one per file under compiler/convplan/passes/ (each
// file's header comment states the rule's conditions and source). The pipeline order is declared
// once, in compiler/convplan/passes/pass_manager.cc.
#pragma once

#include <memory>

#include "compiler/convplan/passes/rewrite_pass.h"
#include "compiler/onnx/ir.h"

namespace kiln::convplan {

std::unique_ptr<RewritePass> MakeFoldBatchNorm();      ///< passes/fold_batch_norm.cc
std::unique_ptr<RewritePass> MakeFuseRelu();           ///< passes/fuse_relu.cc
std::unique_ptr<RewritePass> MakeFuseRelu6();          ///< passes/fuse_relu6.cc
std::unique_ptr<RewritePass> MakeFuseSigmoid();        ///< passes/fuse_sigmoid.cc
std::unique_ptr<RewritePass> MakeFuseSilu();           ///< passes/fuse_silu.cc
std::unique_ptr<RewritePass> MakeFuseGelu();           ///< passes/fuse_gelu.cc
std::unique_ptr<RewritePass> MakeDeviceAdd();          ///< passes/device_add.cc
std::unique_ptr<RewritePass> MakeFuseResidualAdd();    ///< passes/fuse_residual_add.cc
std::unique_ptr<RewritePass> MakeKSplitConcat();       ///< passes/ksplit_concat.cc
std::unique_ptr<RewritePass> MakeMergeSiblingConvs();  ///< passes/merge_sibling_convs.cc
std::unique_ptr<RewritePass> MakeRemoveDeadHostOps();  ///< passes/remove_dead_host_ops.cc

/// "Clip" node bounds as relu6 requires: true iff min == 0 and max == 6 (rules in
/// passes/fuse_relu6.cc).
bool IsRelu6Clip(const onnx_fe::Node& node, const onnx_fe::Graph& graph);

}  // namespace kiln::convplan
