// Model references (api/models.h ResolveModelRef): short id prefixes, exact names over prefixes,
// ambiguous prefixes; and naming stored bytes without sending them again (an upload that ends
// after its header, kiln/v1/model.proto UploadHeader.sha256). On a real ModelStore in a temp dir.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "api/models.h"
#include "common/sha256.h"
#include "store/index_file.h"
#include "store/model_store.h"
#include "tests/server/onnx_bytes.h"

namespace fs = std::filesystem;

namespace kiln::api {
namespace {

class ModelRefs : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kiln-model-refs-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::unique_ptr<store::ModelStore> Open() {
    store::ModelStoreOptions o;
    o.dir = dir_;
    auto s = store::ModelStore::Open(o);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(s).value() : nullptr;
  }

  // A store whose ids are chosen (sha256 prefixes cannot be picked): objects of the recorded size
  // and an index with a valid checksum, as kilnd writes them. Open checks sizes, not hashes (those
  // are checked on read), which is all the prefix rules need.
  void Craft(const std::vector<std::pair<std::string, std::vector<std::string>>>& models) {
    fs::create_directories(dir_ / "objects");
    std::vector<store::ModelInfo> infos;
    for (const auto& [id, names] : models) {
      store::ModelInfo m;
      m.model_id = id;
      m.names = names;
      m.size_bytes = 16;
      std::ofstream(dir_ / "objects" / (id + ".onnx"), std::ios::binary) << std::string(16, 'x');
      infos.push_back(m);
    }
    std::sort(infos.begin(), infos.end(), [](const auto& a, const auto& b) { return a.model_id < b.model_id; });
    std::ofstream(dir_ / "index.yaml", std::ios::binary) << store::internal::SerializeIndex(infos);
  }

  // `prefix`, then n as 4 hex digits, then zeros: 64 digits.
  static std::string Id(const std::string& prefix, int n) {
    char digits[5];
    std::snprintf(digits, sizeof digits, "%04x", n);
    std::string id = prefix + digits;
    return id + std::string(64 - id.size(), '0');
  }

  fs::path dir_;
};

TEST_F(ModelRefs, UniquePrefixOfEightOrMoreHexDigitsResolvesToTheId) {
  const std::string unique = Id("abcdef02", 0xbeef);
  Craft({{unique, {"u"}}, {Id("abcdef03", 1), {"v"}}});
  auto store = Open();
  ASSERT_NE(store, nullptr);
  auto r = ResolveModelRef(*store, "abcdef02");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, unique);
  r = ResolveModelRef(*store, unique.substr(0, 40));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, unique);
  // An id and a name come back as they are (a name keeps its meaning: DeleteModel of a name).
  EXPECT_EQ(ResolveModelRef(*store, unique).value(), unique);
  EXPECT_EQ(ResolveModelRef(*store, "v").value(), "v");
  // Seven digits are not a prefix; nor is anything but lowercase hex; an unknown prefix.
  for (const std::string bad : {"abcdef0", "ABCDEF02", "abcdef0g", "abcdef04"}) {
    auto miss = ResolveModelRef(*store, bad);
    ASSERT_FALSE(miss.ok()) << bad;
    EXPECT_EQ(miss.status().code(), StatusCode::kNotFound) << bad << ": " << miss.status().message();
  }
  EXPECT_NE(ResolveModelRef(*store, "abcdef04").status().message().find("id prefix 'abcdef04'"), std::string::npos);
  // A hex string too short to be a prefix says so.
  EXPECT_EQ(ResolveModelRef(*store, "abcdef0").status().message(),
            "no model with id or name 'abcdef0' (an id prefix needs at least 8 hex digits)");
}

TEST_F(ModelRefs, ExactNameWinsOverAPrefix) {
  const std::string named = Id("12345678", 7);
  const std::string prefixed = Id("deadbeef", 9);
  Craft({{named, {"deadbeef"}}, {prefixed, {"other"}}});
  auto store = Open();
  ASSERT_NE(store, nullptr);
  auto r = ResolveModelRef(*store, "deadbeef");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, "deadbeef");
  EXPECT_EQ(store->Get(*r)->model_id, named);
  EXPECT_EQ(ResolveModelRef(*store, "deadbeef0").value(), prefixed);  // one more digit: the prefix
}

TEST_F(ModelRefs, AmbiguousPrefixIsInvalidArgumentListingAtMostFiveCandidates) {
  std::vector<std::pair<std::string, std::vector<std::string>>> models;
  for (int i = 0; i < 7; ++i) models.push_back({Id("abcdef01", i), {"m" + std::to_string(i)}});
  models.push_back({Id("99999999", 1), {"p"}});
  models.push_back({Id("99999999", 2), {}});
  Craft(models);
  auto store = Open();
  ASSERT_NE(store, nullptr);
  auto r = ResolveModelRef(*store, "abcdef01");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  const std::string& msg = r.status().message();
  EXPECT_NE(msg.find("ambiguous"), std::string::npos) << msg;
  for (int i = 0; i < 5; ++i) EXPECT_NE(msg.find("(m" + std::to_string(i) + ")"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("(m5)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("and more"), std::string::npos) << msg;
  r = ResolveModelRef(*store, "99999999");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find(Id("99999999", 1).substr(0, 16) + " (p)"), std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find(Id("99999999", 2).substr(0, 16)), std::string::npos);
  EXPECT_EQ(r.status().message().find("and more"), std::string::npos) << r.status().message();
  // Digits enough to tell them apart resolve.
  EXPECT_EQ(ResolveModelRef(*store, Id("abcdef01", 3).substr(0, 12)).value(), Id("abcdef01", 3));
}

// Bytes stored under one name get a second one from the header alone: nothing is sent, nothing
// is written but the index; the first name stays.
TEST_F(ModelRefs, HeaderOnlyUploadNamesStoredBytes) {
  auto store = Open();
  ASSERT_NE(store, nullptr);
  const std::string bytes = kiln::testing::MakeOnnxBytes(3000);
  const std::string sha = Sha256Hex(bytes);
  auto up = store->BeginUpload("first", bytes.size(), sha);
  ASSERT_TRUE(up.ok()) << up.status().ToString();
  ASSERT_TRUE((*up)->Append(bytes.data(), bytes.size()).ok());
  ASSERT_TRUE((*up)->Commit().ok());

  auto named = store->BeginUpload("second", bytes.size(), sha);
  ASSERT_TRUE(named.ok()) << named.status().ToString();
  bool already = false;
  auto info = (*named)->Commit(&already);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_TRUE(already);
  EXPECT_EQ(info->model_id, sha);
  EXPECT_EQ(info->names, (std::vector<std::string>{"first", "second"}));
  EXPECT_EQ(store->Get("second")->model_id, sha);
  EXPECT_EQ(store->reserved_bytes(), 0u);
  EXPECT_TRUE(fs::is_empty(dir_ / "tmp"));

  // Unknown bytes (or a size that is not the stored one) still need their bytes.
  const std::string other = Sha256Hex(kiln::testing::MakeOnnxBytes(3000, 2));
  for (const auto& [sha256, size] : {std::pair{other, bytes.size()}, std::pair{sha, bytes.size() + 1}}) {
    auto empty = store->BeginUpload("third", size, sha256);
    ASSERT_TRUE(empty.ok()) << empty.status().ToString();
    auto refused = (*empty)->Commit();
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(refused.status().message().find("no stored model has sha256"), std::string::npos)
        << refused.status().message();
  }
  EXPECT_FALSE(store->Get("third").ok());
  EXPECT_EQ(store->reserved_bytes(), 0u);

  // Survives a restart (the index was written).
  store.reset();
  store = Open();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->Get("second")->model_id, sha);
}

}  // namespace
}  // namespace kiln::api
