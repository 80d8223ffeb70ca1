// PCC and the conv-test acceptance rules of tt-metal (docs/specs/tt-numerics.md §9).
#pragma once

#include <cstdint>
#include <span>

#include "common/status.h"
#include "device/numerics/types.h"

namespace kiln::numerics {

/// Outcome of comp_pcc: pass flag and the PCC value reported by tt-metal.
struct PccResult {
  bool pass = false;
  double pcc = 0.0;
};

/// tt-metal's comp_pcc(golden, calculated, pcc) (§9.3), every branch:
///  both all-NaN → pass 1.0; exactly one all-NaN → fail 0.0; exactly one all-zero (its "any
///  non-zero" flag differs; NaN counts as non-zero) → fail 0.0; NaN/±Inf → 0 in copies; equal → pass
///  1.0; otherwise the minimum of the masked 2×2 correlation matrix, computed in double: masked
///  (both constant, or fewer than 2 elements) → pass 1.0; one constant → 1.0 (pass iff 1.0 ≥ threshold);
///  else pass iff r ≥ threshold, with r = min(1, cov/(σx·σy)).
/// Empty inputs count as all-NaN (torch.all of an empty tensor is true).
/// Errors: INVALID_ARGUMENT when the sizes differ.
Result<PccResult> CompPcc(std::span<const float> golden, std::span<const float> calculated, double threshold = 0.99);

/// Inputs of the run_conv threshold rule (§9.1).
struct ConvPccRuleInput {
  bool fp32_accum = false;           ///< fp32_dest_acc_en
  MathFidelity fidelity = MathFidelity::kHiFi4;
  bool bfp8_output = false;          ///< output dtype is bfloat8_b
  Activation activation = Activation::kNone;  ///< fused activation (device/numerics/types.h)
  int64_t cin_kh_kw = 0;             ///< Cin·kh·kw (input channels times kernel area)
  double custom = 0.0;               ///< > 0: a custom PCC given by the test, used as is
};

/// run_conv's PCC threshold (§9.1): custom; else !fp32 → 0.985 (0.97 when Cin·kh·kw > 10000);
/// else LoFi+bfp8 out → 0.996; else sigmoid → 0.995; else 0.997; tanh multiplies by 0.99.
double ConvPccThreshold(const ConvPccRuleInput& in);

/// conv_transpose2d threshold (§9.1): 0.99 without fp32 accumulation; 0.9969 for LoFi + bfp8 output;
/// otherwise 0.998.
double ConvTransposePccThreshold(bool fp32_accum, MathFidelity fidelity, bool bfp8_output);

/// `fast_compare` of the DRAM-slice tests (§9.2): every |ref − out| / mean(|ref|) must be below
/// 0.3 + 0.005·log2(Cin·kh·kw) when `fp32_accum_no_bfp8`, else 0.3 + 0.1·log2(Cin·kh·kw); when the
/// PCC is exactly 1, exact equality is also required.
/// Errors: INVALID_ARGUMENT when sizes differ or cin_kh_kw < 1.
Result<bool> FastCompare(std::span<const float> ref, std::span<const float> out, int64_t cin_kh_kw,
                         bool fp32_accum_no_bfp8);

}  // namespace kiln::numerics
