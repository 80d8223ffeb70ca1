#include "server/job_service.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>
#include <optional>

#include "api/lanes.h"
#include "common/reactor.h"
#include "server/model_service.h"
#include "server/stream_guard.h"

namespace kiln::server {

namespace {
constexpr int kEventsPerRead = 64;
}  // namespace

void JobServiceImpl::OnStoreLane(grpc::CallbackServerContext& context, grpc::ServerUnaryReactor* reactor,
                                 std::shared_ptr<RpcScope> scope, std::function<Status(int64_t*)> work) {
  sched::JobRequest job;
  job.lane = api::kStoreLane;
  job.client_id = ClientId(context);
  auto retry = std::make_shared<int64_t>(0);
  job.task = [work = std::move(work), retry](sched::JobContext&) { return work(retry.get()); };
  auto handle = env_.scheduler->Submit(std::move(job));
  if (!handle.ok()) {
    AddRetryPushback(context, handle.status(), *env_.scheduler, api::kStoreLane);
    reactor->Finish(scope->Done(ToGrpc(handle.status())));
    return;
  }
  (*handle)->OnDone([reactor, scope, retry, ctx = &context](const Status& status) {
    if (status.code() == StatusCode::kResourceExhausted && *retry > 0) {
      ctx->AddTrailingMetadata("grpc-retry-pushback-ms", std::to_string(*retry));
    }
    reactor->Finish(scope->Done(ToGrpc(status)));
  });
}

void JobServiceImpl::ReadOnStoreLane(const std::string& client, std::function<Status()> read,
                                     std::function<void(const Status&)> done) {
  sched::JobRequest job;
  job.lane = api::kStoreLane;
  job.client_id = client;
  job.task = [read = std::move(read)](sched::JobContext&) { return read(); };
  auto handle = env_.scheduler->Submit(std::move(job));
  if (!handle.ok()) return done(handle.status());
  (*handle)->OnDone(std::move(done));
}

grpc::ServerUnaryReactor* JobServiceImpl::SubmitRun(grpc::CallbackServerContext* context,
                                                    const kiln::v1::SubmitRunRequest* request,
                                                    kiln::v1::Job* response) {
  ReactorScope on_reactor;
  auto* reactor = context->DefaultReactor();
  auto scope = std::make_shared<RpcScope>(env_, *context, "/kiln.v1.JobService/SubmitRun");
  grpc::Status st = scope->Begin(*context);
  if (!st.ok()) {
    reactor->Finish(scope->Done(st));
    return reactor;
  }
  OnStoreLane(*context, reactor, scope, [this, request, response, client = ClientId(*context)](int64_t* retry) {
    auto job = jobs_->Submit(*request, client, nullptr, retry);
    if (!job.ok()) return job.status();
    *response = std::move(job).value();
    return Status::Ok();
  });
  return reactor;
}

grpc::ServerUnaryReactor* JobServiceImpl::SubmitAdvise(grpc::CallbackServerContext* context,
                                                       const kiln::v1::SubmitAdviseRequest* request,
                                                       kiln::v1::Job* response) {
  ReactorScope on_reactor;
  auto* reactor = context->DefaultReactor();
  auto scope = std::make_shared<RpcScope>(env_, *context, "/kiln.v1.JobService/SubmitAdvise");
  grpc::Status st = scope->Begin(*context);
  if (!st.ok()) {
    reactor->Finish(scope->Done(st));
    return reactor;
  }
  OnStoreLane(*context, reactor, scope, [this, request, response, client = ClientId(*context)](int64_t* retry) {
    auto job = jobs_->SubmitAdvise(*request, client, nullptr, retry);
    if (!job.ok()) return job.status();
    *response = std::move(job).value();
    return Status::Ok();
  });
  return reactor;
}

grpc::ServerUnaryReactor* JobServiceImpl::GetJob(grpc::CallbackServerContext* context,
                                                 const kiln::v1::GetJobRequest* request, kiln::v1::Job* response) {
  ReactorScope on_reactor;
  auto* reactor = context->DefaultReactor();
  auto scope = std::make_shared<RpcScope>(env_, *context, "/kiln.v1.JobService/GetJob");
  grpc::Status st = scope->Begin(*context);
  if (!st.ok()) {
    reactor->Finish(scope->Done(st));
    return reactor;
  }
  OnStoreLane(*context, reactor, scope, [this, request, response](int64_t*) {
    auto job = jobs_->Get(request->job_id());
    if (!job.ok()) return job.status();
    *response = std::move(job).value();
    return Status::Ok();
  });
  return reactor;
}

grpc::ServerUnaryReactor* JobServiceImpl::ListJobs(grpc::CallbackServerContext* context,
                                                   const kiln::v1::ListJobsRequest* request,
                                                   kiln::v1::ListJobsResponse* response) {
  ReactorScope on_reactor;
  auto* reactor = context->DefaultReactor();
  auto scope = std::make_shared<RpcScope>(env_, *context, "/kiln.v1.JobService/ListJobs");
  grpc::Status st = scope->Begin(*context);
  if (!st.ok()) {
    reactor->Finish(scope->Done(st));
    return reactor;
  }
  OnStoreLane(*context, reactor, scope, [this, request, response](int64_t*) {
    auto page = jobs_->List(*request);
    if (!page.ok()) return page.status();
    *response = std::move(page).value();
    return Status::Ok();
  });
  return reactor;
}

grpc::ServerUnaryReactor* JobServiceImpl::CancelJob(grpc::CallbackServerContext* context,
                                                    const kiln::v1::CancelJobRequest* request,
                                                    kiln::v1::Job* response) {
  ReactorScope on_reactor;
  auto* reactor = context->DefaultReactor();
  auto scope = std::make_shared<RpcScope>(env_, *context, "/kiln.v1.JobService/CancelJob");
  grpc::Status st = scope->Begin(*context);
  if (!st.ok()) {
    reactor->Finish(scope->Done(st));
    return reactor;
  }
  OnStoreLane(*context, reactor, scope, [this, request, response](int64_t*) {
    auto job = jobs_->Cancel(request->job_id());
    if (!job.ok()) return job.status();
    *response = std::move(job).value();
    return Status::Ok();
  });
  return reactor;
}

// The events so far, then live ones, one write at a time. The manager's notifications and the
// reactor's OnWriteDone both call Pump(); `state_` outlives the reactor so that a notification
// racing with the end of the stream finds it gone instead of a freed reactor.
class JobServiceImpl::WatchReactor final : public grpc::ServerWriteReactor<kiln::v1::JobEvent> {
 public:
  WatchReactor(JobServiceImpl* service, grpc::CallbackServerContext* context, const kiln::v1::WatchJobRequest* request)
      : service_(service), job_id_(request->job_id()),
        scope_(service->env_, *context, "/kiln.v1.JobService/WatchJob") {
    state_ = std::make_shared<State>();
    state_->reactor = this;
  }

  void Start(grpc::CallbackServerContext* context) {
    grpc::Status st = scope_.Begin(*context);
    if (!st.ok()) return FinishLocked(st);
    if (job_id_.empty()) return FinishLocked(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "job_id is empty"));
    client_ = ClientId(*context);
    // Subscribed before the first read, so that no event falls between them; the first read
    // checks that the job exists.
    token_ = service_->jobs_->Subscribe(job_id_, [state = state_] {
      std::lock_guard<std::recursive_mutex> lock(state->mu);
      if (state->reactor) state->reactor->PumpLocked();
    });
    subscribed_ = true;
    std::lock_guard<std::recursive_mutex> lock(state_->mu);
    PumpLocked();
  }

  void OnWriteDone(bool ok) override {
    ReactorScope on_reactor;
    std::lock_guard<std::recursive_mutex> lock(state_->mu);
    writing_ = false;
    if (!ok) return FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "stream broken"));
    PumpLocked();
  }

  void OnCancel() override {
    std::lock_guard<std::recursive_mutex> lock(state_->mu);
    if (!writing_) FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled by the client"));
  }

  void OnDone() override {
    if (subscribed_) service_->jobs_->Unsubscribe(token_);
    {
      std::lock_guard<std::recursive_mutex> lock(state_->mu);
      state_->reactor = nullptr;
    }
    delete this;
  }

 private:
  struct State {
    // Recursive: a read's completion may run on the thread that asked for it (a refused or an
    // already finished store-lane job), inside PumpLocked.
    std::recursive_mutex mu;
    WatchReactor* reactor = nullptr;
  };

  // With state_->mu held.
  void PumpLocked() {
    if (finished_ || writing_) return;
    if (pending_.empty()) {
      if (ended_) return FinishLocked(grpc::Status::OK);
      if (service_->jobs_->stopping()) {
        return FinishLocked(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                         "kilnd is shutting down; the job continues after the restart, watch again"));
      }
      if (reading_) {
        reread_ = true;  // a notification during the read: read again after it
      } else {
        ReadLocked();
      }
      return;  // the read's completion, or the next notification, pumps again
    }
    current_ = std::move(pending_.front());
    pending_.erase(pending_.begin());
    last_sequence_ = current_.sequence();
    if (current_.has_state_change() && current_.state_change().state() >= kiln::v1::SUCCEEDED) ended_ = true;
    writing_ = true;
    StartWrite(&current_);
  }

  void FinishLocked(const grpc::Status& status) {
    if (finished_) return;
    finished_ = true;
    Finish(scope_.Done(status));
  }

  // The events after last_sequence_, read on the store lane (state_->mu held).
  void ReadLocked() {
    reading_ = true;
    reread_ = false;
    auto events = std::make_shared<std::vector<kiln::v1::JobEvent>>();
    api::JobManager* jobs = service_->jobs_;
    const bool check = !checked_;  // set once a read succeeded (ReadDoneLocked)
    const std::string id = job_id_;
    const int64_t after = last_sequence_;
    service_->ReadOnStoreLane(
        client_,
        [jobs, id, after, check, events]() -> Status {
          if (check) {
            auto job = jobs->Get(id);
            if (!job.ok()) return job.status();
          }
          auto read = jobs->Events(id, after, kEventsPerRead);
          if (!read.ok()) return read.status();
          *events = std::move(read).value();
          return Status::Ok();
        },
        [state = state_, events](const Status& status) {
          std::lock_guard<std::recursive_mutex> lock(state->mu);
          WatchReactor* r = state->reactor;
          if (r == nullptr) return;
          r->ReadDoneLocked(status, std::move(*events));
        });
  }

  void ReadDoneLocked(const Status& status, std::vector<kiln::v1::JobEvent> events) {
    reading_ = false;
    if (status.code() == StatusCode::kUnavailable && service_->jobs_->farm() && !service_->jobs_->stopping()) {
      // A farm's database is unreachable (restarting, or the network): the job goes on, so the
      // watch waits for it. The next wake reads again (api/jobs.cc EventLoop: each second while
      // notifications are down, else the next event or the 30 s resync); a read that still fails
      // kStoreOutage after the first one ends the watch.
      const auto now = std::chrono::steady_clock::now();
      if (!unavailable_since_) unavailable_since_ = now;
      if (now - *unavailable_since_ < kStoreOutage) {
        if (reread_) ReadLocked();
        return;
      }
      return FinishLocked(grpc::Status(
          grpc::StatusCode::UNAVAILABLE,
          "the job store has been unreachable for " + std::to_string(kStoreOutage.count()) +
              " s (" + status.message() + "); the job goes on: watch again"));
    }
    if (!status.ok()) return FinishLocked(ToGrpc(status));
    unavailable_since_.reset();
    checked_ = true;
    if (events.empty()) {
      // Nothing new: read again only for a notification that came during the read; otherwise the
      // next notification pumps (JobManager::Subscribe: after each new event, at shutdown, and on
      // a farm whenever an event may have been missed). Pumping here would read again at
      // once: a watcher of a quiet job then spun on the store lane (25,000 reads a second).
      if (reread_) return ReadLocked();
      if (service_->jobs_->stopping()) PumpLocked();  // finishes: UNAVAILABLE
      return;
    }
    for (auto& e : events) pending_.push_back(std::move(e));
    PumpLocked();
  }

  JobServiceImpl* service_;
  std::string job_id_;
  std::string client_;
  bool reading_ = false;
  bool reread_ = false;
  bool checked_ = false;
  std::optional<std::chrono::steady_clock::time_point> unavailable_since_;  // reads failing since
  static constexpr std::chrono::seconds kStoreOutage{60};
  RpcScope scope_;
  std::shared_ptr<State> state_;
  uint64_t token_ = 0;
  bool subscribed_ = false;
  std::vector<kiln::v1::JobEvent> pending_;
  kiln::v1::JobEvent current_;
  int64_t last_sequence_ = 0;
  bool writing_ = false;
  bool ended_ = false;
  bool finished_ = false;
};

grpc::ServerWriteReactor<kiln::v1::JobEvent>* JobServiceImpl::WatchJob(grpc::CallbackServerContext* context,
                                                                       const kiln::v1::WatchJobRequest* request) {
  ReactorScope on_reactor;
  auto* reactor = new WatchReactor(this, context, request);
  reactor->Start(context);
  return reactor;
}

// Per configuration: its result message, then its outputs in chunks of at most 1 MiB.
class JobServiceImpl::ResultReactor final : public grpc::ServerWriteReactor<kiln::v1::JobResultChunk> {
 public:
  ResultReactor(JobServiceImpl* service, grpc::CallbackServerContext* context,
                const kiln::v1::GetJobResultRequest* request)
      : scope_(service->env_, *context, "/kiln.v1.JobService/GetJobResult"),
        service_(service),
        jobs_(service->jobs_),
        job_id_(request->job_id()),
        omit_outputs_(request->omit_outputs()) {
    grpc::Status st = scope_.Begin(*context);
    if (!st.ok()) {
      End(st);
      return;
    }
    grpc::Status admitted = AcquireStreamSlot(service->env_.streams, context, "GetJobResult", &slot_);
    if (!admitted.ok()) {
      End(admitted);
      return;
    }
    // Every store read on the store lane (ReadOnStoreLane); one read or one write at a time.
    client_ = ClientId(*context);
    service_->ReadOnStoreLane(
        client_,
        [this]() -> Status {
          auto opened = jobs_->OpenResults(job_id_);
          if (!opened.ok()) return opened.status();
          results_ = std::move(opened->first);
          pin_ = std::move(opened->second);
          return Status::Ok();
        },
        [this](const Status& status) {
          if (!status.ok()) return End(ToGrpc(status));
          Next();
        });
  }
  void OnWriteDone(bool ok) override {
    ReactorScope on_reactor;
    if (slot_) slot_->WriteDone();
    if (!ok) {
      End(FailedWriteStatus(slot_.get(), "GetJobResult"));
      return;
    }
    Next();
  }
  void OnDone() override { delete this; }

 private:
  // Finishes the call, releasing its stream slot first (so that a client that reads one stream
  // after another never finds its own ended streams holding its share while gRPC winds them down).
  void End(const grpc::Status& status) {
    slot_.reset();
    // The results' pin (it keeps retention from removing them) and what was read go now too,
    // not when a client that delays taking the status lets gRPC reach OnDone.
    pin_.reset();
    std::vector<store::JobResultRecord>().swap(results_);
    kiln::v1::JobResultChunk().Swap(&chunk_);
    Finish(scope_.Done(status));
  }

  void Next() {
    chunk_.Clear();
    while (config_ < results_.size()) {
      const auto& r = results_[config_];
      if (!header_sent_) {
        header_sent_ = true;
        chunk_.set_configuration(r.configuration);
        if (!chunk_.mutable_result()->ParseFromString(r.report)) {
          End(grpc::Status(grpc::StatusCode::DATA_LOSS, "stored result unreadable"));
          return;
        }
        api::FillPassedFromPass(chunk_.mutable_result()->mutable_response());
        if (slot_) slot_->WriteStarted();
        StartWrite(&chunk_);
        return;
      }
      if (!omit_outputs_ && output_ < r.output_sizes.size()) {
        if (offset_ == 0 && r.output_sizes[output_] < 0) {
          End(grpc::Status(grpc::StatusCode::DATA_LOSS, "result file missing"));
          return;
        }
        auto bytes = std::make_shared<std::string>();
        service_->ReadOnStoreLane(
            client_,
            [this, bytes, configuration = r.configuration]() -> Status {
              auto read = jobs_->ReadOutput(job_id_, configuration, static_cast<int>(output_), offset_,
                                            static_cast<int64_t>(kMaxUploadChunkBytes));
              if (!read.ok()) return read.status();
              *bytes = std::move(read).value();
              return Status::Ok();
            },
            [this, bytes](const Status& status) {
              if (!status.ok()) return End(ToGrpc(status));
              WriteOutput(std::move(*bytes));
            });
        return;
      }
      ++config_;
      output_ = 0;
      header_sent_ = false;
    }
    End(grpc::Status::OK);
  }

  // Sends `data`, the next slice of output output_ of configuration config_.
  void WriteOutput(std::string data) {
    const auto& r = results_[config_];
    const int64_t size = r.output_sizes[output_];
    const int64_t n = static_cast<int64_t>(data.size());
    if (n == 0 && offset_ < size) {
      End(grpc::Status(grpc::StatusCode::DATA_LOSS, "result file shorter than recorded"));
      return;
    }
    auto* out = chunk_.mutable_output();
    *out->mutable_data() = std::move(data);
    chunk_.set_configuration(r.configuration);
    out->set_output(static_cast<int32_t>(output_));
    out->set_offset(offset_);
    offset_ += n;
    const bool last = offset_ >= size;
    out->set_last(last);
    if (last) {
      offset_ = 0;
      ++output_;
    }
    scope_.AddBytes(static_cast<uint64_t>(n));
    if (slot_) slot_->WriteStarted();
    StartWrite(&chunk_);
  }

  RpcScope scope_;
  JobServiceImpl* service_;
  api::JobManager* jobs_;
  std::string client_;
  std::string job_id_;
  bool omit_outputs_;
  std::vector<store::JobResultRecord> results_;
  std::shared_ptr<api::ResultPin> pin_;
  kiln::v1::JobResultChunk chunk_;
  size_t config_ = 0;
  size_t output_ = 0;
  bool header_sent_ = false;
  int64_t offset_ = 0;
  std::unique_ptr<StreamGuard::Slot> slot_;  // env_.streams' place, given back in End
};

grpc::ServerWriteReactor<kiln::v1::JobResultChunk>* JobServiceImpl::GetJobResult(
    grpc::CallbackServerContext* context, const kiln::v1::GetJobResultRequest* request) {
  ReactorScope on_reactor;
  return new ResultReactor(this, context, request);
}

}  // namespace kiln::server
