// oneDNN 2.6 plumbing shared by the host kernels that run oneDNN primitives (conv.cc, pooling.cc,
// matmul.cc): the CPU engine, plain (row-major or strided) memory descriptors over host tensors,
// reorders into the formats a primitive chose, and exception → Status conversion (oneDNN's C++ API
// throws dnnl::error; the kernel contract in registry.h forbids throwing).
//
// Threads: primitives run on the calling thread with oneDNN's OpenMP runtime, so the calling
// thread's OpenMP thread count bounds them (the reference backend sets it per call,
// device/backends/reference/reference_backend.cc ApplyThreads).
#pragma once

#include <cstdint>
#include <exception>
#include <new>
#include <string>
#include <unordered_map>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "runtime/host_kernels/kernel_util.h"

namespace kiln::runtime::host_kernels::onednn {

/// The process-wide CPU engine (created on first use).
dnnl::engine& Engine();

inline dnnl::memory::dims Dims(const Shape& v) { return dnnl::memory::dims(v.begin(), v.end()); }

/// A plain descriptor of `dims` with element `strides` (row-major when `strides` is empty).
dnnl::memory::desc Plain(const Shape& dims, dnnl::memory::data_type dt, const Shape& strides = {});

/// `user` in the format `want`: `user` itself when the formats agree, else a reordered copy
/// (executed on `s`).
dnnl::memory Reordered(const dnnl::memory& user, const dnnl::memory::desc& want, dnnl::stream& s);

/// Runs `fn` (returning Result<T> / Status); a dnnl::error becomes INTERNAL ("<node>: oneDNN
/// error ...") or RESOURCE_EXHAUSTED for oneDNN's out-of-memory, std::bad_alloc RESOURCE_EXHAUSTED.
template <typename Fn>
auto Guard(const onnx_fe::Node& n, Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const dnnl::error& e) {
    if (e.status == dnnl_out_of_memory) return ResourceExhausted(n.Describe() + ": oneDNN could not allocate memory");
    return Internal(n.Describe() + ": oneDNN error " + std::to_string(e.status) + ": " + e.what());
  } catch (const std::bad_alloc&) {
    return ResourceExhausted(n.Describe() + ": out of memory");
  } catch (const std::exception& e) {
    return Internal(n.Describe() + ": " + e.what());
  }
}

/// `t` as float32: `t` itself when it is float32, else its converted copy kept in `owned`.
Result<const Tensor*> AsFloat32(const Tensor& t, Tensor& owned);

}  // namespace kiln::runtime::host_kernels::onednn
