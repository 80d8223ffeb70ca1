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

#include <array>
#include <cstdint>
#include <string>
#include <utility>
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
  /// The depthwise programs (kDepthwise2d / kDepthwise1d) get the layout the generic conv has for
  /// the same shard layout (each output channel uses only its own channel's entries, tap by tap).
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
  /// The fused activation the program applies (FusedHardswish resolved: kNone when dropped).
  Activation activation = Activation::kNone;
  int64_t l1_bytes_per_core = 0;      ///< calculate_L1_usage_for_conv_op total (CBs + output + halo)
  int64_t l1_budget_bytes = 0;        ///< the board's usable L1 per core
  std::vector<std::string> notes;     ///< one line per non-obvious choice ("HARDSWISH dropped: ...")
  // --- added by the program-selection step (program.cc) ---
  /// The matmul runs on DRAM-interleaved operands (auto-shard + matmul path: conv2d.cpp skips
  /// sharding and ttnn::linear picks its own program config; K blocks from
  /// create_simple_matmul_program_config). shard_layout is then only what auto-shard compared.
  bool matmul_interleaved = false;
  int64_t conv_in_channels = 1;       ///< Cin of the conv TT-NN runs (C·sh·sw when folded)
  /// conv2d.cpp conv2d_DRAM: output-height slices the conv runs in (1 = the whole conv fits L1).
  /// Slicing changes act_block_h and the core split, not the K order or blocks. Approximate: only
  /// height slicing, the smallest slice count whose estimate fits (op_slicing not followed).
  int dram_slices = 1;
  DepthwiseProgram depthwise_program = DepthwiseProgram::kDenseConv;  ///< resolved, never kRecorded
  /// Resolved, never kRecorded: kTf32 = fp32 partials reloaded into Dst through SrcA as Tf32.
  PartialReload partial_reload = PartialReload::kTf32;
  FusedHardswish fused_hardswish = FusedHardswish::kDropped;          ///< resolved, never kRecorded
};

/// The board's compute grid and L1 budget (tt-metal's compute_with_storage_grid_size per board;
/// Board::kDefault resolves to the arch's single-chip board: n150 / p150). INVALID_ARGUMENT for a
/// board of the other arch. Grids: n150 8×8, n300 8×8 per chip (ethernet dispatch), p150 13×10,
/// p100 11×10 (tt_metal/core_descriptors/*.yaml); budget: see program.cc kL1Reserved.
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

/// The tt-metal files (and commits) whose decisions SelectConvProgram follows, one line
/// (docs/specs/tt-metal-followed.md has the full table).
const char* TtMetalFollowed();

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
/// conv2d_utils.cpp is_1d_depthwise_conv / is_2d_depthwise_conv (on the conv's logical shape).
bool Is1dDepthwiseConv(const ConvProblem& p);
bool Is2dDepthwiseConv(const ConvProblem& p);
/// conv2d_utils.cpp auto_enable_kernel_folding for the input Kiln hands over (a host tensor, so
/// conv2d.cpp's DRAM path: input_memory_config.is_dram() holds).
bool AutoEnableKernelFolding(const ConvProblem& p, InputLayout input_layout);
/// conv2d_utils.cpp compute_kernel_stride_folding_params: the conv after folding (C·sh·sw channels,
/// kernel ceil(k/s), stride 1, no padding; input (H+pads)/s).
ConvProblem FoldedProblem(const ConvProblem& p);

/// The cores a sharded tensor uses (sliding_window ParallelConfig reduced to what conv2d reads):
/// height: num_cores_nhw cores row-wise on the grid, c = 1; block (ROW_MAJOR orientation):
/// cores_x = num_cores_c, cores_y = num_cores_nhw; width: num_cores_c cores row-wise, nhw = 1.
struct ParallelConfig {
  ShardLayout layout = ShardLayout::kHeight;
  int num_cores_nhw = 1;
  int num_cores_c = 1;
  int num_cores = 1;
};
/// conv2d_utils.cpp determine_parallel_config (block orientation ROW_MAJOR, tile-multiple shards).
ParallelConfig DetermineParallelConfig(ShardLayout layout, int64_t batch, int64_t in_channels, int64_t out_h,
                                       int64_t out_w, int64_t out_channels, int cin_align, int grid_x, int grid_y,
                                       bool enable_channels_padding, int act_block_h_override, int64_t groups);
/// conv2d_utils.cpp determine_output_parallel_config.
ParallelConfig DetermineOutputParallelConfig(const ParallelConfig& input, int grid_x, int grid_y, int64_t out_channels,
                                             bool is_mm_conv);

/// Conv2dBlockConfig (tiles).
struct ConvBlockConfig {
  int act_block_h_ntiles = 1, act_block_w_ntiles = 1, out_subblock_h_ntiles = 1, out_subblock_w_ntiles = 1;
};
/// conv2d_utils.cpp determine_largest_subblock_size → {out_subblock_h, out_subblock_w}.
std::pair<int, int> DetermineLargestSubblockSize(int block_h, int block_w, bool fp32_accum);
/// conv2d_utils.cpp determine_per_core_conv_block_config. FAILED_PRECONDITION where TT-NN asserts
/// (width-sharded Cin not a multiple of 32·cores·act_block_w_div; activation reuse with
/// act_block_h ≤ OW tiles; a block width that is not a tile multiple).
Result<ConvBlockConfig> DeterminePerCoreConvBlockConfig(const ParallelConfig& input, int per_core_out_h_ntiles,
                                                        int per_core_out_w_ntiles, int64_t padded_in_channels,
                                                        int64_t padded_out_h_ntiles_per_core,
                                                        int act_block_h_override, int act_block_w_div, int64_t kh,
                                                        int64_t kw, int64_t out_w, bool fp32_accum, bool full_inner_dim,
                                                        bool enable_activation_reuse, bool is_1d_depthwise);

/// conv2d_utils.cpp get_conv_configs: per-core output shard (Conv2dParallelizationConfig) + blocks.
struct ConvConfigs {
  int per_core_out_h_ntiles = 1, per_core_out_w_ntiles = 1;
  int64_t cout_padded = 32;                    ///< round_up(Cout, num_cores_c_out · 32)
  int64_t nhw_out_padded_ntiles_per_core = 1;  ///< output shard height / 32
  ConvBlockConfig block;
};
Result<ConvConfigs> GetConvConfigs(const ParallelConfig& input, const ParallelConfig& output, int64_t in_channels_padded,
                                   const ConvProblem& p, const PrecisionConfig& precision, bool fp32_accum,
                                   bool is_1d_depthwise);

/// tt_metal data_format.cpp get_single_pack_src_format for the final pack into `output`.
DeviceDType GetSinglePackSrcFormat(DeviceDType output, bool fp32_dest_acc, bool bfp8_pack_precise);

/// L1 use per core of one shard layout, as calculate_L1_usage_for_conv_op estimates it (CBs from
/// conv2d_op_program_factory_common.cpp get_cb_info, the output shard, the halo output).
struct L1Usage {
  int64_t cb_bytes = 0;      ///< circular buffers not backed by a tensor
  int64_t tensor_bytes = 0;  ///< the output shard
  int64_t halo_bytes = 0;    ///< halo output: max input sticks per core × channel shard × datum
  int64_t total_bytes = 0;
  int core_count = 1;        ///< max(input cores, output cores)
};
/// sliding_window.cpp calculate_precise_halo_output_elems / generate_shard_boundaries: the largest
/// number of (padded) input sticks one of `num_cores_nhw` cores gathers for its output shard.
int64_t HaloInputSticksPerCore(const ConvProblem& p, int num_cores_nhw);
/// Every dtype in `precision` must be resolved (PrecisionConfig::Resolved).
L1Usage CalculateL1UsageForConvOp(const ConvProblem& p, ShardLayout layout, const PrecisionConfig& resolved,
                                  int grid_x, int grid_y, bool is_mm_conv, Arch arch);
/// conv2d_utils.cpp determine_conv_config_for_auto_shard: height unless block (using ≥ grid_x cores)
/// or width (not for the matmul path) needs less L1. Never kAuto.
ShardLayout DetermineConvConfigForAutoShard(const ConvProblem& p, const PrecisionConfig& resolved, int grid_x,
                                            int grid_y, bool is_mm_conv, Arch arch);

/// ttnn matmul_program_config.cpp create_simple_matmul_program_config (all operands DRAM
/// interleaved): in0_block_w in tiles for an [M, K]×[K, N] matmul. Approximate: the per-core
/// L1 fit (get_per_core_factor, get_multi_dim_per_core_factor) is assumed to hold at 16×16 tiles.
int SimpleMatmulIn0BlockW(int64_t m, int64_t k, int64_t n, int grid_x, int grid_y);

/// The K layouts of prepare_conv2d_weights.cpp (K order, padding, and the K blocks the program
/// runs). C = the conv's input channels, cin_padded = C padded by the program.
/// to_weight_special_padding_tile_layout (height sharded): rows (kh, kw, cin_padded), each kernel
/// row padded to act_block_w_ntiles·32, one block per kernel row; with activation reuse the whole
/// K in one block.
KLayout KLayoutHeightSharded(int64_t C, int64_t cin_padded, int64_t kh, int64_t kw, int act_block_w_ntiles,
                             bool activation_reuse);
/// to_weight_tile_layout_block_sharded: (channel shard, kh, kw, c_local), each shard's kernel row
/// padded to 32 (the whole shard block with full_inner_dim); blocks = ncores_c × kh (× 1 with
/// full_inner_dim).
KLayout KLayoutBlockSharded(int64_t C, int64_t cin_padded, int64_t kh, int64_t kw, int num_cores_c,
                            bool full_inner_dim);
/// to_weight_tile_layout (width sharded): (kh, kw, cin_padded) contiguous, K padded to the block;
/// blocks of act_block_w_ntiles.
KLayout KLayoutWidthSharded(int64_t C, int64_t cin_padded, int64_t kh, int64_t kw, int act_block_w_ntiles);
/// to_weight_interleaved_mm_layout: (kh, kw, C) contiguous, padded to 32 at the end; blocks of
/// in0_block_w tiles.
KLayout KLayoutInterleavedMatmul(int64_t C, int64_t kh, int64_t kw, int in0_block_w);
/// Maps a K layout of the folded conv (channels f = (i·sw + j)·C + c, kernel 1×1) back to the
/// original conv's taps: tap = i·kw + j (kernel == stride), chan = c.
KLayout UnfoldKLayout(const KLayout& folded, int64_t C, int64_t sh, int64_t sw, int64_t kw);
/// Re-splits K into blocks of `ntiles` tiles (Kiln's act_block_w override of in0_block_w).
void ResplitKBlocks(KLayout* k, int ntiles);

/// The version switches resolved to the behaviour of the recorded tt-metal version
/// (docs/specs/tt-metal-followed.md): 2-D depthwise → the pool-multiply program
/// (conv2d_device_operation.cpp select_program_factory); fp32 partials → Tf32 reload;
/// fused HARDSWISH → dropped (unary_op_utils.cpp get_op_init_and_func_default returns {}).
DepthwiseProgram ResolveDepthwiseProgram(DepthwiseProgram d);
PartialReload ResolvePartialReload(PartialReload r);
FusedHardswish ResolveFusedHardswish(FusedHardswish h);

/// conv2d_utils.cpp find_closest_largest_divisor(_with_num_padding)(_and_mult).
uint32_t FindClosestLargestDivisor(uint32_t num, uint32_t start_divisor);
uint32_t FindClosestLargestDivisor(uint32_t num1, uint32_t num2, uint32_t start_divisor);
uint32_t FindClosestLargestDivisorWithNumPadding(uint32_t num, uint32_t start_divisor);
uint32_t FindClosestLargestDivisorWithNumPadding(uint32_t num1, uint32_t num2, uint32_t start_divisor);
uint32_t FindClosestLargestDivisorWithNumPaddingAndMult(uint32_t num, uint32_t start_divisor, uint32_t mult);

}  // namespace kiln::device::tt_emu
