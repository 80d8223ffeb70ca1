// oneDNN 2.6 helpers of the element-wise / reduction / normalisation / resampling host kernels
// (unary.cc, binary.cc, reduce.cc, normalization.cc, resize.cc; contract: registry.h), on top of
// the engine, descriptors, guard and float32 view of onednn_exec.h (one CPU engine for the
// process). Memory descriptors are plain row-major (the host tensors' layout). Primitive creation is left to oneDNN's own primitive
// cache (DNNL_PRIMITIVE_CACHE_CAPACITY, 1024 entries by default), so a kernel re-created for the
// same shapes on every run costs a descriptor lookup, not a JIT compilation.
#pragma once

#include <cstdint>
#include <functional>
#include <unordered_map>

#include <oneapi/dnnl/dnnl.hpp>

#include "runtime/host_kernels/kernel_util.h"
#include "runtime/host_kernels/onednn_exec.h"

namespace kiln::runtime::host_kernels {

/// The process's oneDNN CPU engine (onednn::Engine).
inline dnnl::engine& DnnEngine() { return onednn::Engine(); }
/// A plain row-major f32 (or `dt`) descriptor of `shape`; rank 0 is described as {1}.
dnnl::memory::desc DnnDesc(const Shape& shape, dnnl::memory::data_type dt = dnnl::memory::data_type::f32);
/// A memory object over `data` (not owned) with descriptor `md`.
dnnl::memory DnnMem(const dnnl::memory::desc& md, const void* data);
/// Below this many bytes in its largest argument a primitive runs on the calling thread alone:
/// forking OpenMP threads costs more than such a primitive (measured on this 2-core machine,
/// oneDNN 2.6 eltwise relu over 16 floats: ~430 us with the default OpenMP threads on a loaded
/// machine, 0.4 us on one; primitive descriptor creation ~5 us, primitive creation from oneDNN's
/// cache ~1 us, so kernels need no primitive cache of their own).
inline constexpr size_t kDnnSingleThreadBytes = size_t{128} << 10;
/// Executes `prim` with `args` on a stream of DnnEngine() and waits for it (single-threaded below
/// kDnnSingleThreadBytes, see above).
void DnnExecute(const dnnl::primitive& prim, const std::unordered_map<int, dnnl::memory>& args);

/// onednn::Guard for a Status-returning `fn` (nothing throws across the registry).
inline Status DnnGuard(const onnx_fe::Node& n, const std::function<Status()>& fn) { return onednn::Guard(n, fn); }

/// Splits `rows` rows of `row_elems` elements each into chunks of about kCancelPollWork elements
/// (at least one row), calls fn(first_row, row_count) for each and checks the cancel token after
/// each chunk (registry.h contract: one oneDNN call never runs longer than a few ms). Stops at the
/// first error.
Status ForRowChunks(int64_t rows, int64_t row_elems, const device::CancelToken* cancel,
                    const std::function<Status(int64_t, int64_t)>& fn);

/// float32 input for a float32 primitive: `t` itself when it is float32, else a copy held in the
/// second argument (onednn::AsFloat32).
using onednn::AsFloat32;
/// `y` (float32) converted back to `dtype` (a no-op for float32).
Result<Tensor> FromFloat32(Tensor y, device::DataType dtype);
/// float32, float16, bfloat16: the types oneDNN-path kernels take (float16 / bfloat16 computed in
/// float32: the CPU's oneDNN 2.6 computes them natively only with AVX-512 extensions).
bool IsDnnFloat(device::DataType d);

}  // namespace kiln::runtime::host_kernels
