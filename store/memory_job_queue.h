// kiln::store::MemoryJobQueue — the embedded JobQueue (store/job_queue.h): one process, a map
// under a mutex, std::chrono::steady_clock for leases, a condition variable for WaitForWork.
// Not durable (the embedded kilnd's jobs are durable in JobStore, store/job_store.h).
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>

#include "store/job_queue.h"

namespace kiln::store {

class MemoryJobQueue : public JobQueue {
 public:
  explicit MemoryJobQueue(int max_attempts) : max_attempts_(max_attempts) {}

  Status Enqueue(const std::string& job_id, const std::string& backend, const std::string& payload,
                 const std::string& client = "") override;
  Result<std::optional<JobClaim>> Claim(const std::string& worker, const std::vector<std::string>& backends,
                                        std::chrono::milliseconds lease) override;
  Status Heartbeat(const JobClaim& claim, std::chrono::milliseconds lease) override;
  Result<bool> Complete(const JobClaim& claim, const std::string& result) override;
  Status Release(const JobClaim& claim) override;
  Result<int> ExpireLeases() override;
  Result<JobQueueEntry> Get(const std::string& job_id) override;
  Status WaitForWork(std::chrono::milliseconds timeout) override;
  uint64_t late_results() const override { return late_.load(); }
  Status ReportWorker(const WorkerReport& report) override;
  Status RemoveWorker(const std::string& worker) override;
  Result<std::vector<WorkerReport>> Workers(std::chrono::seconds forget_after) override;
  Result<std::vector<QueueDepth>> QueueDepths() override;

 private:
  struct Job {
    JobQueueEntry entry;
    std::string payload;
    std::string token;
    std::chrono::steady_clock::time_point expires;
    uint64_t seq = 0;
    std::string client;
  };
  Job* CurrentLocked(const JobClaim& claim);

  const int max_attempts_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, Job> jobs_;
  std::map<std::string, std::pair<WorkerReport, std::chrono::steady_clock::time_point>> workers_;
  uint64_t next_seq_ = 0;
  uint64_t next_turn_ = 0;
  std::map<std::pair<std::string, std::string>, uint64_t> served_;  // (backend, client) → turn it was last served
  uint64_t next_token_ = 0;
  uint64_t wakeups_ = 0;
  std::atomic<uint64_t> late_{0};
};

}  // namespace kiln::store
