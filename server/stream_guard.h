// kiln::server::StreamGuard — the limits of the server-streaming calls that send stored bytes
// (ModelService.ReadModel, JobService.GetJobResult): how many run at once, how many of them one
// principal holds, and how long one write may wait for the client to take it.
//
// Why: such a call holds its 1 MiB message and gRPC's copy of it (about 1.8 MB measured), and its
// source — a database connection of the farm's pool for ReadModel (store/pg/pg_blob_store.h), a
// pin on the job's results for GetJobResult (api/jobs.h) — until its last write is taken, and gRPC
// bounds neither the number of such streams (beyond --max-concurrent-streams per connection) nor
// how long a write may wait on flow control: a client that opens streams and never reads held them
// for as long as its connections lived.
//
// Limits (docs/security.md, "Streams that send stored bytes"):
//  * at most max_streams at once, of which one principal (server/rpc_context.h Principal) holds
//    at most half (at least 1): the next is RESOURCE_EXHAUSTED naming the limit,
//    with a grpc-retry-pushback-ms of kRetryAfter; kiln_rejected_requests_total{reason="read_streams"};
//  * a write the client has not taken within write_timeout cancels the call (the client sees
//    CANCELLED; kiln_rejected_requests_total{reason="stream_write_timeout"}), and its slot and
//    source go with it.
// A sweeper thread checks the pending writes every write_timeout / 10 (10 ms .. 1 s), so a stalled
// stream ends within 1.1 timeouts. A reactor gives its slot back just before Finish, and lets go
// of the source when it ends normally (the slot no longer watches the trailers' write): a client
// that reads streams one after another never finds its own ended ones holding its share.
// Thread-safe.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "common/status.h"
#include "server/metrics.h"

namespace kiln::server {

class StreamGuard {
  struct Entry;  // one stream's state (below)

 public:
  struct Options {
    /// Streams at once, all principals (0 = no limit). kilnd sets 32, or with a database 8, which
    /// leaves half of its 16 connections (server/daemon.cc kDatabaseConnections) to everything
    /// else, unless --max-read-streams says otherwise (kilnd's 0 means that default).
    size_t max_streams = 32;
    /// Longest wait of one write for the client (flow control) before the call is cancelled. A
    /// client's transport returns flow-control window in steps of megabytes (grpc-core sizes its
    /// window by bandwidth-delay probing), so a write can wait while the client's application
    /// works through several megabytes it has already received: a grpcio 1.51 reader taking one
    /// 1 MiB message per 1.6 s was cancelled at a 10 s timeout, one per 1.2 s was not (so a step
    /// of about 7 MiB). kilnd's default, 300 s, keeps readers of about 25 KiB/s and more, by
    /// that measure (extrapolated, not measured at 300 s).
    std::chrono::milliseconds write_timeout{300'000};
  };
  /// The pushback a refused call gets: streams end within a write timeout, most much sooner.
  static constexpr std::chrono::milliseconds kRetryAfter{1000};

  /// `metrics` may be null (no counting); it must outlive the guard.
  StreamGuard(Options options, Metrics* metrics);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

  /// One call's place: held by its reactor and destroyed when the reactor finishes the call,
  /// before Finish (so that the place is free before the client sees the status), at the latest
  /// in OnDone.
  class Slot {
   public:
    ~Slot();
    Slot(const Slot&) = delete;
    Slot& operator=(const Slot&) = delete;
    /// Just before StartWrite.
    void WriteStarted();
    /// In OnWriteDone.
    void WriteDone();

   private:
    friend class StreamGuard;
    friend grpc::Status FailedWriteStatus(const Slot* slot, const std::string& method);
    // For FailedWriteStatus: whether the sweeper cancelled the call, and the timeout.
    bool timed_out() const;
    std::chrono::milliseconds write_timeout() const { return guard_->options_.write_timeout; }
    Slot(StreamGuard* guard, std::shared_ptr<Entry> entry) : guard_(guard), entry_(std::move(entry)) {}
    StreamGuard* guard_;
    std::shared_ptr<Entry> entry_;
  };

  /// A slot for the call, or RESOURCE_EXHAUSTED naming the limit and the principal's share (then
  /// also the grpc-retry-pushback-ms trailer on `context`). `method` names the call in the message.
  Result<std::unique_ptr<Slot>> Acquire(grpc::CallbackServerContext* context, const std::string& method);

 private:
  // Shared by the slot and the sweeper, which may still hold it when the slot is gone. The write
  // fields are guarded by mu_; `context` by cancel_mu, and null once the slot is destroyed (the
  // call may end at any time after that).
  struct Entry {
    std::string principal;
    bool pending = false;  // a write is out
    std::chrono::steady_clock::time_point since;
    bool timed_out = false;
    std::recursive_mutex cancel_mu;  // recursive: TryCancel may end the call inline
    grpc::CallbackServerContext* context = nullptr;
  };

  void Sweep();

  const Options options_;
  Metrics* metrics_;
  std::mutex mu_;
  std::condition_variable cv_;  // wakes the sweeper to stop
  bool stopping_ = false;
  std::unordered_set<std::shared_ptr<Entry>> entries_;
  std::unordered_map<std::string, size_t> per_principal_;
  std::thread sweeper_;
};

/// A reactor's slot for its call: from `guard`, none where `guard` is null (no limits). OK, or the
/// refusal the call ends with.
grpc::Status AcquireStreamSlot(StreamGuard* guard, grpc::CallbackServerContext* context, const std::string& method,
                               std::unique_ptr<StreamGuard::Slot>* slot);

/// What a stream ends with when a write failed (OnWriteDone(false)): DEADLINE_EXCEEDED naming
/// --stream-write-timeout where the guard cancelled it (the client has seen CANCELLED; this is
/// logged and is the call's status in kiln_grpc_*), else CANCELLED. `slot` may be null.
grpc::Status FailedWriteStatus(const StreamGuard::Slot* slot, const std::string& method);

}  // namespace kiln::server
