// The JobStore contract (store/job_store.h), one suite run against the embedded store (SQLite +
// files) and PostgreSQL's PgJobStore (tests/store/contract_backends.h): rows, idempotency keys,
// label filters and pages, events and their limit, results read back in slices, retention; and
// on PostgreSQL the fencing of a worker's writes by its claim (store/job_queue.h).
#include <gtest/gtest.h>

#include <thread>

#include "tests/store/contract_backends.h"

namespace kiln::store::contract {
namespace {

using Backends = ::testing::Types<EmbeddedBackend, PgBackend>;
struct BackendNames {
  template <typename T>
  static std::string GetName(int) {
    return T::kName;
  }
};

template <typename B>
class JobStoreContract : public ::testing::Test {
 protected:
  B backend_;
};
TYPED_TEST_SUITE(JobStoreContract, Backends, BackendNames);

JobRecord NewJob(const std::string& id, const std::string& key = "", std::map<std::string, std::string> labels = {}) {
  JobRecord j;
  j.job_id = id;
  j.state = 1;
  j.created_ms = 1000;
  j.model_id = "m-" + id.substr(0, 3);
  j.backend = "tt-emu";
  j.client = "alice";
  j.idempotency_key = key;
  j.labels = std::move(labels);
  j.request = std::string("req\0uest", 8);
  return j;
}

TYPED_TEST(JobStoreContract, RowsKeysLabelsAndPages) {
  JobStore* s = this->backend_.OpenJobStore();
  bool existed = true;
  const std::string in0 = std::string("\0\1\2", 3), in1(5000, 'x');
  auto a = s->Create(NewJob("j-a", "key-1", {{"team", "vision"}, {"run", "1"}}), {in0, in1}, &existed);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_FALSE(existed);
  EXPECT_EQ(a->bytes, 5003);
  // The same key again: the first job, nothing new written.
  auto again = s->Create(NewJob("j-b", "key-1"), {}, &existed);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(existed);
  EXPECT_EQ(again->job_id, "j-a");
  ASSERT_TRUE(s->Create(NewJob("j-c", "", {{"team", "vision"}}), {}, &existed).ok());
  ASSERT_TRUE(s->Create(NewJob("j-d", "", {{"team", "audio"}}), {}, &existed).ok());
  EXPECT_EQ(s->Get("j-b").status().code(), StatusCode::kNotFound);
  auto got = s->Get("j-a");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->request, std::string("req\0uest", 8));
  EXPECT_EQ(got->labels.at("run"), "1");
  EXPECT_EQ(*s->ReadInput("j-a", 0), in0);
  EXPECT_EQ(*s->ReadInput("j-a", 1), in1);
  EXPECT_EQ((*s->FindByIdempotencyKey("key-1"))->job_id, "j-a");
  EXPECT_FALSE(s->FindByIdempotencyKey("key-2")->has_value());

  JobFilter f;
  f.labels = {{"team", "vision"}};
  auto vision = s->List(f);
  ASSERT_TRUE(vision.ok());
  ASSERT_EQ(vision->size(), 2u);
  EXPECT_EQ((*vision)[0].job_id, "j-c");  // newest first
  EXPECT_EQ((*vision)[1].job_id, "j-a");
  f.labels = {{"team", "vision"}, {"run", "1"}};
  EXPECT_EQ(s->List(f)->size(), 1u);
  JobFilter page;
  page.limit = 2;
  auto first = s->List(page);
  ASSERT_EQ(first->size(), 2u);
  page.before_job_id = first->back().job_id;
  auto second = s->List(page);
  ASSERT_EQ(second->size(), 1u);
  EXPECT_EQ((*second)[0].job_id, "j-a");

  // Update rewrites the mutable fields only.
  JobRecord u = *got;
  u.state = 3;
  u.finished_ms = 2000;
  u.error_message = "none";
  u.configurations_done = 1;
  u.client = "mallory";
  ASSERT_TRUE(s->Update(u).ok());
  auto after = s->Get("j-a");
  EXPECT_EQ(after->state, 3);
  EXPECT_EQ(after->error_message, "none");
  EXPECT_EQ(after->client, "alice");
  EXPECT_EQ(s->CountByState()->at(1), 2);
  EXPECT_EQ(s->CountByState()->at(3), 1);
  EXPECT_EQ(s->Unfinished()->size(), 2u);
}

TYPED_TEST(JobStoreContract, EventsResultsAndRetention) {
  JobStore* s = this->backend_.OpenJobStore();
  bool existed = false;
  ASSERT_TRUE(s->Create(NewJob("j-e"), {"in"}, &existed).ok());
  for (int i = 1; i <= 4; ++i) {
    auto seq = s->AppendEvent("j-e", 100 + i, "ev" + std::to_string(i), 3);
    ASSERT_TRUE(seq.ok());
    EXPECT_EQ(*seq, i <= 3 ? i : 0);  // past the limit: dropped, counted
  }
  EXPECT_EQ(*s->AppendEvent("j-e", 200, "state", 0), 4);  // limit 0: always kept
  auto events = s->Events("j-e", 1, 10);
  ASSERT_EQ(events->size(), 3u);
  EXPECT_EQ((*events)[0].blob, "ev2");
  EXPECT_EQ((*events)[2].blob, "state");
  EXPECT_EQ(s->Get("j-e")->dropped_events, 1);
  EXPECT_EQ(s->AppendEvent("j-none", 1, "x", 0).status().code(), StatusCode::kNotFound);

  std::string big(3 * 1000 * 1000 + 7, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 31 + 7);
  ASSERT_TRUE(s->PutResult("j-e", 0, "report0", {big, "small"}).ok());
  ASSERT_TRUE(s->PutResult("j-e", 1, "report1", {}).ok());
  ASSERT_TRUE(s->PutResult("j-e", 1, "report1b", {"redo"}).ok());  // a re-run replaces it
  auto results = s->Results("j-e");
  ASSERT_EQ(results->size(), 2u);
  EXPECT_EQ((*results)[0].report, "report0");
  EXPECT_EQ((*results)[0].output_sizes, (std::vector<int64_t>{static_cast<int64_t>(big.size()), 5}));
  EXPECT_EQ((*results)[1].report, "report1b");
  EXPECT_EQ((*results)[1].output_sizes, (std::vector<int64_t>{4}));
  std::string back;
  for (int64_t off = 0; off < static_cast<int64_t>(big.size()); off += 1 << 20) {
    auto slice = s->ReadOutput("j-e", 0, 0, off, 1 << 20);
    ASSERT_TRUE(slice.ok()) << slice.status().ToString();
    back += *slice;
  }
  EXPECT_TRUE(back == big);
  EXPECT_EQ(*s->ReadOutput("j-e", 0, 1, 2, 100), "all");
  EXPECT_EQ(s->ReadOutput("j-e", 5, 0, 0, 10).status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(s->Get("j-e")->bytes, 2 + static_cast<int64_t>(big.size()) + 5 + 4);
  EXPECT_EQ(s->total_bytes(), s->Get("j-e")->bytes);

  JobRecord done = *s->Get("j-e");
  done.state = 3;
  done.finished_ms = 5;
  ASSERT_TRUE(s->Update(done).ok());
  ASSERT_EQ(s->FinishedWithResults()->size(), 1u);
  auto freed = s->ExpireResults("j-e");
  ASSERT_TRUE(freed.ok());
  EXPECT_EQ(*freed, done.bytes);
  EXPECT_TRUE(s->Get("j-e")->results_expired);
  EXPECT_TRUE(s->Results("j-e")->empty());
  EXPECT_EQ(s->total_bytes(), 0);
  EXPECT_TRUE(s->FinishedWithResults()->empty());
}

// A state change and its event are one write: the row in its new state is never read without
// the event that announced it, and a write that fails stores neither.
TYPED_TEST(JobStoreContract, AStateChangeAndItsEventAreOneWrite) {
  JobStore* s = this->backend_.OpenJobStore();
  bool existed = false;
  auto created = s->Create(NewJob("j-s"), {}, &existed, "queued");
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  EXPECT_EQ(created->events, 1);
  auto events = s->Events("j-s", 0, 10);
  ASSERT_EQ(events->size(), 1u);
  EXPECT_EQ((*events)[0].sequence, 1);
  EXPECT_EQ((*events)[0].time_ms, 1000);  // the job's created_ms
  EXPECT_EQ((*events)[0].blob, "queued");
  // An idempotent resubmission stores no second first event.
  ASSERT_TRUE(s->Create(NewJob("j-s2", "key-s"), {}, &existed, "queued").ok());
  ASSERT_TRUE(s->Create(NewJob("j-s3", "key-s"), {}, &existed, "queued").ok());
  EXPECT_TRUE(existed);
  EXPECT_EQ(s->Events("j-s2", 0, 10)->size(), 1u);
  EXPECT_TRUE(s->Events("j-s3", 0, 10)->empty());

  // Past the event limit progress is dropped; the state change is kept, with the row.
  ASSERT_EQ(*s->AppendEvent("j-s", 5, "layer", 1), 0);
  JobRecord rec = *s->Get("j-s");
  rec.state = 3;
  rec.finished_ms = 7;
  auto seq = s->UpdateWithEvent(rec, 7, "succeeded");
  ASSERT_TRUE(seq.ok()) << seq.status().ToString();
  EXPECT_EQ(*seq, 2);
  const JobRecord back = *s->Get("j-s");
  EXPECT_EQ(back.state, 3);
  EXPECT_EQ(back.finished_ms, 7);
  EXPECT_EQ(back.events, 2);
  EXPECT_EQ(back.dropped_events, 1);
  events = s->Events("j-s", 1, 10);
  ASSERT_EQ(events->size(), 1u);
  EXPECT_EQ((*events)[0].blob, "succeeded");
  EXPECT_EQ((*events)[0].time_ms, 7);

  rec.job_id = "j-none";
  EXPECT_EQ(s->UpdateWithEvent(rec, 8, "x").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(s->Get("j-none").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(s->Get("j-s")->events, 2);

  // The event cannot be stored: the row keeps its old state, and a new job is not stored at all.
  ASSERT_TRUE(s->Create(NewJob("j-r"), {}, &existed).ok());
  this->backend_.RefuseEventsOf("j-r");
  JobRecord r = *s->Get("j-r");
  r.state = 3;
  r.finished_ms = 9;
  EXPECT_FALSE(s->UpdateWithEvent(r, 9, "succeeded").ok());
  EXPECT_EQ(s->Get("j-r")->state, 1);
  EXPECT_EQ(s->Get("j-r")->finished_ms, 0);
  EXPECT_EQ(s->Get("j-r")->events, 0);
  EXPECT_TRUE(s->Update(r).ok());  // the row alone still goes
  EXPECT_EQ(s->Get("j-r")->state, 3);
  this->backend_.RefuseEventsOf("j-r2");
  EXPECT_FALSE(s->Create(NewJob("j-r2"), {"in"}, &existed, "queued").ok());
  EXPECT_EQ(s->Get("j-r2").status().code(), StatusCode::kNotFound);
}

// A farm's store only: a worker's writes carry its claim, and a claim that is no longer current
// writes nothing; the end it writes completes the queue entry (store/job_store.h "Fencing").
TEST(PgJobStoreFencing, StaleClaimsWriteNothingAndAnEndCompletesTheEntry) {
  PgBackend backend;
  JobStore* s = backend.OpenJobStore();
  JobQueue* q = backend.OpenQueue(3);
  bool existed = false;
  ASSERT_TRUE(s->Create(NewJob("j-f"), {}, &existed).ok());  // queued with its row
  auto claim = q->Claim("w1", {"tt-emu"}, std::chrono::milliseconds(300));
  ASSERT_TRUE(claim.ok() && claim->has_value());
  const JobFence fence{(*claim)->attempt, (*claim)->lease_token};
  JobRecord rec = *s->Get("j-f");
  rec.state = 2;
  rec.attempt = fence.attempt;
  ASSERT_TRUE(s->Update(rec, fence).ok());
  ASSERT_TRUE(s->AppendEvent("j-f", 1, "layer", 0, fence).ok());
  // The lease runs out; w2 claims the job: w1's writes are refused from now on.
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  auto second = q->Claim("w2", {"tt-emu"}, std::chrono::milliseconds(5000));
  ASSERT_TRUE(second.ok() && second->has_value());
  EXPECT_EQ((*second)->attempt, 2);
  rec.state = 3;
  EXPECT_EQ(s->Update(rec, fence).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(s->AppendEvent("j-f", 2, "late", 0, fence).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(s->UpdateWithEvent(rec, 2, "late end", fence).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(s->Events("j-f", 0, 10)->size(), 1u);  // only w1's layer event
  EXPECT_EQ(q->Get("j-f")->state, JobQueueEntry::kClaimed);
  EXPECT_EQ(s->PutResult("j-f", 0, "late", {"x"}, fence).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(s->Get("j-f")->state, 2);
  EXPECT_TRUE(s->Results("j-f")->empty());
  // An end whose event cannot be stored writes nothing: the entry stays w2's, the row RUNNING.
  const JobFence fence2{(*second)->attempt, (*second)->lease_token};
  rec.attempt = 2;
  backend.RefuseEventsOf("j-f");
  EXPECT_FALSE(s->UpdateWithEvent(rec, 3, "end", fence2).ok());
  EXPECT_EQ(q->Get("j-f")->state, JobQueueEntry::kClaimed);
  EXPECT_EQ(s->Get("j-f")->state, 2);
  {
    pqxx::connection c(backend.url());
    pqxx::work tx(c);
    tx.exec0("DROP TRIGGER refuse_events_1 ON kiln_job_events");
    tx.commit();
  }
  // w2's end is written and completes the entry; an event after it still passes the fence.
  ASSERT_TRUE(s->PutResult("j-f", 0, "ok", {"y"}, fence2).ok());
  auto end = s->UpdateWithEvent(rec, 3, "end", fence2);
  ASSERT_TRUE(end.ok()) << end.status().ToString();
  EXPECT_EQ(*end, 2);
  EXPECT_TRUE(s->AppendEvent("j-f", 4, "after the end", 0, fence2).ok());
  EXPECT_EQ(q->Get("j-f")->state, JobQueueEntry::kDone);
  EXPECT_EQ(s->Get("j-f")->state, 3);
  EXPECT_EQ(s->Get("j-f")->attempt, 2);
  // Cancel: a queued job leaves the queue; a claimed one is asked to stop.
  ASSERT_TRUE(s->Create(NewJob("j-g"), {}, &existed).ok());
  bool dequeued = false;
  ASSERT_TRUE(s->RequestCancel("j-g", &dequeued).ok());
  EXPECT_TRUE(dequeued);
  EXPECT_EQ(q->Get("j-g").status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(s->Create(NewJob("j-h"), {}, &existed).ok());
  ASSERT_TRUE(q->Claim("w1", {"tt-emu"}, std::chrono::milliseconds(5000))->has_value());
  auto asked = s->RequestCancel("j-h", &dequeued);
  ASSERT_TRUE(asked.ok());
  EXPECT_FALSE(dequeued);
  EXPECT_TRUE(asked->cancel_requested);
  auto counts = s->CountQueued("alice", std::string("alice") + '\x1f');
  ASSERT_TRUE(counts.ok());
  EXPECT_EQ(counts->first, 2);  // j-g and j-h rows are still QUEUED until their manager ends them
}

}  // namespace
}  // namespace kiln::store::contract
