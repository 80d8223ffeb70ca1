// A fixed pool of worker threads with a bounded queue: Submit() refuses work instead of letting
// a backlog grow without limit (the caller turns a refusal into RESOURCE_EXHAUSTED).
#pragma once

#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>

#include <atomic>
#include <cstddef>
#include <functional>
#include <utility>

namespace kiln::server {

class BoundedExecutor {
 public:
  /// `threads` run jobs; at most `threads + queue` jobs are admitted (running or waiting).
  BoundedExecutor(size_t threads, size_t queue)
      : pool_(threads == 0 ? 1 : threads), capacity_((threads == 0 ? 1 : threads) + queue) {}
  ~BoundedExecutor() { pool_.join(); }

  /// Runs `job` on a worker, or returns false at once when the pool is full. The job may return
  /// a continuation, which runs after the job's slot is released: reply to the client there, so
  /// that a client which sends its next request as soon as it has the answer finds a free slot.
  bool Submit(std::function<std::function<void()>()> job) {
    size_t now = admitted_.fetch_add(1);
    if (now >= capacity_) {
      admitted_.fetch_sub(1);
      return false;
    }
    boost::asio::post(pool_, [this, job = std::move(job)] {
      std::function<void()> then = job();
      admitted_.fetch_sub(1);
      if (then) then();
    });
    return true;
  }

  /// Jobs running or waiting.
  size_t admitted() const { return admitted_.load(); }
  size_t capacity() const { return capacity_; }
  /// Waits for every admitted job to finish (at shutdown).
  void Join() { pool_.join(); }

 private:
  boost::asio::thread_pool pool_;
  size_t capacity_;
  std::atomic<size_t> admitted_{0};
};

}  // namespace kiln::server
