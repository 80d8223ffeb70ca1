// The JobQueue contract (store/job_queue.h), one suite run against every implementation: the
// embedded MemoryJobQueue and PostgreSQL's PgJobQueue (tests/store/contract_backends.h). Leases
// are 300 ms here (the issue allows at most 2 s in tests).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <thread>

#include "store/job_queue.h"
#include "tests/store/contract_backends.h"

namespace kiln::store::contract {
namespace {

using namespace std::chrono_literals;
constexpr auto kLease = 300ms;

template <typename B>
class JobQueueContract : public ::testing::Test {
 protected:
  B backend_;
};
TYPED_TEST_SUITE(JobQueueContract, Backends, BackendNames);

TYPED_TEST(JobQueueContract, ClaimsTheOldestJobOfItsBackendsOnce) {
  JobQueue* q = this->backend_.OpenQueue(3);
  ASSERT_TRUE(q->Enqueue("j1", "tt-emu", "p1").ok());
  ASSERT_TRUE(q->Enqueue("j2", "reference", "p2").ok());
  ASSERT_TRUE(q->Enqueue("j3", "tt-emu", std::string("p3\0bin", 6)).ok());
  EXPECT_EQ(q->Enqueue("j1", "tt-emu", "again").code(), StatusCode::kAlreadyExists);
  auto c1 = q->Claim("w1", {"tt-emu"}, kLease);
  ASSERT_TRUE(c1.ok()) << c1.status().ToString();
  ASSERT_TRUE(c1->has_value());
  EXPECT_EQ((*c1)->job_id, "j1");
  EXPECT_EQ((*c1)->payload, "p1");
  EXPECT_EQ((*c1)->attempt, 1);
  auto c3 = q->Claim("w1", {"tt-emu"}, kLease);
  ASSERT_TRUE(c3.ok() && c3->has_value());
  EXPECT_EQ((*c3)->job_id, "j3");
  EXPECT_EQ((*c3)->payload, std::string("p3\0bin", 6));
  EXPECT_NE((*c3)->lease_token, (*c1)->lease_token);
  auto none = q->Claim("w1", {"tt-emu"}, kLease);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  auto c2 = this->backend_.OpenQueue(3)->Claim("w2", {"tt-emu", "reference"}, kLease);
  ASSERT_TRUE(c2.ok() && c2->has_value());
  EXPECT_EQ((*c2)->job_id, "j2");
  auto e = q->Get("j2");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->state, JobQueueEntry::kClaimed);
  EXPECT_EQ(e->worker, "w2");
  EXPECT_EQ(q->Get("nope").status().code(), StatusCode::kNotFound);
}

TYPED_TEST(JobQueueContract, OneResultPerJobAndLateResultsAreCounted) {
  JobQueue* q = this->backend_.OpenQueue(3);
  ASSERT_TRUE(q->Enqueue("j", "tt-emu", "p").ok());
  auto c = q->Claim("w", {"tt-emu"}, kLease);
  ASSERT_TRUE(c.ok() && c->has_value());
  auto done = q->Complete(**c, std::string("result\0", 7));
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_TRUE(*done);
  auto again = q->Complete(**c, "second");
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(*again);
  EXPECT_EQ(q->late_results(), 1u);
  auto e = q->Get("j");
  EXPECT_EQ(e->state, JobQueueEntry::kDone);
  EXPECT_EQ(e->result, std::string("result\0", 7));
  EXPECT_FALSE(q->Claim("w", {"tt-emu"}, kLease)->has_value());
}

TYPED_TEST(JobQueueContract, AnExpiredLeaseIsReclaimedAndItsResultDiscarded) {
  JobQueue* a = this->backend_.OpenQueue(3);
  JobQueue* b = this->backend_.OpenQueue(3);  // another worker
  ASSERT_TRUE(a->Enqueue("j", "tt-emu", "p").ok());
  auto first = a->Claim("wa", {"tt-emu"}, kLease);
  ASSERT_TRUE(first.ok() && first->has_value());
  EXPECT_FALSE(b->Claim("wb", {"tt-emu"}, kLease)->has_value());  // held
  std::this_thread::sleep_for(kLease + 150ms);                    // wa hangs past its lease
  auto second = b->Claim("wb", {"tt-emu"}, kLease);
  ASSERT_TRUE(second.ok() && second->has_value());
  EXPECT_EQ((*second)->job_id, "j");
  EXPECT_EQ((*second)->attempt, 2);
  EXPECT_EQ(a->Heartbeat(**first, kLease).code(), StatusCode::kFailedPrecondition);
  auto late = a->Complete(**first, "from wa");
  ASSERT_TRUE(late.ok());
  EXPECT_FALSE(*late);
  EXPECT_EQ(a->late_results(), 1u);
  auto ok = b->Complete(**second, "from wb");
  ASSERT_TRUE(ok.ok());
  EXPECT_TRUE(*ok);
  auto e = a->Get("j");
  EXPECT_EQ(e->result, "from wb");
  EXPECT_EQ(e->attempt, 2);
}

TYPED_TEST(JobQueueContract, HeartbeatsKeepTheLease) {
  JobQueue* a = this->backend_.OpenQueue(3);
  JobQueue* b = this->backend_.OpenQueue(3);
  ASSERT_TRUE(a->Enqueue("j", "tt-emu", "p").ok());
  auto c = a->Claim("wa", {"tt-emu"}, kLease);
  ASSERT_TRUE(c.ok() && c->has_value());
  for (int i = 0; i < 8; ++i) {  // 800 ms, well past one lease
    std::this_thread::sleep_for(100ms);
    ASSERT_TRUE(a->Heartbeat(**c, kLease).ok()) << i;
    EXPECT_FALSE(b->Claim("wb", {"tt-emu"}, kLease)->has_value());
  }
  EXPECT_TRUE(*a->Complete(**c, "r"));
  EXPECT_EQ(a->late_results(), 0u);
}

TYPED_TEST(JobQueueContract, AttemptsAreBounded) {
  JobQueue* q = this->backend_.OpenQueue(2);
  ASSERT_TRUE(q->Enqueue("j", "tt-emu", "p").ok());
  for (int attempt = 1; attempt <= 2; ++attempt) {
    auto c = q->Claim("w", {"tt-emu"}, 100ms);
    ASSERT_TRUE(c.ok() && c->has_value()) << attempt;
    EXPECT_EQ((*c)->attempt, attempt);
    EXPECT_EQ(*q->ExpireLeases(), 0);  // not expired yet / attempts left
    std::this_thread::sleep_for(200ms);
  }
  EXPECT_FALSE(q->Claim("w", {"tt-emu"}, 100ms)->has_value());
  EXPECT_EQ(*q->ExpireLeases(), 1);
  EXPECT_EQ(q->Get("j")->state, JobQueueEntry::kFailed);
  EXPECT_EQ(*q->ExpireLeases(), 0);
}

TYPED_TEST(JobQueueContract, ReleaseMakesAJobClaimableAtOnceWithoutCountingTheAttempt) {
  JobQueue* q = this->backend_.OpenQueue(1);
  ASSERT_TRUE(q->Enqueue("j", "tt-emu", "p").ok());
  auto c = q->Claim("w", {"tt-emu"}, 10s);
  ASSERT_TRUE(c.ok() && c->has_value());
  ASSERT_TRUE(q->Release(**c).ok());
  EXPECT_EQ(q->Release(**c).code(), StatusCode::kFailedPrecondition);
  auto again = this->backend_.OpenQueue(1)->Claim("w2", {"tt-emu"}, 10s);
  ASSERT_TRUE(again.ok() && again->has_value());
  EXPECT_EQ((*again)->attempt, 1);  // max_attempts 1, and still claimable
  EXPECT_FALSE(*q->Complete(**c, "stale"));
  EXPECT_TRUE(*q->Complete(**again, "r"));
}

TYPED_TEST(JobQueueContract, ConcurrentWorkersRunEveryJobExactlyOnce) {
  JobQueue* producer = this->backend_.OpenQueue(3);
  constexpr int kJobs = 40, kWorkers = 4;
  for (int i = 0; i < kJobs; ++i) ASSERT_TRUE(producer->Enqueue("j" + std::to_string(i), "tt-emu", "p").ok());
  std::vector<JobQueue*> queues;
  for (int w = 0; w < kWorkers; ++w) queues.push_back(this->backend_.OpenQueue(3));
  std::mutex mu;
  std::map<std::string, int> completed;
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < kWorkers; ++w) {
    threads.emplace_back([&, w] {
      const std::string name = "w" + std::to_string(w);
      for (;;) {
        auto c = queues[w]->Claim(name, {"tt-emu"}, 5s);
        if (!c.ok()) {
          ++errors;
          return;
        }
        if (!c->has_value()) return;
        auto done = queues[w]->Complete(**c, name);
        if (!done.ok() || !*done) ++errors;
        std::lock_guard<std::mutex> lock(mu);
        ++completed[(*c)->job_id];
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors.load(), 0);
  ASSERT_EQ(completed.size(), static_cast<size_t>(kJobs));
  for (const auto& [id, n] : completed) EXPECT_EQ(n, 1) << id;
  for (int i = 0; i < kJobs; ++i) EXPECT_EQ(producer->Get("j" + std::to_string(i))->state, JobQueueEntry::kDone);
}

TYPED_TEST(JobQueueContract, WaitForWorkWakesOnEnqueue) {
  JobQueue* worker = this->backend_.OpenQueue(3);
  JobQueue* producer = this->backend_.OpenQueue(3);
  ASSERT_TRUE(worker->WaitForWork(1ms).ok());  // starts listening (PostgreSQL: LISTEN)
  std::thread enqueue([&] {
    std::this_thread::sleep_for(200ms);
    EXPECT_TRUE(producer->Enqueue("j", "tt-emu", "p").ok());
  });
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(worker->WaitForWork(10s).ok());
  const auto waited = std::chrono::steady_clock::now() - t0;
  enqueue.join();
  EXPECT_GE(waited, 150ms);
  EXPECT_LT(waited, 3s) << "woken by the enqueue, not by the timeout";
  EXPECT_TRUE(worker->Claim("w", {"tt-emu"}, kLease)->has_value());
}

TYPED_TEST(JobQueueContract, ClaimsGoRoundRobinAcrossClients) {
  JobQueue* q = this->backend_.OpenQueue(3);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(q->Enqueue("hog-" + std::to_string(i), "tt-emu", "", "hog").ok());
  ASSERT_TRUE(q->Enqueue("small-0", "tt-emu", "", "small").ok());
  ASSERT_TRUE(q->Enqueue("small-1", "tt-emu", "", "small").ok());
  ASSERT_TRUE(q->Enqueue("other-0", "reference", "", "hog").ok());  // another backend: its own turns
  std::vector<std::string> order;
  for (int i = 0; i < 6; ++i) {
    auto c = this->backend_.OpenQueue(3)->Claim("w", {"tt-emu"}, 5000ms);
    ASSERT_TRUE(c.ok() && c->has_value());
    order.push_back((*c)->job_id);
  }
  EXPECT_EQ(order, (std::vector<std::string>{"hog-0", "small-0", "hog-1", "small-1", "hog-2", "hog-3"}));
  auto other = q->Claim("w", {"reference"}, 5000ms);
  ASSERT_TRUE(other.ok() && other->has_value());
  EXPECT_EQ((*other)->job_id, "other-0");
}

TYPED_TEST(JobQueueContract, WorkersReportTheirHeartbeatsAndQueuesAreCounted) {
  JobQueue* q = this->backend_.OpenQueue(3);
  ASSERT_TRUE(q->ReportWorker({"host-a/1", "tt-emu:2", 1, 5, false}).ok());
  std::this_thread::sleep_for(50ms);
  ASSERT_TRUE(q->ReportWorker({"host-b/2", "reference:1", 0, 0, false}).ok());
  auto w = this->backend_.OpenQueue(3)->Workers(std::chrono::seconds(3600));
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  ASSERT_EQ(w->size(), 2u);
  EXPECT_EQ((*w)[0].worker, "host-b/2");  // freshest first
  EXPECT_EQ((*w)[1].worker, "host-a/1");
  EXPECT_EQ((*w)[1].devices, "tt-emu:2");
  EXPECT_EQ((*w)[1].running, 1);
  EXPECT_EQ((*w)[1].jobs_done, 5);
  EXPECT_GE((*w)[1].age_seconds, 0.04);
  EXPECT_LT((*w)[1].age_seconds, 30.0);
  // A report renews; a drained worker leaves; reports older than forget_after are dropped.
  ASSERT_TRUE(q->ReportWorker({"host-a/1", "tt-emu:2", 0, 6, true}).ok());
  ASSERT_TRUE(q->RemoveWorker("host-b/2").ok());
  w = q->Workers(std::chrono::seconds(3600));
  ASSERT_EQ(w->size(), 1u);
  EXPECT_TRUE((*w)[0].draining);
  EXPECT_EQ((*w)[0].jobs_done, 6);
  std::this_thread::sleep_for(1100ms);
  EXPECT_TRUE(q->Workers(std::chrono::seconds(1))->empty());

  ASSERT_TRUE(q->Enqueue("j1", "tt-emu", "").ok());
  ASSERT_TRUE(q->Enqueue("j2", "tt-emu", "").ok());
  ASSERT_TRUE(q->Enqueue("j3", "reference", "").ok());
  auto c = q->Claim("w", {"tt-emu"}, kLease);
  ASSERT_TRUE(c.ok() && c->has_value());
  EXPECT_FALSE((*c)->reclaimed);
  auto depths = q->QueueDepths();
  ASSERT_TRUE(depths.ok());
  ASSERT_EQ(depths->size(), 2u);
  EXPECT_EQ((*depths)[0].backend, "reference");
  EXPECT_EQ((*depths)[0].queued, 1);
  EXPECT_EQ((*depths)[1].backend, "tt-emu");
  EXPECT_EQ((*depths)[1].queued, 1);
  EXPECT_EQ((*depths)[1].claimed, 1);
  // A claim taken over from an expired lease says so (kiln_job_lease_expiries_total).
  std::this_thread::sleep_for(kLease + 100ms);
  auto again = q->Claim("w2", {"tt-emu"}, kLease);
  ASSERT_TRUE(again.ok() && again->has_value());
  EXPECT_EQ((*again)->job_id, "j1");
  EXPECT_TRUE((*again)->reclaimed);
}

}  // namespace
}  // namespace kiln::store::contract
