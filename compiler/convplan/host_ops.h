// fp32 host execution of the ConvPlan's host ops (plan.h lists them), used by the executor
// (executor.h) for both the device chain and the fp32 reference chain.
//
// Semantics are ONNX's for the node's opset (onnx/docs/Operators.md): numpy-style broadcasting for
// Add / Sub / Mul / Div; Clip bounds from attributes before opset 11 and from inputs from 11 on;
// Squeeze / Unsqueeze axes from attributes before 13 and from inputs from 13 on; Pad pads from the
// attribute before 11 and from inputs from 11 on (modes constant, reflect, edge); Softmax over the
// 2-D coercion at `axis` before 13 and along `axis` from 13 on; Reshape with 0 = copy (allowzero
// 0) and -1 = inferred; Gemm with transA / transB / alpha / beta and unidirectional C broadcast;
// MatMul with numpy batch broadcasting; MaxPool / AveragePool (rank 3 or 4 inputs, auto_pad,
// pads, dilations, ceil_mode, count_include_pad) through the fp32 `pool` backend's Pool2d;
// BatchNormalization in inference form; Cast keeps fp32 storage (to an integer type: truncated
// toward zero; to BOOL: 0/1).
// Every tensor is fp32, row-major (Layout::kNCHW). Integer-valued inputs (shapes, axes, pads) are
// read from the fp32 values, rounded to the nearest integer.
#pragma once

#include <vector>

#include "common/status.h"
#include "compiler/onnx/ir.h"
#include "device/backends/backend.h"
#include "device/tensor.h"

namespace kiln::convplan {

/// Runs `node` on `inputs` (one entry per node input, nullptr for an omitted optional input).
/// Returns one tensor per node output (omitted optional outputs get an empty Tensor).
/// Errors: INVALID_ARGUMENT naming the node (shapes that do not broadcast, bad attributes,
/// unsupported modes such as MaxPool's Indices output), UNIMPLEMENTED for op types that are not
/// host ops, errors of `pool`'s Pool2d.
Result<std::vector<device::Tensor>> RunHostOp(const onnx_fe::Node& node,
                                              const std::vector<const device::Tensor*>& inputs,
                                              device::Backend& pool);

}  // namespace kiln::convplan
