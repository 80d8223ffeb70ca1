#include "compiler/ai8x/chip.h"

#include <algorithm>
#include <cctype>

namespace kiln::ai8x {
namespace {

// izer/tornadocnn.py class Dev85 (MAX78000).
constexpr ChipSpec kMax78000{
    .chip = Chip::kMAX78000,
    .name = "MAX78000",
    .izer_number = 85,
    .max_layers = 32,
    .max_processors = 64,
    .processors_per_group = 16,
    .num_groups = 4,
    .processors_per_instance = 4,
    .data_instance_bytes = 2048 * 16,  // INSTANCE_WIDTH 2048 -> 0x8000
    .num_data_instances = 16,
    .max_row_col = 1024,
    .kernel_words_small = 768,
    .kernel_words_large = 768,
    .bias_bytes_per_group = 512,
    .max_channels = 1024,
    .frame_size_max = int64_t{1} << 21,
    .max_stream_layers = 8,
    .max_pool_dilation = 1,
    .max_linear_features = 1024,
    .max_flatten_pixels = 256,
    .max_pool_size = 16,
    .support_depthwise = false,
    .support_multipass_padded_conv1d = true,
    .support_streaming_passthrough = true,
    .require_passthrough_avgpool_after_eltwise = false,
    .emulate_eltwise_mp = true,
    .support_multipass_eltwise_conv_bias = true,
    .support_binary_weights = false,
    .support_stream_bias = false,
    .require_flatten_bias_first = true,
    .support_read_gap = false,
};

// izer/tornadocnn.py class Dev87 (MAX78002).
constexpr ChipSpec kMax78002{
    .chip = Chip::kMAX78002,
    .name = "MAX78002",
    .izer_number = 87,
    .max_layers = 128,
    .max_processors = 64,
    .processors_per_group = 16,
    .num_groups = 4,
    .processors_per_instance = 4,
    .data_instance_bytes = 5120 * 16,  // INSTANCE_WIDTH 5120 -> 0x14000
    .num_data_instances = 16,
    .max_row_col = 2048,
    .kernel_words_small = 4096,
    .kernel_words_large = 5120,
    .bias_bytes_per_group = 2048,
    .max_channels = 1024,
    .frame_size_max = int64_t{1} << 21,
    .max_stream_layers = 8,
    .max_pool_dilation = 16,
    .max_linear_features = 1024,
    .max_flatten_pixels = 256,
    .max_pool_size = 16,
    .support_depthwise = true,
    .support_multipass_padded_conv1d = false,
    .support_streaming_passthrough = false,
    .require_passthrough_avgpool_after_eltwise = true,
    .emulate_eltwise_mp = false,
    .support_multipass_eltwise_conv_bias = false,
    .support_binary_weights = true,
    .support_stream_bias = true,
    .require_flatten_bias_first = false,
    .support_read_gap = true,
};

}  // namespace

const ChipSpec& GetChipSpec(Chip chip) {
  return chip == Chip::kMAX78002 ? kMax78002 : kMax78000;
}

const char* ChipName(Chip chip) { return GetChipSpec(chip).name; }

Result<Chip> ParseChip(std::string_view text) {
  std::string up(text);
  std::transform(up.begin(), up.end(), up.begin(), [](unsigned char c) { return std::toupper(c); });
  if (up == "MAX78000" || up == "AI85" || up == "85") return Chip::kMAX78000;
  if (up == "MAX78002" || up == "AI87" || up == "87") return Chip::kMAX78002;
  return InvalidArgument("unknown ai8x device '" + std::string(text) +
                         "' (accepted: MAX78000, AI85, 85, MAX78002, AI87, 87)");
}

}  // namespace kiln::ai8x
