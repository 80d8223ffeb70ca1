#include "device/numerics/pcc.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace kiln::numerics {

Result<PccResult> CompPcc(std::span<const float> golden, std::span<const float> calc, double threshold) {
  if (golden.size() != calc.size())
    return InvalidArgument("CompPcc: sizes differ (" + std::to_string(golden.size()) + " vs " +
                           std::to_string(calc.size()) + ")");
  const size_t n = golden.size();
  auto all_nan = [](std::span<const float> v) {
    return std::all_of(v.begin(), v.end(), [](float x) { return std::isnan(x); });
  };
  auto any_nonzero = [](std::span<const float> v) {
    return std::any_of(v.begin(), v.end(), [](float x) { return x != 0.0f || std::isnan(x); });
  };
  bool gn = all_nan(golden), cn = all_nan(calc);
  if (gn && cn) return PccResult{true, 1.0};
  if (gn || cn) return PccResult{false, 0.0};
  if (any_nonzero(golden) != any_nonzero(calc)) return PccResult{false, 0.0};
  std::vector<double> x(n), y(n);
  auto clean = [](float v) { return std::isfinite(v) ? static_cast<double>(v) : 0.0; };
  bool equal = true;
  for (size_t i = 0; i < n; ++i) {
    x[i] = clean(golden[i]);
    y[i] = clean(calc[i]);
    if (x[i] != y[i]) equal = false;  // torch.equal on the cleaned float tensors
  }
  if (equal) return PccResult{true, 1.0};
  if (n < 2) return PccResult{true, 1.0};  // covariance undefined: everything masked
  double mx = 0, my = 0;
  for (size_t i = 0; i < n; ++i) {
    mx += x[i];
    my += y[i];
  }
  mx /= static_cast<double>(n);
  my /= static_cast<double>(n);
  double sxx = 0, syy = 0, sxy = 0;
  for (size_t i = 0; i < n; ++i) {
    double dx = x[i] - mx, dy = y[i] - my;
    sxx += dx * dx;
    syy += dy * dy;
    sxy += dx * dy;
  }
  double denom = static_cast<double>(n - 1);
  double cxx = sxx / denom, cyy = syy / denom, cxy = sxy / denom;
  // np.ma.corrcoef: c / sqrt(outer(d, d)); entries dividing by 0 are masked. min over the unmasked.
  // A constant tensor is detected directly (its variance can come out as a tiny non-zero number
  // when the mean is inexact; docs/specs/tt-numerics.md §9.3 specifies the masked outcome).
  auto constant = [](const std::vector<double>& v) {
    return std::all_of(v.begin(), v.end(), [&](double e) { return e == v.front(); });
  };
  const bool x_const = cxx == 0.0 || constant(x), y_const = cyy == 0.0 || constant(y);
  if (x_const && y_const) return PccResult{true, 1.0};
  if (x_const || y_const) return PccResult{1.0 >= threshold, 1.0};
  double r = cxy / std::sqrt(cxx * cyy);
  double diag = 1.0;  // c_ii / sqrt(c_ii·c_ii) is exactly 1 in IEEE arithmetic
  double pcc = std::min(diag, r);
  return PccResult{pcc >= threshold, pcc};
}

double ConvPccThreshold(const ConvPccRuleInput& in) {
  double t;
  if (in.custom > 0.0) {
    t = in.custom;
  } else if (!in.fp32_accum) {
    t = in.cin_kh_kw > 10000 ? 0.97 : 0.985;
  } else if (in.fidelity == MathFidelity::kLoFi && in.bfp8_output) {
    t = 0.996;
  } else if (in.activation == Activation::kSigmoid) {
    t = 0.995;
  } else {
    t = 0.997;
  }
  if (in.activation == Activation::kTanh) t *= 0.99;
  return t;
}

double ConvTransposePccThreshold(bool fp32_accum, MathFidelity fidelity, bool bfp8_output) {
  if (!fp32_accum) return 0.99;
  if (fidelity == MathFidelity::kLoFi && bfp8_output) return 0.9969;
  return 0.998;
}

Result<bool> FastCompare(std::span<const float> ref, std::span<const float> out, int64_t cin_kh_kw,
                         bool fp32_accum_no_bfp8) {
  if (ref.size() != out.size()) return InvalidArgument("FastCompare: sizes differ");
  if (cin_kh_kw < 1) return InvalidArgument("FastCompare: Cin*kh*kw must be >= 1");
  double lg = std::log2(static_cast<double>(cin_kh_kw));
  double bound = fp32_accum_no_bfp8 ? 0.3 + 0.005 * lg : 0.3 + 0.1 * lg;
  double mean_abs = 0;
  for (float v : ref) mean_abs += std::fabs(static_cast<double>(v));
  mean_abs /= ref.empty() ? 1.0 : static_cast<double>(ref.size());
  for (size_t i = 0; i < ref.size(); ++i) {
    double diff = std::fabs(static_cast<double>(ref[i]) - static_cast<double>(out[i])) / mean_abs;
    if (!(diff < bound)) return false;
  }
  auto pcc = CompPcc(ref, out, 0.0);
  if (!pcc.ok()) return pcc.status();
  if (pcc->pcc == 1.0) {
    for (size_t i = 0; i < ref.size(); ++i)
      if (!(ref[i] == out[i])) return false;
  }
  return true;
}

}  // namespace kiln::numerics
