// The "tt-emu" backend: Tenstorrent Tensix numerics emulated on the CPU (tt_conv.h has the
// dataflow and the exact/fast levels; spec docs/specs/tt-numerics.md §8).
//
// * conv2d / conv_transpose2d with groups, dilations, asymmetric pads, output_padding and the fused
//   activations of backend.h; pooling is not offered (UNIMPLEMENTED, capabilities().pool2d false).
// * Add: the card's ttnn.add with fused relu / relu6 in the feature maps' dtype (tt_eltwise.h);
//   PrecisionConfig::host_add = true computes the fp32 host add instead (for comparison).
// * Honours ExecContext::precision (PrecisionConfig, TT-NN conv defaults when default-constructed).
// * Inputs NCHW or NHWC (output in the input's layout); weights OIHW (conv2d) / IOHW (transpose).
// * The report states the level ("exact"/"fast") as implementation and the K blocking used.
// * Deterministic: both levels give bit-identical results for identical inputs (oneDNN's fp32
//   matmul is deterministic for a fixed thread count).
#pragma once

#include <memory>
#include <vector>

#include "common/status.h"
#include "device/backends/backend.h"
#include "device/backends/tt_emu/tt_conv.h"

namespace kiln::device {

/// A new tt-emu backend. `options.settings`: "level" = "exact" (default) | "fast"; other keys →
/// INVALID_ARGUMENT.
Result<std::unique_ptr<Backend>> MakeTtEmuBackend(const BackendOptions& options = {});

/// The settings MakeTtEmuBackend takes (key, default, help), as registered.
const std::vector<BackendSetting>& TtEmuBackendSettings();

/// Registers "tt-emu" → MakeTtEmuBackend with TtEmuBackendSettings().
Status RegisterTtEmuBackend(BackendRegistry& registry);

}  // namespace kiln::device
