// Saturating int64 arithmetic for size estimates (bytes, elements, multiply-adds): a sum or product
// that would overflow gives INT64_MAX, so an absurd shape reads as "too large", never as small.
#pragma once

#include <algorithm>
#include <climits>
#include <cstdint>
#include <vector>

namespace kiln {

/// a + b for a, b >= 0, INT64_MAX on overflow.
inline int64_t SatAdd(int64_t a, int64_t b) { return a > INT64_MAX - b ? INT64_MAX : a + b; }
/// a · b, 0 when either is <= 0, INT64_MAX on overflow.
inline int64_t SatMul(int64_t a, int64_t b) {
  if (a <= 0 || b <= 0) return 0;
  return a > INT64_MAX / b ? INT64_MAX : a * b;
}
/// Elements of `shape` (negative dims count as 0; a scalar's {} is 1 element).
inline int64_t SatElements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n = SatMul(n, std::max<int64_t>(d, 0));
  return shape.empty() ? 1 : n;
}

}  // namespace kiln
