// Helpers shared by the rewrite rules of compiler/convplan/passes/ (the common rules of every
// fusion are documented in compiler/convplan/passes/rewrite_pass.h).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "compiler/convplan/passes/plan_graph.h"

namespace kiln::convplan::passes_util {

/// The single output tensor of alive device op `i`, or nullptr (host op, removed, or several
/// output slices).
const std::string* DeviceTail(const PlanGraph& g, size_t i);

/// True when the device op's next activation slot is free (DeviceOp::activation without a
/// residual, DeviceOp::residual_activation with one).
bool ActivationSlotFree(const DeviceOp& d);
/// Fills the next activation slot (see ActivationSlotFree).
void SetNextActivation(DeviceOp& d, device::Activation a);

/// Alive host op `j` of ONNX op type `type`, or nullptr.
const onnx_fe::Node* HostNode(const PlanGraph& g, size_t j, const char* type);

/// The value of a one-element constant, or nullopt.
std::optional<float> ScalarConstant(const PlanGraph& g, const std::string& name);
/// `v` is set and within 1e-4 relative of `want`.
bool Near(std::optional<float> v, double want);

/// The one consumer of `tensor` when it is an intermediate that may disappear (not a graph
/// output, exactly one reader), else nullopt.
std::optional<size_t> SoleConsumer(const PlanGraph& g, const std::string& tensor);

/// Finishes a fusion: device op `i` absorbs `absorbed` ops (the last of which produces
/// `new_output`), records `fusion` in PlanOp::fusions and the rewrite log, and takes the slot of
/// the last absorbed op.
void Absorb(PlanGraph& g, size_t i, const std::vector<size_t>& absorbed, const std::string& new_output,
            const std::string& fusion);

}  // namespace kiln::convplan::passes_util
