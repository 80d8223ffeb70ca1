// The advisor's cost model: the constants and formulas of api/advisor/cost_model.h (sources there).
#include "api/advisor/cost_model.h"

#include <algorithm>
#include <cmath>

namespace kiln::api::advisor {
namespace {

constexpr double kTile = 32;
constexpr double kMatmulMacsPerCycle = 2048;     // 8×16 SrcB · 16×16 SrcA per MVMUL
constexpr double kEltwiseMacsPerCycle = 128;     // depthwise programs (assumption)
constexpr double kDramBytesPerCycle = 288;       // n150: 288 GB/s at 1 GHz
constexpr double kNocBytesPerCycle = 32;         // one NoC link per core
constexpr double kPackBytesPerCycle = 64;        // packer / unpacker width (assumption)
constexpr double kDstSyncCycles = 64;            // per Dst acquire/release (assumption)
constexpr double kReloadCopyCyclesPerTile = 16;  // copy_block_matmul_partials: one datacopy pass
constexpr int kDefaultCores = 56;                // height-sharded n150 convs in the shipped models

double Tiles(double n) { return std::ceil(n / kTile); }

}  // namespace

double BytesPerValue(device::DeviceDType dtype) {
  switch (dtype) {
    case device::DeviceDType::kFloat32: return 4.0;
    case device::DeviceDType::kBFloat16: return 2.0;
    case device::DeviceDType::kBFloat8B: return 1088.0 / 1024.0;  // 1.0625
    case device::DeviceDType::kBFloat4B: return 576.0 / 1024.0;   // 0.5625
  }
  return 2.0;
}

// The enum values are the phase counts (device/numerics/types.h NumPhases).
int FidelityPhases(device::MathFidelity fidelity) { return static_cast<int>(fidelity); }

device::PrecisionConfig BaselinePrecision(const device::PrecisionConfig& base) {
  device::PrecisionConfig p = base;
  p.math_fidelity = device::MathFidelity::kHiFi4;
  p.weights_dtype = device::DeviceDType::kBFloat16;
  return p;
}

LayerCost EstimateLayerCost(const LayerGeometry& layer, const std::optional<device::ProgramReport>& program,
                            const device::PrecisionConfig& precision) {
  const device::PrecisionConfig p = precision.Resolved();
  const double cores = std::max(1, program && program->num_cores > 0 ? program->num_cores : kDefaultCores);
  const std::string path = program ? program->path : "conv2d";
  const double cin_padded =
      program && program->cin_padded > 0 ? static_cast<double>(program->cin_padded) : static_cast<double>(layer.in_channels);
  const double m = static_cast<double>(layer.batch * layer.out_h * layer.out_w);
  const double k_values = static_cast<double>(layer.kernel_h) * kTile * Tiles(cin_padded * static_cast<double>(layer.kernel_w));
  const double m_t = Tiles(m), n_t = Tiles(static_cast<double>(layer.out_channels)), k_t = Tiles(k_values);
  const double phases = FidelityPhases(p.math_fidelity);

  LayerCost c;
  const bool depthwise = path == "depthwise_2d" || path == "depthwise_1d";
  if (depthwise) {
    const double macs = m * static_cast<double>(layer.out_channels * layer.kernel_h * layer.kernel_w);
    c.math_cycles = macs * phases / (kEltwiseMacsPerCycle * cores);
  } else {
    c.math_cycles = m_t * n_t * k_t * kTile * kTile * kTile * phases / (kMatmulMacsPerCycle * cores);
  }

  const double w_bytes = BytesPerValue(*p.weights_dtype);
  const double weight_values = depthwise ? static_cast<double>(layer.out_channels * layer.kernel_h * layer.kernel_w)
                                         : n_t * kTile * k_t * kTile;
  const double in_values = static_cast<double>(layer.batch * layer.in_channels * layer.in_h * layer.in_w);
  const double out_values = m * static_cast<double>(layer.out_channels);
  const double weight_bytes = weight_values * w_bytes + (layer.bias ? n_t * kTile * w_bytes : 0.0);
  const double act_bytes = in_values * BytesPerValue(p.input_dtype) + out_values * BytesPerValue(*p.output_dtype);
  c.bytes = weight_bytes + act_bytes;
  c.data_cycles = weight_bytes / kDramBytesPerCycle + act_bytes / (cores * kNocBytesPerCycle);

  // Dst and packing, per core (cores work in parallel).
  const double out_tiles = m_t * n_t / cores;
  const double tile = kTile * kTile;
  const int k_blocks = std::max(1, program && program->k_blocks > 0 ? program->k_blocks : static_cast<int>(layer.kernel_h));
  const double dst_tiles = *p.fp32_dest_acc_en ? 4 : 8;
  const double out_bytes = BytesPerValue(*p.output_dtype);
  const double partial_bytes =
      program ? BytesPerValue(program->partials_dtype) : (p.packer_l1_acc ? 4.0 : out_bytes);
  const bool l1_acc = program ? program->l1_acc_effective : false;
  const double spills = k_blocks - 1;
  double pack = out_tiles * tile * out_bytes / kPackBytesPerCycle;  // final pack
  if (l1_acc) {
    pack += spills * out_tiles * 2 * tile * partial_bytes / kPackBytesPerCycle;
  } else {
    pack += spills * out_tiles * (2 * tile * partial_bytes / kPackBytesPerCycle + kReloadCopyCyclesPerTile);
  }
  pack += std::ceil(out_tiles / dst_tiles) * k_blocks * kDstSyncCycles;
  c.pack_cycles = pack;
  c.cycles = std::max(c.math_cycles, c.data_cycles) + c.pack_cycles;
  return c;
}

}  // namespace kiln::api::advisor
