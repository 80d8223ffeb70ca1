// The fixture of the tests that run kilnd on a shared store: a KilndTest (tests/server/kilnd_test_util.h)
// with one throwaway PostgreSQL for the whole suite (tests/support/pg_server.h) and a fresh database
// per test, named by the suite (DatabaseName), whose URL is url_.
#pragma once

#include <gtest/gtest.h>

#include <grpcpp/grpcpp.h>
#include <pqxx/pqxx>

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/v1/model.grpc.pb.h"
#include "tests/server/kilnd_test_util.h"
#include "tests/support/pg_server.h"

namespace kiln::testing {

class PgKilndTest : public KilndTest {
 protected:
  static void SetUpTestSuite() {
    auto s = PgServer::Start();
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    server_ = std::move(s).value().release();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override {
    KilndTest::SetUp();
    ASSERT_NE(server_, nullptr);
    auto url = server_->CreateDatabase(DatabaseName());
    ASSERT_TRUE(url.ok()) << url.status().ToString();
    url_ = *url;
  }
  /// The name of each test's database on the suite's server.
  virtual std::string DatabaseName() const = 0;

  /// The one integer a SQL query on database `url` returns.
  static int64_t Count(const std::string& url, const std::string& sql) {
    pqxx::connection c(url);
    pqxx::work tx(c);
    return tx.exec1(sql)[0].as<int64_t>();
  }
  /// Every model a replica lists, read two to a page (so several pages); a failed page fails the test.
  static std::vector<kiln::v1::Model> ListAll(kiln::v1::ModelService::Stub& stub) {
    std::vector<kiln::v1::Model> out;
    std::string token;
    do {
      grpc::ClientContext ctx;
      kiln::v1::ListModelsRequest req;
      req.set_page_size(2);
      req.set_page_token(token);
      kiln::v1::ListModelsResponse resp;
      grpc::Status st = stub.ListModels(&ctx, req, &resp);
      EXPECT_TRUE(st.ok()) << st.error_message();
      if (!st.ok()) break;
      for (const auto& m : resp.models()) out.push_back(m);
      token = resp.next_page_token();
    } while (!token.empty());
    return out;
  }
  /// The bytes of model `ref` (id or name) streamed by ReadModel into `out`.
  static grpc::Status ReadAll(kiln::v1::ModelService::Stub& stub, const std::string& ref, std::string* out) {
    grpc::ClientContext ctx;
    kiln::v1::ReadModelRequest req;
    req.set_model_id(ref);
    auto reader = stub.ReadModel(&ctx, req);
    kiln::v1::ReadModelResponse chunk;
    out->clear();
    while (reader->Read(&chunk)) *out += chunk.chunk();
    return reader->Finish();
  }

  static inline PgServer* server_ = nullptr;
  std::string url_;
};

}  // namespace kiln::testing
