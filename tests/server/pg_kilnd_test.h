// The fixture of the tests that run kilnd on a shared store: a KilndTest (tests/server/kilnd_test_util.h)
// with one throwaway PostgreSQL for the whole suite (tests/support/pg_server.h) and a fresh database
// per test, named by the suite (DatabaseName), whose URL is url_.
#pragma once

#include <gtest/gtest.h>

#include <string>

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

  static inline PgServer* server_ = nullptr;
  std::string url_;
};

}  // namespace kiln::testing
