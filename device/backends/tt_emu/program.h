// The program TT-NN builds for one conv2d, decided the way TT-NN decides it (program selection).
//
// tt-emu first selects the program (this header), then emulates exactly that program
// (tt_conv.h). Every decision is one function named after the TT-NN function it follows, in
// tenstorrent/tt-metal ttnn/cpp/ttnn/operations/conv/conv2d/ (paths and commits followed:
// docs/specs/tt-metal-followed.md; background: docs/specs/tt-conv-dataflow.md). The decision
// functions are re-expressed here in our own code; unit tests: tests/device/tt_emu/program_test.cc.
//
// Conventions: shapes are the conv's logical NCHW shapes (N, Cin, H, W) → (N, Cout, OH, OW);
// "ntiles" counts 32-wide / 32-high tiles; byte sizes are per Tensix core.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "device/backends/backend.h"
#include "device/backends/precision.h"

namespace kiln::device::tt_emu {

/// What the program computes, in conv2d terms (conv_transpose2d is lowered to this by
/// tt_conv.cc first, as conv_transpose2d.cpp's halo + stride-1 conv does).
struct ConvProblem {
  int64_t N = 1, C = 1, H = 1, W = 1;  ///< input, NCHW
  int64_t O = 1;                       ///< output channels
  int64_t kh = 1, kw = 1;
  int64_t sh = 1, sw = 1;
  int64_t dh = 1, dw = 1;
  std::array<int64_t, 4> pads{0, 0, 0, 0};  ///< ONNX order (h_begin, w_begin, h_end, w_end)
  int64_t group = 1;
  int64_t OH = 1, OW = 1;
  bool has_bias = false;
  Activation activation = Activation::kNone;
};

/// Which TT-NN program runs the conv.
enum class ConvProgramPath {
  kConv2d,       ///< the sharded conv program (conv_bmm_tilize*.cpp compute kernels)
  kMatmul,       ///< ttnn::linear / matmul (use_matmul_for_1x1_conv, or kernel == stride folding)
  kDepthwise2d,  ///< Conv2dDepthwiseProgramFactory: element-wise multiply + reduce (pool kernel)
  kDepthwise1d,  ///< compute_depthwise_conv1d.cpp (1-D depthwise without bias)
};
const char* ConvProgramPathName(ConvProgramPath p);  ///< "conv2d", "matmul", "depthwise_2d", "depthwise_1d"

/// The K dimension as the program lays it out: for every K index, which kernel tap and input
/// channel feed it (or padding), and where the K blocks (in0 blocks) start.
struct KLayout {
  int64_t K = 0;                  ///< padded K, a multiple of 32
  /// tap[k] = i·kw + j of the kernel position feeding K index k, −1 for a padding (zero) entry.
  std::vector<int32_t> tap;
  /// chan[k] = input channel (0..C−1 of the whole conv; grouped convs use the dense block-diagonal
  /// weight, so a group's channels stay at their global index). Undefined where tap[k] = −1.
  std::vector<int32_t> chan;
  /// K-block boundaries: block b covers [block_begin[b], block_begin[b+1]); multiples of 32;
  /// block_begin.front() = 0, block_begin.back() = K. in0_num_blocks_w = size() − 1.
  std::vector<int64_t> block_begin;
  int64_t num_blocks() const { return static_cast<int64_t>(block_begin.size()) - 1; }
};

/// The resolved program of one conv: every choice that changes the numbers, and the ones the run
/// report shows (LayerReport.program in proto/kiln/v1/device.proto mirrors it).
struct ConvProgram {
  ConvProgramPath path = ConvProgramPath::kConv2d;
  bool kernel_stride_folded = false;  ///< auto_enable_kernel_folding: input folded, run as matmul
  ShardLayout shard_layout = ShardLayout::kHeight;  ///< never kAuto once resolved
  bool shard_layout_auto = true;      ///< chosen by determine_conv_config_for_auto_shard
  Board board = Board::kN150;
  int grid_x = 8, grid_y = 8;         ///< device compute_with_storage_grid_size
  int num_cores = 1;                  ///< cores used by the conv
  int num_cores_nhw = 1, num_cores_c_in = 1, num_cores_c_out = 1;
  int cin_align = 32;                 ///< get_input_channels_alignment (32 for depthwise)
  int64_t cin_padded = 32;            ///< round_up(Cin, num_cores_c_in · cin_align)
  int64_t cout_padded = 32;           ///< round_up(Cout, num_cores_c_out · 32)
  int act_block_h_ntiles = 1;
  int act_block_w_ntiles = 1;         ///< in0_block_w (tiles of K per block)
  int out_subblock_h_ntiles = 1, out_subblock_w_ntiles = 1;
  int per_core_out_h_ntiles = 1, per_core_out_w_ntiles = 1;
  KLayout k;                          ///< K order, padding and blocks
  bool l1_acc_effective = false;      ///< determine_packer_l1_acc
  bool fp32_dest_acc = false;         ///< the compute config's fp32_dest_acc_en, resolved
  DeviceDType weights_dtype = DeviceDType::kFloat32;  ///< resolved (precision or host weights)
  DeviceDType act_dtype = DeviceDType::kBFloat16;     ///< format the activations are tilized into
  DeviceDType partials_dtype = DeviceDType::kBFloat16;  ///< the partials CB between K blocks
  DeviceDType output_dtype = DeviceDType::kBFloat16;
  DeviceDType pack_src_dtype = DeviceDType::kBFloat16;  ///< get_single_pack_src_format of the final pack
  bool bfp8_pack_precise = false;     ///< Float32 pack source for a bfp output from an fp32 Dst
  /// fp32 partials reloaded into Dst through SrcA as Tf32 (PartialReload resolved), else losslessly.
  bool fp32_reload_tf32 = true;
  /// The fused activation the program applies (FusedHardswish resolved: kNone when dropped).
  Activation activation = Activation::kNone;
  int64_t l1_bytes_per_core = 0;      ///< calculate_L1_usage_for_conv_op total (CBs + output + halo)
  int64_t l1_budget_bytes = 0;        ///< the board's usable L1 per core
  std::vector<std::string> notes;     ///< one line per non-obvious choice ("HARDSWISH dropped: ...")
};

/// The board's compute grid and L1 budget (tt-metal's compute_with_storage_grid_size per board;
/// Board::kDefault resolves to the arch's single-chip board: n150 / p150).
struct BoardInfo {
  Board board;
  Arch arch;
  int grid_x, grid_y;
  int64_t l1_budget_bytes;
};
Result<BoardInfo> GetBoardInfo(Board board, Arch arch);

/// Selects the program TT-NN builds for `problem` under `precision` (its knobs resolved against
/// TT-NN's defaults: docs/specs/tt-conv-dataflow.md §1). `host_weights_dtype` is the dtype of the
/// weight tensor handed to ttnn.conv2d when precision.weights_dtype is unset.
/// Errors: INVALID_ARGUMENT (a knob combination TT-NN rejects as a config error, e.g. act_block_w with
/// act_block_w_div), FAILED_PRECONDITION (a configuration TT-NN would refuse on the device: L1
/// overflow, a shard layout impossible for the shape), each naming the limit.
Result<ConvProgram> SelectConvProgram(const ConvProblem& problem, const PrecisionConfig& precision,
                                      DeviceDType host_weights_dtype = DeviceDType::kFloat32);

/// The report's view of the program (backend.h ProgramReport).
ProgramReport ToProgramReport(const ConvProgram& program);

/// One line per field for reports ("program=conv2d shard=height grid=8x8 cores=64 cin_align=8 ...").
std::string ConvProgramSummary(const ConvProgram& program);

// --- the TT-NN decisions, one function each (exposed for tests) --------------------------------

/// conv2d_utils.cpp use_matmul_for_1x1_conv.
bool UseMatmulFor1x1Conv(const ConvProblem& p, ShardLayout requested);
/// conv2d_utils.cpp get_input_channels_alignment (input neither sharded nor DRAM-sliced here).
int GetInputChannelsAlignment(ShardLayout layout, InputLayout input_layout, bool is_mm_conv);
/// conv2d_utils.cpp determine_packer_l1_acc.
bool DeterminePackerL1Acc(bool packer_l1_acc, bool enable_bias, int64_t in0_num_blocks_w);
/// conv2d_utils.cpp find_closest_largest_divisor(_with_num_padding)(_and_mult).
uint32_t FindClosestLargestDivisor(uint32_t num, uint32_t start_divisor);
uint32_t FindClosestLargestDivisor(uint32_t num1, uint32_t num2, uint32_t start_divisor);
uint32_t FindClosestLargestDivisorWithNumPadding(uint32_t num, uint32_t start_divisor);
uint32_t FindClosestLargestDivisorWithNumPadding(uint32_t num1, uint32_t num2, uint32_t start_divisor);
uint32_t FindClosestLargestDivisorWithNumPaddingAndMult(uint32_t num, uint32_t start_divisor, uint32_t mult);

}  // namespace kiln::device::tt_emu
