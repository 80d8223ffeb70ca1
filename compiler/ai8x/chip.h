// MAX78000 / MAX78002 chip constants (`Chip`, `ChipSpec`) as the izer (ai8x-synthesis) uses them.
//
// Source: ai8x-synthesis `izer/tornadocnn.py` (classes Dev85 L175-321 and Dev87 L324-545 at commit
// ab4f4c0), summarised in docs/specs/ai8x-izer-rules.md §1.4. Where the izer's README disagrees
// with its code (docs/specs/ai8x-izer-rules.md §1.9) the code wins, because the code is what
// rejects a YAML file.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace kiln::ai8x {

/// The two supported accelerators.
enum class Chip {
  kMAX78000,  ///< "ai85", izer device 85
  kMAX78002,  ///< "ai87", izer device 87
};

/// Hardware limits of one chip. All sizes in bytes unless stated otherwise.
struct ChipSpec {
  Chip chip;
  const char* name;      ///< "MAX78000" (what `ai8xize.py --device` accepts)
  int izer_number;       ///< 85 / 87

  int max_layers;        ///< MAX_LAYERS: hardware layers (32 / 128)
  int max_processors;    ///< MAX_PROC = P_NUMGROUPS * P_NUMPRO = 64
  int processors_per_group;  ///< P_NUMPRO = 16 (one quadrant)
  int num_groups;        ///< P_NUMGROUPS = 4
  int processors_per_instance;  ///< P_SHARED = 4 processors share one data-memory instance
  int data_instance_bytes;  ///< INSTANCE_WIDTH*16: 0x8000 / 0x14000 per data-memory instance
  int num_data_instances;   ///< 16
  int max_row_col;       ///< MAX_ROW_COL: H and W must not exceed this (1024 / 2048)
  int kernel_words_small;   ///< MASK_WIDTH_SMALL: 72-bit kernel words per processor (768 / 4096)
  int kernel_words_large;   ///< mask width of processors 0,16,32,48 (768 / 5120)
  int bias_bytes_per_group;  ///< BIAS_SIZE per quadrant (512 / 2048)
  int max_channels;      ///< MAX_CHANNELS = 1024 (both devices in code)
  int64_t frame_size_max;  ///< FRAME_SIZE_MAX = 2^21 (H*W*passes)
  int max_stream_layers;  ///< MAX_STREAM_LAYERS = 8
  int max_pool_dilation;  ///< MAX_POOL_DILATION (1 / 16)
  int max_linear_features;  ///< ai8x.py Linear: in/out features <= 1024
  int max_flatten_pixels;  ///< izer.py L547-550: pooled H*W <= 256 for flatten
  int max_pool_size;     ///< ai8x.py asserts: pooling kernel and stride 1..16

  bool support_depthwise;   ///< SUPPORT_DEPTHWISE (groups > 1)
  bool support_multipass_padded_conv1d;  ///< false on ai87: conv1d with >64 in-channels needs pad 0
  bool support_streaming_passthrough;    ///< SUPPORT_STREAMING_PASSTHROUGH
  bool require_passthrough_avgpool_after_eltwise;  ///< izer inserts a hidden layer (counts)
  bool emulate_eltwise_mp;  ///< EMULATE_ELTWISE_MP: >2 passes x operands cannot pool/convolve
  bool support_multipass_eltwise_conv_bias;  ///< false on ai87 (max7800x.py L2074-2080)
  bool support_binary_weights;  ///< SUPPORT_BINARY_WEIGHTS (quantization -1)
  /// SUPPORT_STREAM_BIAS (tornadocnn.py): false on ai85, where a streaming layer with a bias may not
  /// compute correctly (kbias.py L222-224 warns) and a streaming layer 0 takes one more bias byte
  /// (kbias.py L80-81, L230-233).
  bool support_stream_bias;
  /// REQUIRE_FLATTEN_BIAS_FIRST (tornadocnn.py): true on ai85, where the biases of `flatten` layers
  /// are placed before every other layer's (kbias.py L181-183, bias_sort).
  bool require_flatten_bias_first;
  /// SUPPORT_MULTIPASS_STRIDE: `read_gap` (a layer reads every (gap+1)-th word of its input);
  /// max7800x.py L687-692 allows it only on single-pass inputs (SUPPORT_MULTIPASS_READ_STRIDE is
  /// false on both devices).
  bool support_read_gap;

  /// Kernel memory of processor `p` in 72-bit words (`mask_width()`: on ai87 processors 0, 16,
  /// 32 and 48 have the large 5120-word memory).
  int KernelWords(int p) const { return p % processors_per_group == 0 ? kernel_words_large : kernel_words_small; }
};

/// The constants of `chip`. Never fails.
const ChipSpec& GetChipSpec(Chip chip);

/// Parses what `ai8xize.py --device` accepts (izer/devices.py L16-42): "MAX78000", "AI85", "85",
/// "MAX78002", "AI87", "87" (case-insensitive).
/// Errors: INVALID_ARGUMENT naming the value and the accepted spellings.
Result<Chip> ParseChip(std::string_view text);

/// "MAX78000" / "MAX78002".
const char* ChipName(Chip chip);

}  // namespace kiln::ai8x
