// Element copies of the data-movement host kernels (shape.cc, slice.cc, gather.cc, expand.cc,
// pad.cc, depth.cc): every such op is "output element o comes from source element
// base + Σ_d map_d(o_d)" (or a fill value), with one map per output dim. MoveElements runs that
// copy for any element type by element size (bytes, never converted), with memcpy for contiguous
// runs and a blocked 2-D transpose where the last two output dims swap their source strides.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "runtime/host_kernels/kernel_util.h"

namespace kiln::runtime::host_kernels {

/// A table entry meaning "this output index takes the fill value" (Pad's constant mode).
inline constexpr int64_t kFill = std::numeric_limits<int64_t>::min();

/// How the index along one output dim maps to a source element offset (in elements).
struct DimMap {
  /// Offset of output index o: o * stride (0 broadcasts, negative walks backwards) ...
  int64_t stride = 0;
  /// ... unless `table` is non-empty: then table[o] (one entry per output index), or kFill.
  std::vector<int64_t> table;
};

/// maps[d].stride = strides[d] for every d (a strided view of the source).
std::vector<DimMap> StridedMaps(const std::vector<int64_t>& strides);

/// Fills `y` (allocated with its shape and x's element type; row-major):
/// y[o] = x[base + Σ_d maps[d](o[d])], or the element at `fill` (DataTypeSize bytes) where some
/// table gives kFill. maps.size() == y.rank(). Checks ctx.cancel every kCancelPollWork elements.
/// INTERNAL when the maps reach outside x (a kernel bug; checked before copying, never UB), when
/// the element types differ, or when a kFill appears without `fill`.
Status MoveElements(const Tensor& x, int64_t base, std::vector<DimMap> maps, const std::byte* fill, Tensor& y,
                    const device::CancelToken* cancel);
/// The same with y's elements indexed by `view`, a shape of y's element count (Tile writes its
/// output as [r0, d0, r1, d1, ...]; Gather as data[:axis] + [indices count] + data[axis+1:]).
Status MoveElements(const Tensor& x, int64_t base, std::vector<DimMap> maps, const Shape& view, const std::byte* fill,
                    Tensor& y, const device::CancelToken* cancel);

/// Bytes of the data-movement output `shape` when the element type is not known from shapes
/// alone: TensorBytes(shape, 8), the largest element (registry.h contract).
inline int64_t AnyTypeBytes(const Shape& shape) { return TensorBytes(shape, 8); }

}  // namespace kiln::runtime::host_kernels
