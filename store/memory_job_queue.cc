#include "store/memory_job_queue.h"

#include <algorithm>
#include <random>

namespace kiln::store {

using Clock = std::chrono::steady_clock;

Status MemoryJobQueue::Enqueue(const std::string& job_id, const std::string& backend, const std::string& payload,
                               const std::string& client) {
  if (job_id.empty() || backend.empty()) return InvalidArgument("job id and backend must not be empty");
  std::lock_guard<std::mutex> lock(mu_);
  if (jobs_.count(job_id)) return {StatusCode::kAlreadyExists, "job " + job_id + " is queued already"};
  Job& j = jobs_[job_id];
  j.entry.job_id = job_id;
  j.entry.backend = backend;
  j.payload = payload;
  j.client = client;
  j.seq = ++next_seq_;
  ++wakeups_;
  cv_.notify_all();
  return Status::Ok();
}

Result<std::optional<JobClaim>> MemoryJobQueue::Claim(const std::string& worker,
                                                      const std::vector<std::string>& backends,
                                                      std::chrono::milliseconds lease) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto now = Clock::now();
  // Round-robin: the least recently served (backend, client) first (0 = never), then the oldest.
  Job* best = nullptr;
  uint64_t best_turn = 0;
  for (auto& [id, j] : jobs_) {
    if (std::find(backends.begin(), backends.end(), j.entry.backend) == backends.end()) continue;
    const bool claimable = j.entry.state == JobQueueEntry::kQueued ||
                           (j.entry.state == JobQueueEntry::kClaimed && j.expires < now);
    if (!claimable || j.entry.attempt >= max_attempts_) continue;
    auto s = served_.find({j.entry.backend, j.client});
    const uint64_t turn = s == served_.end() ? 0 : s->second;
    if (best == nullptr || turn < best_turn || (turn == best_turn && j.seq < best->seq)) {
      best = &j;
      best_turn = turn;
    }
  }
  if (best == nullptr) return std::optional<JobClaim>();
  served_[{best->entry.backend, best->client}] = ++next_turn_;
  const bool reclaimed = best->entry.state == JobQueueEntry::kClaimed;
  best->entry.state = JobQueueEntry::kClaimed;
  best->entry.attempt += 1;
  best->entry.worker = worker;
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  best->token = std::to_string(++next_token_) + "-" + std::to_string(rng());
  best->expires = now + lease;
  return std::optional<JobClaim>(
      JobClaim{best->entry.job_id, best->entry.backend, best->payload, best->entry.attempt, best->token, reclaimed});
}

MemoryJobQueue::Job* MemoryJobQueue::CurrentLocked(const JobClaim& claim) {
  auto it = jobs_.find(claim.job_id);
  if (it == jobs_.end()) return nullptr;
  Job& j = it->second;
  if (j.entry.state != JobQueueEntry::kClaimed || j.entry.attempt != claim.attempt || j.token != claim.lease_token ||
      j.expires < Clock::now()) {
    return nullptr;
  }
  return &j;
}

Status MemoryJobQueue::Heartbeat(const JobClaim& claim, std::chrono::milliseconds lease) {
  std::lock_guard<std::mutex> lock(mu_);
  Job* j = CurrentLocked(claim);
  if (j == nullptr) return FailedPrecondition("job " + claim.job_id + ": the lease of attempt " +
                                              std::to_string(claim.attempt) + " is no longer current");
  j->expires = Clock::now() + lease;
  return Status::Ok();
}

Result<bool> MemoryJobQueue::Complete(const JobClaim& claim, const std::string& result) {
  std::lock_guard<std::mutex> lock(mu_);
  Job* j = CurrentLocked(claim);
  if (j == nullptr) {
    ++late_;
    return false;
  }
  j->entry.state = JobQueueEntry::kDone;
  j->entry.result = result;
  j->token.clear();
  return true;
}

Status MemoryJobQueue::Release(const JobClaim& claim) {
  std::lock_guard<std::mutex> lock(mu_);
  Job* j = CurrentLocked(claim);
  if (j == nullptr) return FailedPrecondition("job " + claim.job_id + ": the lease is no longer current");
  j->entry.state = JobQueueEntry::kQueued;
  j->entry.attempt -= 1;
  j->token.clear();
  ++wakeups_;
  cv_.notify_all();
  return Status::Ok();
}

Result<int> MemoryJobQueue::ExpireLeases() {
  std::lock_guard<std::mutex> lock(mu_);
  const auto now = Clock::now();
  int n = 0;
  for (auto& [id, j] : jobs_) {
    if (j.entry.state == JobQueueEntry::kClaimed && j.expires < now && j.entry.attempt >= max_attempts_) {
      j.entry.state = JobQueueEntry::kFailed;
      j.token.clear();
      ++n;
    }
  }
  return n;
}

Result<JobQueueEntry> MemoryJobQueue::Get(const std::string& job_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return NotFound("job " + job_id + " not found");
  return it->second.entry;
}

Status MemoryJobQueue::WaitForWork(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  const uint64_t seen = wakeups_;
  cv_.wait_for(lock, timeout, [&] { return wakeups_ != seen; });
  return Status::Ok();
}

Status MemoryJobQueue::ReportWorker(const WorkerReport& report) {
  std::lock_guard<std::mutex> lock(mu_);
  workers_[report.worker] = {report, Clock::now()};
  return Status::Ok();
}

Status MemoryJobQueue::RemoveWorker(const std::string& worker) {
  std::lock_guard<std::mutex> lock(mu_);
  workers_.erase(worker);
  return Status::Ok();
}

Result<std::vector<WorkerReport>> MemoryJobQueue::Workers(std::chrono::seconds forget_after) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto now = Clock::now();
  std::vector<WorkerReport> out;
  for (auto it = workers_.begin(); it != workers_.end();) {
    if (now - it->second.second > forget_after) {
      it = workers_.erase(it);
      continue;
    }
    WorkerReport r = it->second.first;
    r.age_seconds = std::chrono::duration<double>(now - it->second.second).count();
    out.push_back(std::move(r));
    ++it;
  }
  std::sort(out.begin(), out.end(), [](const WorkerReport& a, const WorkerReport& b) {
    return a.age_seconds != b.age_seconds ? a.age_seconds < b.age_seconds : a.worker < b.worker;
  });
  return out;
}

Result<std::vector<QueueDepth>> MemoryJobQueue::QueueDepths() {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<std::string, QueueDepth> by;
  for (const auto& [id, j] : jobs_) {
    if (j.entry.state != JobQueueEntry::kQueued && j.entry.state != JobQueueEntry::kClaimed) continue;
    QueueDepth& d = by[j.entry.backend];
    d.backend = j.entry.backend;
    (j.entry.state == JobQueueEntry::kQueued ? d.queued : d.claimed) += 1;
  }
  std::vector<QueueDepth> out;
  for (auto& [b, d] : by) out.push_back(d);
  return out;
}

}  // namespace kiln::store
