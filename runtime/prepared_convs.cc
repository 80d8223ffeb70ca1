#include "runtime/prepared_convs.h"

#include <algorithm>
#include <string>
#include <utility>

namespace kiln::runtime {

using convplan::DeviceOp;
using convplan::DeviceOpKind;

PreparedConvs::PreparedConvs(std::shared_ptr<const convplan::ConvPlan> plan, device::Backend& backend, int max_shapes)
    : plan_(std::move(plan)), backend_(backend), max_shapes_(static_cast<size_t>(std::max(1, max_shapes))) {
  slots_.resize(plan_->ops.size());
  for (size_t i = 0; i < plan_->ops.size(); ++i) {
    const auto& op = plan_->ops[i];
    if (op.on_device() && op.device().kind == DeviceOpKind::kConv2d) slots_[i].resize(op.device().inputs.size());
  }
}

Result<PreparedConvs::Lease> PreparedConvs::Acquire(size_t op_index, size_t part,
                                                    const std::vector<int64_t>& input_shape, device::Layout layout,
                                                    const device::Conv2dParams& params,
                                                    const device::PrecisionConfig& precision,
                                                    std::optional<device::Activation> residual) {
  if (op_index >= slots_.size() || part >= slots_[op_index].size()) {
    return InvalidArgument("prepared convs: op " + std::to_string(op_index) + " part " + std::to_string(part) +
                           " is not a conv2d part of the plan");
  }
  std::unique_lock<std::mutex> lock(mu_);
  Slot& slot = slots_[op_index][part];
  auto it = std::find_if(slot.begin(), slot.end(), [&](const std::unique_ptr<Entry>& e) {
    return e->input_shape == input_shape && e->layout == layout && e->params == params &&
           e->precision == precision && e->residual == residual;
  });
  if (it == slot.end()) {
    // Prepared under the cache lock: preparing the same conv twice from two threads would be
    // wasted work, and preparation happens once per shape.
    const DeviceOp& d = plan_->ops[op_index].device();
    const device::Tensor* bias = d.inputs.size() == 1 && d.bias ? &*d.bias : nullptr;
    if (residual && d.inputs.size() != 1) {
      return InvalidArgument("prepared convs: a residual add is fused only into a single-part conv");
    }
    auto conv = residual ? backend_.PrepareConv2dResidual(input_shape, layout, d.weights[part], bias, params,
                                                          *residual, precision)
                         : backend_.PrepareConv2d(input_shape, layout, d.weights[part], bias, params, precision);
    if (!conv.ok() && !(residual && conv.status().code() == StatusCode::kUnimplemented)) return conv.status();
    auto e = std::make_unique<Entry>();
    e->input_shape = input_shape;
    e->layout = layout;
    e->params = params;
    e->precision = precision;
    e->residual = residual;
    if (conv.ok()) e->conv = std::move(*conv);
    slot.push_front(std::move(e));
    it = slot.begin();
    // Drop the least recently used entries that nobody is running.
    while (slot.size() > max_shapes_) {
      auto last = std::prev(slot.end());
      if (!(*last)->in_use.try_lock()) break;
      (*last)->in_use.unlock();
      slot.erase(last);
    }
  } else if (it != slot.begin()) {
    slot.splice(slot.begin(), slot, it);
    it = slot.begin();
  }
  Lease lease;
  if ((*it)->conv == nullptr) {
    lease.unsupported_ = true;
    return lease;
  }
  lease.lock_ = std::unique_lock<std::mutex>((*it)->in_use, std::try_to_lock);
  if (lease.lock_.owns_lock()) lease.conv_ = (*it)->conv.get();
  return lease;
}

size_t PreparedConvs::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (const auto& op : slots_)
    for (const auto& s : op) n += s.size();
  return n;
}

}  // namespace kiln::runtime
