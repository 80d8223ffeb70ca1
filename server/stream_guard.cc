#include "server/stream_guard.h"

#include <algorithm>
#include <vector>

#include "server/rpc_context.h"

namespace kiln::server {

StreamGuard::StreamGuard(Options options, Metrics* metrics) : options_(options), metrics_(metrics) {
  sweeper_ = std::thread([this] { Sweep(); });
}

StreamGuard::~StreamGuard() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  sweeper_.join();
}

Result<std::unique_ptr<StreamGuard::Slot>> StreamGuard::Acquire(grpc::CallbackServerContext* context,
                                                                 const std::string& method) {
  std::string principal = Principal(*context);
  std::lock_guard<std::mutex> lock(mu_);
  if (options_.max_streams > 0) {
    const size_t share = std::max<size_t>(1, options_.max_streams / 2);
    auto it = per_principal_.find(principal);
    const size_t mine = it == per_principal_.end() ? 0 : it->second;
    std::string refusal;
    if (entries_.size() >= options_.max_streams) {
      refusal = std::to_string(entries_.size()) + " streams of stored bytes are open, the limit (--max-read-streams)";
    } else if (mine >= share) {
      refusal = "this client (" + principal + ") holds " + std::to_string(mine) +
                " streams of stored bytes, its share of the " + std::to_string(options_.max_streams) +
                " (--max-read-streams)";
    }
    if (!refusal.empty()) {
      if (metrics_) metrics_->CountRejected("read_streams");
      context->AddTrailingMetadata("grpc-retry-pushback-ms", std::to_string(kRetryAfter.count()));
      return ResourceExhausted(method + " refused: " + refusal + "; retry after ~1 s, when one has ended");
    }
  }
  auto entry = std::make_shared<Entry>();
  entry->context = context;
  entry->principal = std::move(principal);
  ++per_principal_[entry->principal];
  entries_.insert(entry);
  if (metrics_) metrics_->SetReadStreams(entries_.size());
  return std::unique_ptr<Slot>(new Slot(this, std::move(entry)));
}

StreamGuard::Slot::~Slot() {
  {
    // After this block the sweeper no longer touches the call's context: a TryCancel running on
    // another thread has returned (it holds cancel_mu), and one that reached this destructor
    // inline, on the sweeper's own thread, re-enters cancel_mu (recursive) and returns into a
    // TryCancel that is done with the context.
    std::lock_guard<std::recursive_mutex> cancel_lock(entry_->cancel_mu);
    entry_->context = nullptr;
  }
  std::lock_guard<std::mutex> lock(guard_->mu_);
  guard_->entries_.erase(entry_);
  if (guard_->metrics_) guard_->metrics_->SetReadStreams(guard_->entries_.size());
  auto it = guard_->per_principal_.find(entry_->principal);
  if (it != guard_->per_principal_.end() && --it->second == 0) guard_->per_principal_.erase(it);
}

void StreamGuard::Slot::WriteStarted() {
  std::lock_guard<std::mutex> lock(guard_->mu_);
  entry_->pending = true;
  entry_->since = std::chrono::steady_clock::now();
}

void StreamGuard::Slot::WriteDone() {
  std::lock_guard<std::mutex> lock(guard_->mu_);
  entry_->pending = false;
}

bool StreamGuard::Slot::timed_out() const {
  std::lock_guard<std::mutex> lock(guard_->mu_);
  return entry_->timed_out;
}

grpc::Status AcquireStreamSlot(StreamGuard* guard, grpc::CallbackServerContext* context, const std::string& method,
                               std::unique_ptr<StreamGuard::Slot>* slot) {
  if (guard == nullptr) return grpc::Status::OK;
  auto acquired = guard->Acquire(context, method);
  if (!acquired.ok()) return ToGrpc(acquired.status());
  *slot = std::move(acquired).value();
  return grpc::Status::OK;
}

grpc::Status FailedWriteStatus(const StreamGuard::Slot* slot, const std::string& method) {
  if (slot != nullptr && slot->timed_out()) {
    return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                        method + ": the client took no message for " + std::to_string(slot->write_timeout().count()) +
                            " ms (--stream-write-timeout); stream cancelled");
  }
  return grpc::Status(grpc::StatusCode::CANCELLED, "stream broken");
}

void StreamGuard::Sweep() {
  const auto period = std::clamp<std::chrono::milliseconds>(options_.write_timeout / 10, std::chrono::milliseconds(10),
                                                            std::chrono::milliseconds(1000));
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    cv_.wait_for(lock, period);
    if (stopping_) break;
    const auto now = std::chrono::steady_clock::now();
    std::vector<std::shared_ptr<Entry>> late;
    for (const auto& e : entries_) {
      if (!e->pending || e->timed_out || now - e->since < options_.write_timeout) continue;
      e->timed_out = true;
      late.push_back(e);
    }
    if (late.empty()) continue;
    // TryCancel outside mu_: gRPC may run the reactor's OnWriteDone(false) (which ends the call
    // and destroys its slot, taking mu_) before TryCancel returns. Lock order: an entry's
    // cancel_mu, then mu_ (nothing holds mu_ while it takes a cancel_mu).
    lock.unlock();
    for (const auto& e : late) {
      std::lock_guard<std::recursive_mutex> cancel_lock(e->cancel_mu);
      if (e->context == nullptr) continue;  // the call ended meanwhile
      {
        // The write may have been taken since it was found late (and another started).
        std::lock_guard<std::mutex> again(mu_);
        if (!e->pending || std::chrono::steady_clock::now() - e->since < options_.write_timeout) {
          e->timed_out = false;
          continue;
        }
      }
      if (metrics_) metrics_->CountRejected("stream_write_timeout");
      e->context->TryCancel();
    }
    late.clear();
    lock.lock();
  }
}

}  // namespace kiln::server
