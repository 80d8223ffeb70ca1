// The precision advisor's cost model: an ESTIMATE of what one conv layer costs on a
// Wormhole B0 card at a given precision, from the layer's shapes and the program tt-emu selected
// for it (device/backends/tt_emu/program.h). It is not a card measurement: nothing here was timed
// on a card. It is kept in this one file so a measured table can replace it.
//
// Units: Tensix cycles of one layer (cores run in parallel, so per core = per layer). The advisor
// reports RelativeCost: the cycles of an assignment over the cycles of the same layers at the
// all-HiFi4-bfloat16 baseline (1.0 = baseline).
//
// Model (per layer; each term names its source):
//  * Math: the conv is a tiled matmul M×K×N (M = N·OH·OW output pixels, K = the padded inner dim
//    kh·round_up(cin_padded·kw, 32) — one kernel row per K block, docs/specs/tt-conv-dataflow.md
//    §3 — N = Cout), every dim rounded up to 32-wide tiles; grouped convs run dense
//    block-diagonal weights (§2), so K counts every input channel. One MVMUL multiplies an 8×16
//    SrcB block by a 16×16 SrcA block: 2048 multiply-accumulates per Tensix per cycle
//    (tt-isa-documentation Wormhole B0 MVMUL.md). Each fidelity phase is a separate MVMUL
//    (docs/specs/tt-numerics.md §5.2): LoFi 1, HiFi2 2, HiFi3 3, HiFi4 4 passes. The work is
//    spread over program.num_cores. The depthwise_2d / depthwise_1d programs (a per-tap
//    element-wise multiply, then a reduce) are modelled at 128 MACs per cycle per phase (one
//    8×16 lane grid without the 16-deep inner product: an assumption, not a source).
//  * Bytes moved: the weights (Cout × K values) and the bias (Cout) at the weights dtype —
//    bfloat16 2, bfloat8_b 1.0625, bfloat4_b 0.5625 bytes per value (a 32×32 tile is 2048, 1088,
//    576 bytes incl. its 64 shared exponents, docs/specs/tt-numerics.md §1), float32 4 — are read once from
//    DRAM at 288 B/cycle (n150's 288 GB/s of GDDR6 at the 1 GHz AI clock). The activations stay
//    sharded in L1 between convs (TT-NN's sharded conv): the input (at the input dtype) and the
//    output (at the output dtype) move over each core's NoC link at 32 B/cycle, spread over
//    num_cores. Math and data movement overlap (double-buffered CBs): the layer takes the larger
//    of the two.
//  * Dst and packing: the packer writes 64 B/cycle (an assumption). Dst holds 8 output tiles
//    per sync in bf16 half-sync mode and 4 with fp32_dest_acc_en (the fp32 Dst halves the tiles
//    per sync, so an output block needs twice the subblocks); each Dst sync costs 64 cycles
//    (acquire, release, semaphore handshake with the packer: an assumption) per K block.
//    With k_blocks > 1 the partial sums go out after every block but the last: without
//    effective packer L1 accumulation each such block is packed at the partials dtype and
//    reloaded (unpacked at the same width plus a 16-cycle copy into Dst per tile,
//    copy_block_matmul_partials); with it (program.l1_acc_effective, decided by tt-metal's
//    determine_packer_l1_acc, docs/specs/tt-conv-dataflow.md §5) the packer reads, adds and writes the L1
//    partials (twice the partials' bytes) and nothing is reloaded.
//  * Device adds and host ops are not modelled (they do not change with the advised knobs).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "device/backends/backend.h"
#include "device/backends/precision.h"

namespace kiln::api::advisor {

/// One conv layer's shapes (logical, NCHW), as the plan and the run report give them.
struct LayerGeometry {
  int64_t batch = 1;
  int64_t in_channels = 0;                ///< C, all groups
  int64_t in_h = 0, in_w = 0;
  int64_t out_channels = 0;               ///< O
  int64_t out_h = 0, out_w = 0;
  int64_t kernel_h = 1, kernel_w = 1;
  int64_t groups = 1;
  bool bias = false;
};

/// The estimate of one layer (cycles of the whole layer; see the header comment).
struct LayerCost {
  double math_cycles = 0;   ///< MVMUL passes over num_cores
  double data_cycles = 0;   ///< weights from DRAM + activations over the NoC
  double pack_cycles = 0;   ///< final pack, partial spills / reloads or L1 accumulation, Dst syncs
  double bytes = 0;         ///< bytes moved (weights + bias + activations in + out)
  double cycles = 0;        ///< max(math, data) + pack
};

/// Bytes per value of a device dtype as stored on the card (block floats incl. their shared
/// exponents): float32 4, bfloat16 2, bfloat8_b 1.0625, bfloat4_b 0.5625.
double BytesPerValue(device::DeviceDType dtype);

/// Fidelity phases per MVMUL: LoFi 1, HiFi2 2, HiFi3 3, HiFi4 4.
int FidelityPhases(device::MathFidelity fidelity);

/// The estimate of `layer` at `precision` (resolved or not: TT-NN's defaults are applied with
/// float32 host weights, as an ONNX model has). `program`: the program tt-emu selected for this
/// layer at this precision; nullopt = a height-sharded conv2d on the 56 cores of the n150 grid
/// with one K block per kernel row and no L1 accumulation.
LayerCost EstimateLayerCost(const LayerGeometry& layer, const std::optional<device::ProgramReport>& program,
                            const device::PrecisionConfig& precision);

/// The baseline the relative cost is measured against: `base` (the other knobs of the run) at
/// HiFi4 with bfloat16 weights (fp32_dest_acc_en, packer_l1_acc and the output dtype as `base`).
device::PrecisionConfig BaselinePrecision(const device::PrecisionConfig& base);

}  // namespace kiln::api::advisor
