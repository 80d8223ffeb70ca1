// `kilnd migrate --from-data-dir DIR` (store/migrate.h, server/kilnd_main.cc) end to end: a real
// embedded kilnd fills a data dir, the real kilnd binary copies it into a real PostgreSQL
// (tests/support/pg_server.h, a throwaway server for this binary, a fresh database per test), and
// a kilnd on that database serves every model with the same id, names, metadata and bytes. Also:
// a second run changes nothing, the data dir is never written, a running kilnd's dir is refused,
// a dry run writes nothing, and conflicting bytes or names are refused without writing.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <pqxx/pqxx>

#include <filesystem>
#include <fstream>
#include <map>

#include "common/sha256.h"
#include "kiln/v1/model.grpc.pb.h"
#include "tests/server/kilnd_process.h"
#include "tests/server/kilnd_test_util.h"
#include "tests/server/onnx_bytes.h"
#include "tests/server/pg_kilnd_test.h"
#include "tests/support/pg_server.h"

namespace fs = std::filesystem;

namespace kiln::testing {
namespace {

using kiln::v1::ModelService;

void Exec(const std::string& url, const std::string& sql) {
  pqxx::connection c(url);
  pqxx::work tx(c);
  tx.exec(sql);
  tx.commit();
}

// Every file under `dir`: size, mtime (ns) and, for index.yaml, the content.
std::map<std::string, std::string> DirState(const fs::path& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    struct stat st {};
    ::lstat(e.path().c_str(), &st);
    std::string v = std::to_string(st.st_size) + "@" + std::to_string(st.st_mtim.tv_sec) + "." +
                    std::to_string(st.st_mtim.tv_nsec) + " mode " + std::to_string(st.st_mode);
    if (e.path().filename() == "index.yaml") v += "\n" + ReadFileBytes(e.path().string());
    out[fs::relative(e.path(), dir).string()] = v;
  }
  return out;
}

class PgMigrateE2E : public PgKilndTest {
 protected:
  std::string DatabaseName() const override { return "migrate"; }

  // `ENV kilnd migrate --from-data-dir dir_/data ARGS` (ENV: KILN_DATABASE=url_ when empty): stdout
  // and stderr, also appended to kilnd.log (shown on failure, or with KILN_TEST_LOGS=1).
  std::string Migrate(const std::string& args, int* rc, const std::string& env = "") {
    std::string out = RunShell((env.empty() ? "KILN_DATABASE='" + url_ + "'" : env) + " " + KILND_BINARY +
                                   " migrate --from-data-dir " + (dir_ / "data").string() + " " + args + " 2>&1",
                               rc);
    std::ofstream(dir_ / "kilnd.log", std::ios::app) << "---- kilnd migrate " << args << " (exit " << *rc << ")\n"
                                                    << out;
    return out;
  }
  std::unique_ptr<KilndProcess> Replica(const std::string& name, const std::string& url = "") {
    return std::make_unique<KilndProcess>(
        KILND_BINARY,
        std::vector<std::string>{"--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--data-dir",
                                 (dir_ / name).string(), "--shutdown-grace", "2", "--log-level", "warn"},
        (dir_ / "kilnd.log").string(), std::vector<std::string>{"KILN_DATABASE=" + (url.empty() ? url_ : url)});
  }
  static std::unique_ptr<ModelService::Stub> Models(const KilndProcess& k) {
    grpc::ChannelArguments ch;
    ch.SetMaxReceiveMessageSize(64 << 20);
    return ModelService::NewStub(grpc::CreateCustomChannel(k.grpc_address(), grpc::InsecureChannelCredentials(), ch));
  }
  static std::vector<kiln::v1::Model> List(ModelService::Stub& stub) { return ListAll(stub); }

  // An embedded kilnd on dir_/data with these models (name -> bytes); returns its listing.
  std::vector<kiln::v1::Model> FillEmbedded(const std::vector<std::pair<std::string, std::string>>& uploads) {
    auto k = StartKilnd({"--log-level", "warn"});
    auto stub = Models(*k);
    for (const auto& [name, bytes] : uploads) {
      kiln::v1::UploadModelResponse up;
      grpc::Status st = UploadBytes(*stub, name, bytes, &up);
      EXPECT_TRUE(st.ok()) << name << ": " << st.error_message();
    }
    auto listed = List(*stub);
    EXPECT_EQ(k->Stop(), 0);
    return listed;
  }
};

TEST_F(PgMigrateE2E, EveryModelMovesWithItsIdNamesAndBytesAndASecondRunChangesNothing) {
  const std::string mnist = ReadFileBytes(std::string(KILN_TEST_DATA) + "/server/mnist-ai85net5.qat.onnx");
  ASSERT_GT(mnist.size(), 500000u);
  std::map<std::string, std::string> bytes_by_id;
  std::vector<std::pair<std::string, std::string>> uploads = {
      {"mnist", mnist}, {"mnist-again", mnist},  // two names, one model
      {"big", MakeOnnxBytes(3 << 20, 7)},         // several 1 MiB chunks
      {"small1", MakeOnnxBytes(2000, 1)}, {"small2", MakeOnnxBytes(2000, 2)}, {"small3", MakeOnnxBytes(2000, 3)}};
  for (const auto& [name, bytes] : uploads) bytes_by_id[Sha256Hex(bytes)] = bytes;
  uint64_t total = 0;
  for (const auto& [id, bytes] : bytes_by_id) total += bytes.size();

  // A data dir that a kilnd holds is refused, and the database is not touched.
  auto embedded = StartKilnd({"--log-level", "warn"});
  {
    auto stub = Models(*embedded);
    for (const auto& [name, bytes] : uploads) {
      kiln::v1::UploadModelResponse up;
      ASSERT_TRUE(UploadBytes(*stub, name, bytes, &up).ok()) << name;
    }
  }
  int rc = 0;
  std::string out = Migrate("", &rc);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("in use by another process"), std::string::npos) << out;
  EXPECT_EQ(Count(url_, "SELECT count(*) FROM pg_tables WHERE tablename LIKE 'kiln_%'"), 0);
  std::vector<kiln::v1::Model> before = List(*Models(*embedded));
  ASSERT_EQ(before.size(), 5u);
  ASSERT_EQ(embedded->Stop(), 0);
  const auto dir_state = DirState(dir_ / "data");

  // A dry run says what would move and writes nothing, not even the schema.
  out = Migrate("--dry-run", &rc);
  ASSERT_EQ(rc, 0) << out;
  for (const auto& m : before) EXPECT_NE(out.find("would move " + m.model_id()), std::string::npos) << out;
  EXPECT_NE(out.find("5 models to move (" + std::to_string(total) + " bytes)"), std::string::npos) << out;
  EXPECT_EQ(Count(url_, "SELECT count(*) FROM pg_tables WHERE tablename LIKE 'kiln_%'"), 0);

  // The URL from a file, as kilnd takes it (--database-url-file).
  const fs::path url_file = dir_ / "database-url";
  std::ofstream(url_file) << url_ << "\n";
  out = Migrate("--database-url-file " + url_file.string(), &rc, "env -u KILN_DATABASE");
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("5 models moved (" + std::to_string(total) + " bytes), 0 already present"), std::string::npos)
      << out;
  EXPECT_NE(out.find("6 names added"), std::string::npos) << out;
  EXPECT_EQ(DirState(dir_ / "data"), dir_state) << "the data dir was written";
  EXPECT_EQ(Count(url_, "SELECT count(*) FROM kiln_models"), 5);
  EXPECT_EQ(Count(url_, "SELECT count(*) FROM kiln_model_names"), 6);
  EXPECT_EQ(Count(url_, "SELECT count(*) FROM kiln_blobs"), 5);

  // A kilnd on the database serves the same models: ids, names, metadata, bytes.
  {
    auto replica = Replica("replica");
    auto stub = Models(*replica);
    std::vector<kiln::v1::Model> after = List(*stub);
    ASSERT_EQ(after.size(), before.size());
    for (size_t i = 0; i < before.size(); ++i) EXPECT_EQ(after[i].DebugString(), before[i].DebugString());
    for (const auto& m : before) {
      std::string got;
      grpc::Status st = ReadAll(*stub, m.model_id(), &got);
      ASSERT_TRUE(st.ok()) << st.error_message();
      EXPECT_TRUE(got == bytes_by_id[m.model_id()]) << m.model_id();
      for (const auto& name : m.names()) {
        ASSERT_TRUE(ReadAll(*stub, name, &got).ok()) << name;
        EXPECT_TRUE(got == bytes_by_id[m.model_id()]) << name;
      }
    }
  }

  // A second run changes nothing and reports every model as present, verified.
  out = Migrate("", &rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("0 models moved (0 bytes), 5 already present (" + std::to_string(total) + " bytes verified)"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("0 names added"), std::string::npos) << out;
  EXPECT_EQ(Count(url_, "SELECT count(*) FROM kiln_models"), 5);
  EXPECT_EQ(Count(url_, "SELECT count(*) FROM kiln_model_names"), 6);
  EXPECT_EQ(Count(url_, "SELECT count(*) FROM kiln_blobs"), 5);
  EXPECT_EQ(Count(url_, "SELECT count(*) FROM pg_largeobject_metadata"), 5);
  EXPECT_EQ(DirState(dir_ / "data"), dir_state);

  // Other bytes under an id in the database (same size): an error naming the id, nothing overwritten.
  const std::string small1 = Sha256Hex(MakeOnnxBytes(2000, 1));
  Exec(url_, "SELECT lo_put(loid, 10, '\\xdeadbeef'::bytea) FROM kiln_blobs WHERE sha256 = '" + small1 + "'");
  const int64_t tampered = Count(url_, "SELECT count(*) FROM kiln_blobs b, pg_largeobject l WHERE b.sha256 = '" +
                                           small1 + "' AND l.loid = b.loid AND position('\\xdeadbeef'::bytea IN l.data) > 0");
  ASSERT_EQ(tampered, 1);
  out = Migrate("", &rc);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("model " + small1 + ": the database holds different bytes under this id"), std::string::npos)
      << out;
  EXPECT_NE(out.find("nothing was written"), std::string::npos) << out;
  EXPECT_EQ(Count(url_, "SELECT count(*) FROM kiln_blobs b, pg_largeobject l WHERE b.sha256 = '" + small1 +
                            "' AND l.loid = b.loid AND position('\\xdeadbeef'::bytea IN l.data) > 0"),
            1);
}

TEST_F(PgMigrateE2E, ANameThatPointsElsewhereInTheDatabaseIsRefusedAndNothingIsWritten) {
  FillEmbedded({{"resnet", MakeOnnxBytes(4000, 1)}, {"other", MakeOnnxBytes(4000, 2)}});
  // The farm already gives "resnet" to other bytes.
  {
    auto replica = Replica("replica");
    kiln::v1::UploadModelResponse up;
    ASSERT_TRUE(UploadBytes(*Models(*replica), "resnet", MakeOnnxBytes(4000, 9), &up).ok());
  }
  int rc = 0;
  std::string out = Migrate("", &rc);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("name 'resnet' of model " + Sha256Hex(MakeOnnxBytes(4000, 1)) +
                     " points at another model in the database (" + Sha256Hex(MakeOnnxBytes(4000, 9)) + ")"),
            std::string::npos)
      << out;
  // Not even the model without a conflict ("other") went in; the name stays where it was.
  EXPECT_EQ(Count(url_, "SELECT count(*) FROM kiln_models"), 1);
  EXPECT_EQ(Count(url_, "SELECT count(*) FROM kiln_model_names WHERE name = 'resnet' AND model_id = '" +
                            Sha256Hex(MakeOnnxBytes(4000, 9)) + "'"),
            1);
  // The dry run reports the same conflict.
  out = Migrate("--dry-run", &rc);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("name 'resnet'"), std::string::npos) << out;
}

TEST_F(PgMigrateE2E, AModelTheDatabaseHasGetsTheDataDirsNamesAndMissingBytesBack) {
  const std::string bytes = MakeOnnxBytes(5000, 4);
  const std::string id = Sha256Hex(bytes);
  FillEmbedded({{"resnet", bytes}});
  {
    auto replica = Replica("replica");
    kiln::v1::UploadModelResponse up;
    ASSERT_TRUE(UploadBytes(*Models(*replica), "farm-name", bytes, &up).ok());
  }
  // Indexed without its bytes (README: a delete racing an upload can leave that).
  Exec(url_, "SELECT lo_unlink(loid) FROM kiln_blobs; DELETE FROM kiln_blobs");
  int rc = 0;
  std::string out = Migrate("", &rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("already present " + id + " (resnet), bytes restored, names added: resnet"), std::string::npos)
      << out;
  EXPECT_NE(out.find("0 models moved (" + std::to_string(bytes.size()) + " bytes), 1 already present (0 bytes "
                     "verified, 1 restored), 1 names added"),
            std::string::npos)
      << out;
  EXPECT_EQ(Count(url_, "SELECT count(*) FROM kiln_blobs WHERE sha256 = '" + id + "'"), 1);
  EXPECT_EQ(Count(url_, "SELECT count(*) FROM kiln_model_names WHERE model_id = '" + id + "'"), 2);
  auto replica = Replica("replica");
  auto stub = Models(*replica);
  for (const char* ref : {"resnet", "farm-name"}) {
    std::string got;
    grpc::Status st = ReadAll(*stub, ref, &got);
    ASSERT_TRUE(st.ok()) << ref << ": " << st.error_message();
    EXPECT_TRUE(got == bytes) << ref;
  }
}

TEST_F(PgMigrateE2E, NoDatabaseOrNoDataDirIsAUsageError) {
  int rc = 0;
  std::string out = Migrate("", &rc, "env -u KILN_DATABASE");
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("KILN_DATABASE"), std::string::npos) << out;
  out = RunShell("KILN_DATABASE='" + url_ + "' " + KILND_BINARY + " migrate 2>&1", &rc);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("--from-data-dir"), std::string::npos) << out;
  // A dir that is not a data dir: refused, and not created.
  out = Migrate("", &rc);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("index.yaml does not exist"), std::string::npos) << out;
}

}  // namespace
}  // namespace kiln::testing
