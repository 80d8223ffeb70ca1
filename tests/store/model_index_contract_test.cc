// The ModelIndex contract (store/model_index.h), one suite run against every implementation:
// the embedded FileModelIndex and PostgreSQL's PgModelIndex (tests/store/contract_backends.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <thread>

#include "common/sha256.h"
#include "store/model_index.h"
#include "tests/store/contract_backends.h"

namespace kiln::store::contract {
namespace {

ModelInfo Info(const std::string& seed, uint64_t size = 1000) {
  ModelInfo m;
  m.model_id = Sha256Hex(seed);
  m.size_bytes = size;
  m.opset = 13;
  m.inputs = {"x", "input \"with\" quotes, commas", "ünïcode/€"};
  m.outputs = {"y"};
  m.node_count = 42;
  m.producer_name = "pytorch\n2.1";
  m.created_unix_seconds = 1700000000;
  return m;
}

void ExpectSameMetadata(const ModelInfo& a, const ModelInfo& b) {
  EXPECT_EQ(a.model_id, b.model_id);
  EXPECT_EQ(a.size_bytes, b.size_bytes);
  EXPECT_EQ(a.opset, b.opset);
  EXPECT_EQ(a.inputs, b.inputs);
  EXPECT_EQ(a.outputs, b.outputs);
  EXPECT_EQ(a.node_count, b.node_count);
  EXPECT_EQ(a.producer_name, b.producer_name);
  EXPECT_EQ(a.created_unix_seconds, b.created_unix_seconds);
}

template <typename B>
class ModelIndexContract : public ::testing::Test {
 protected:
  B backend_;
};
TYPED_TEST_SUITE(ModelIndexContract, Backends, BackendNames);

TYPED_TEST(ModelIndexContract, PutThenGetByIdAndByNameKeepsMetadata) {
  ModelIndex* index = this->backend_.OpenIndex();
  const ModelInfo a = Info("a");
  auto put = index->Put(a, "resnet");
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  EXPECT_FALSE(put->already_indexed);
  EXPECT_EQ(put->replaced_model_id, "");
  EXPECT_EQ(put->info.names, std::vector<std::string>{"resnet"});
  for (const std::string& key : {a.model_id, std::string("resnet")}) {
    auto got = index->Get(key);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ExpectSameMetadata(*got, a);
    EXPECT_EQ(got->names, std::vector<std::string>{"resnet"});
  }
  // Another instance (a replica, a restart) sees it.
  auto other = this->backend_.OpenIndex()->Get("resnet");
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  ExpectSameMetadata(*other, a);
}

TYPED_TEST(ModelIndexContract, ANameMovesAndTheOldModelStays) {
  ModelIndex* index = this->backend_.OpenIndex();
  const ModelInfo a = Info("a"), b = Info("b");
  ASSERT_TRUE(index->Put(a, "latest").ok());
  auto put = index->Put(b, "latest");
  ASSERT_TRUE(put.ok());
  EXPECT_EQ(put->replaced_model_id, a.model_id);
  EXPECT_EQ(index->Get("latest")->model_id, b.model_id);
  auto old = index->Get(a.model_id);
  ASSERT_TRUE(old.ok());
  EXPECT_TRUE(old->names.empty());
  // Putting a name on the model it already names replaces nothing.
  EXPECT_EQ(index->Put(b, "latest")->replaced_model_id, "");
}

TYPED_TEST(ModelIndexContract, PutIfNameFreeRefusesANameOfAnotherModelAndChangesNothing) {
  ModelIndex* index = this->backend_.OpenIndex();
  const ModelInfo a = Info("a"), b = Info("b");
  ASSERT_TRUE(index->Put(a, "latest").ok());
  auto put = index->PutIfNameFree(b, "latest");
  ASSERT_EQ(put.status().code(), StatusCode::kAlreadyExists) << put.status().ToString();
  EXPECT_NE(put.status().message().find("'latest'"), std::string::npos) << put.status().message();
  EXPECT_NE(put.status().message().find(a.model_id), std::string::npos) << put.status().message();
  // Nothing of the refused Put is stored: not the name's move, not the new model.
  EXPECT_EQ(index->Get("latest")->model_id, a.model_id);
  EXPECT_EQ(index->Get(b.model_id).status().code(), StatusCode::kNotFound);
  // A free name, and the name the model already has, are fine.
  auto free = index->PutIfNameFree(b, "other");
  ASSERT_TRUE(free.ok()) << free.status().ToString();
  EXPECT_FALSE(free->already_indexed);
  auto same = index->PutIfNameFree(a, "latest");
  ASSERT_TRUE(same.ok()) << same.status().ToString();
  EXPECT_TRUE(same->already_indexed);
  EXPECT_EQ(same->replaced_model_id, "");
  EXPECT_EQ(same->info.names, std::vector<std::string>{"latest"});
}

TYPED_TEST(ModelIndexContract, SecondPutOfAnIdKeepsItsMetadataAndAddsNames) {
  ModelIndex* index = this->backend_.OpenIndex();
  const ModelInfo a = Info("a");
  ASSERT_TRUE(index->Put(a, "zeta").ok());
  ModelInfo changed = a;
  changed.producer_name = "other";
  auto put = index->Put(changed, "alpha");
  ASSERT_TRUE(put.ok());
  EXPECT_TRUE(put->already_indexed);
  EXPECT_EQ(put->info.producer_name, a.producer_name);
  EXPECT_EQ(put->info.names, (std::vector<std::string>{"alpha", "zeta"}));
  ASSERT_TRUE(index->Put(a, "").ok());  // no name: nothing changes
  EXPECT_EQ(index->Get(a.model_id)->names, (std::vector<std::string>{"alpha", "zeta"}));
  auto totals = index->GetTotals();
  ASSERT_TRUE(totals.ok());
  EXPECT_EQ(totals->models, 1u);
  EXPECT_EQ(totals->bytes, a.size_bytes);
}

TYPED_TEST(ModelIndexContract, RemoveByNameByIdAndTheLastName) {
  ModelIndex* index = this->backend_.OpenIndex();
  const ModelInfo a = Info("a"), b = Info("b");
  ASSERT_TRUE(index->Put(a, "one").ok());
  ASSERT_TRUE(index->Put(a, "two").ok());
  ASSERT_TRUE(index->Put(b, "three").ok());
  ASSERT_TRUE(index->Put(b, "four").ok());
  // A name of a model with another name: only the name goes.
  auto r = index->Remove("one");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->model_id, a.model_id);
  EXPECT_FALSE(r->model_removed);
  EXPECT_EQ(index->Get(a.model_id)->names, std::vector<std::string>{"two"});
  EXPECT_EQ(index->Get("one").status().code(), StatusCode::kNotFound);
  // Its last name: the model goes too.
  r = index->Remove("two");
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->model_removed);
  EXPECT_EQ(index->Get(a.model_id).status().code(), StatusCode::kNotFound);
  // By id: the model and all its names.
  r = index->Remove(b.model_id);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->model_removed);
  EXPECT_EQ(index->Get("three").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(index->Get("four").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(index->Remove(b.model_id).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(index->Remove("four").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(index->GetTotals()->models, 0u);
  // Names are free again.
  ASSERT_TRUE(index->Put(b, "four").ok());
  EXPECT_EQ(index->Put(b, "four")->replaced_model_id, "");
}

TYPED_TEST(ModelIndexContract, ListsInIdOrderInPages) {
  ModelIndex* index = this->backend_.OpenIndex();
  std::vector<std::string> ids;
  uint64_t bytes = 0;
  for (int i = 0; i < 7; ++i) {
    ModelInfo m = Info("m" + std::to_string(i), 100 + i);
    ids.push_back(m.model_id);
    bytes += m.size_bytes;
    ASSERT_TRUE(index->Put(m, "n" + std::to_string(i)).ok());
  }
  std::sort(ids.begin(), ids.end());
  auto all = index->ListAfter("", 0);
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 7u);
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ((*all)[i].model_id, ids[i]);
  std::vector<std::string> paged;
  std::string after;
  for (;;) {
    auto page = index->ListAfter(after, 3);
    ASSERT_TRUE(page.ok());
    EXPECT_LE(page->size(), 3u);
    if (page->empty()) break;
    for (const auto& m : *page) paged.push_back(m.model_id);
    after = page->back().model_id;
  }
  EXPECT_EQ(paged, ids);
  auto totals = index->GetTotals();
  EXPECT_EQ(totals->models, 7u);
  EXPECT_EQ(totals->bytes, bytes);
}

TYPED_TEST(ModelIndexContract, RefusesBadIdsAndNames) {
  ModelIndex* index = this->backend_.OpenIndex();
  ModelInfo bad = Info("a");
  bad.model_id = "not-an-id";
  EXPECT_EQ(index->Put(bad, "x").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(index->Put(Info("a"), Sha256Hex("looks like an id")).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(index->Put(Info("a"), ".hidden").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(index->Put(Info("a"), "a/b").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(index->Get("nothing").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(index->Get(Sha256Hex("nothing")).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(index->GetTotals()->models, 0u);
}

TYPED_TEST(ModelIndexContract, ConcurrentPutsFromTwoInstances) {
  // The embedded index is one process's: its two instances would not see each other's writes.
  // Threads share one instance there; PostgreSQL gets one instance (pool) per thread pair.
  ModelIndex* a = this->backend_.OpenIndex();
  ModelIndex* b = std::string(TypeParam::kName) == "embedded" ? a : this->backend_.OpenIndex();
  constexpr int kThreads = 4, kEach = 10;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      ModelIndex* index = t % 2 ? a : b;
      for (int i = 0; i < kEach; ++i) {
        // Every thread also moves the shared name "hot".
        const ModelInfo m = Info("t" + std::to_string(t) + "-" + std::to_string(i));
        if (!index->Put(m, "n" + std::to_string(t) + "-" + std::to_string(i)).ok()) ++failures;
        if (!index->Put(m, "hot").ok()) ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(a->GetTotals()->models, static_cast<uint64_t>(kThreads * kEach));
  // "hot" names exactly one model.
  int named_hot = 0;
  auto all = a->ListAfter("", 0);
  ASSERT_TRUE(all.ok());
  for (const auto& m : *all) named_hot += std::count(m.names.begin(), m.names.end(), "hot");
  EXPECT_EQ(named_hot, 1);
}

}  // namespace
}  // namespace kiln::store::contract
