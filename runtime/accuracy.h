// The accuracy policy of a plan run (runtime/executor.h): which PCC threshold applies to a device
// op, and how a device result is compared with its fp32 reference.
//
// * Threshold: tt-metal's run_conv rule for the resolved precision (device/numerics/pcc.h
//   ConvPccThreshold, with Cin·kh·kw = total input channels times kernel area and the op's fused
//   activation; ConvTransposePccThreshold for transposed convs; none (0) for device adds), or a
//   custom threshold > 0
//   (tt-metal's "custom PCC") that replaces the rule for every device op.
// * Comparison: comp_pcc (device/numerics/pcc.h, tt-metal's comp_pcc) of the reference vs the
//   device values over all the op's outputs concatenated (empty outputs skipped), the max
//   |device − reference| (NaN when any difference is NaN), and pass = comp_pcc's pass at the
//   threshold. Threshold 0 (host ops) means no threshold: pass is always true.
// * Like tt-metal's conv tests (check_with_pcc_without_tensor_printout after casting the torch
//   reference to the output dtype), a device op's reference is first rounded to bfloat16 (RNE, as
//   torch's .to(torch.bfloat16)) when the device output is bfloat16 or a block-float format (which
//   ttnn.to_torch returns as bfloat16); float32 outputs compare unrounded.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "compiler/convplan/plan.h"
#include "device/backends/precision.h"
#include "device/tensor.h"

namespace kiln::runtime {

/// The PCC threshold of device op `op` at `precision`; `custom` > 0 replaces the rule.
double PccThreshold(const convplan::DeviceOp& op, const device::PrecisionConfig& precision, double custom);

struct Comparison {
  double pcc = 0.0;            ///< comp_pcc value
  double max_abs_error = 0.0;  ///< max |device − reference|
  double threshold = 0.0;      ///< the threshold compared against (0: none)
  bool pass = true;            ///< comp_pcc pass at `threshold` (always true without one)
};

/// Compares `device` with `reference` (same count, same shapes per entry) at `threshold` (see the
/// header comment). INTERNAL "op 'NAME': device and reference output shapes differ" when shapes
/// disagree; comp_pcc's errors.
/// `reference_dtype`: the device output dtype the reference is cast to first (see the header);
/// nullopt = no cast (host ops).
Result<Comparison> CompareOutputs(const std::vector<device::Tensor>& device, const std::vector<device::Tensor>& reference,
                                  double threshold, const std::string& op_name,
                                  std::optional<device::DeviceDType> reference_dtype = std::nullopt);

}  // namespace kiln::runtime
