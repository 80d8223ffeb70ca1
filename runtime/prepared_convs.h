// Prepared convs of one plan on one backend instance (library kiln_runtime): the state that
// outlives a run — a backend's PreparedConv (device/backends/backend.h: for the reference backend
// its oneDNN primitive and the weights already reordered into the primitive's format) per conv2d
// part of the plan and input shape. This is the only owner of such state in the runtime.
//
// Owner and lifetime: whoever keeps a plan for repeated runs on one backend instance creates one
// next to it and passes it in RunOptions::prepared (runtime/executor.h); it holds the plan
// (shared_ptr) and refers to the backend, which must outlive it. A run whose plan or device
// backend is not this cache's runs unprepared (the cache is ignored, nothing is wrong).
//
// Bound: per conv2d part, at most `max_shapes` (default kDefaultMaxShapes = 2) input shapes ×
// layouts × precisions × residual forms; the least recently used one is dropped beyond that. So the memory held is
// at most max_shapes × (the plan's conv2d weights and biases in the backend's format, which for
// oneDNN's blocked formats is the weight bytes rounded up to channel blocks of 8/16, plus one
// primitive descriptor per conv).
//
// Thread safety: any number of threads may call Acquire; an entry (PreparedConv) is used by one
// thread at a time (the backend contract) — a second concurrent user of the same entry gets none
// and runs unprepared instead of waiting.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "common/status.h"
#include "compiler/convplan/plan.h"
#include "device/backends/backend.h"
#include "device/backends/precision.h"
#include "device/tensor.h"

namespace kiln::runtime {

class PreparedConvs {
 public:
  static constexpr int kDefaultMaxShapes = 2;

  /// `plan` must not be null; `backend` must outlive this object. max_shapes < 1 counts as 1.
  PreparedConvs(std::shared_ptr<const convplan::ConvPlan> plan, device::Backend& backend,
                int max_shapes = kDefaultMaxShapes);
  PreparedConvs(const PreparedConvs&) = delete;
  PreparedConvs& operator=(const PreparedConvs&) = delete;

  const convplan::ConvPlan& plan() const { return *plan_; }
  device::Backend& backend() const { return backend_; }
  /// True when runs of `plan` on `backend` can use this cache.
  bool Serves(const convplan::ConvPlan& plan, const device::Backend& backend) const {
    return &plan == plan_.get() && &backend == &backend_;
  }

  /// Exclusive use of one prepared conv; releases it when destroyed.
  class Lease {
   public:
    Lease() = default;
    device::PreparedConv* get() const { return conv_; }
    explicit operator bool() const { return conv_ != nullptr; }
    /// The backend answered UNIMPLEMENTED for this fused residual add (remembered; ask without).
    bool unsupported() const { return unsupported_; }

   private:
    friend class PreparedConvs;
    std::unique_lock<std::mutex> lock_;
    device::PreparedConv* conv_ = nullptr;
    bool unsupported_ = false;
  };

  /// The prepared conv of part `part` of plan op `op_index` (a kConv2d DeviceOp) for inputs of
  /// `input_shape` / `layout`, with `params` (the op's geometry; the activation may differ from
  /// the plan's when it runs on the host) at `precision`; created with Backend::PrepareConv2d on
  /// first use. With `residual` (the activation after the add) the conv is prepared with the
  /// residual add fused (Backend::PrepareConv2dResidual; only for a single-part op); where the
  /// backend answers UNIMPLEMENTED the Lease is empty and unsupported() (kept, not asked again).
  /// An empty Lease when the entry is in use by another thread. Errors: INVALID_ARGUMENT for an
  /// op index / part that is not a conv2d part of the plan; the backend's other errors.
  Result<Lease> Acquire(size_t op_index, size_t part, const std::vector<int64_t>& input_shape, device::Layout layout,
                        const device::Conv2dParams& params, const device::PrecisionConfig& precision,
                        std::optional<device::Activation> residual = std::nullopt);

  /// Entries held now (all ops, all shapes); for tests and reports.
  size_t size() const;

 private:
  struct Entry {
    std::vector<int64_t> input_shape;
    device::Layout layout = device::Layout::kNCHW;
    device::Conv2dParams params;
    device::PrecisionConfig precision;
    std::optional<device::Activation> residual;
    std::unique_ptr<device::PreparedConv> conv;  // null: the backend cannot fuse this residual add
    std::mutex in_use;
  };
  // Most recently used first; at most max_shapes_ entries.
  using Slot = std::list<std::unique_ptr<Entry>>;

  std::shared_ptr<const convplan::ConvPlan> plan_;
  device::Backend& backend_;
  size_t max_shapes_;
  mutable std::mutex mu_;
  std::vector<std::vector<Slot>> slots_;  // [op index][part]
};

}  // namespace kiln::runtime
