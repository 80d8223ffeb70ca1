// The PostgreSQL fixture itself (tests/support/pg_server.h): a real server of version 15, its own
// port (not the package's 5432), run as `postgres` when the test runs as root, restartable, gone
// with its temp dir after Stop().
#include "tests/support/pg_server.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <pqxx/pqxx>

namespace kiln::testing {
namespace {

// Real uid of a process, from /proc/<pid>/status ("Uid:\treal\teffective...").
long UidOf(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("Uid:", 0) == 0) return std::stol(line.substr(4));
  }
  return -1;
}

TEST(PgServerTest, StartsQueriesRestartsAndCleansUp) {
  auto pg = PgServer::Start();
  ASSERT_TRUE(pg.ok()) << pg.status().ToString();
  PgServer& s = **pg;
  EXPECT_NE(s.port(), 5432);
  const std::string dir = s.dir();
  ASSERT_TRUE(std::filesystem::is_directory(dir + "/data"));
  if (::geteuid() == 0) {
    struct stat st {};
    ASSERT_EQ(::stat(dir.c_str(), &st), 0);
    EXPECT_NE(st.st_uid, 0u) << "temp dir must belong to the unprivileged user";
    EXPECT_NE(UidOf(s.pid()), 0) << "postgres must not run as root";
  }
  auto url = s.CreateDatabase("fixture");
  ASSERT_TRUE(url.ok()) << url.status().ToString();
  {
    pqxx::connection c(*url);
    pqxx::work tx(c);
    EXPECT_GE(tx.exec1("SHOW server_version_num")[0].as<int>(), 150000);
    EXPECT_LT(tx.exec1("SHOW server_version_num")[0].as<int>(), 160000);
    tx.exec0("CREATE TABLE t (v int)");
    tx.exec0("INSERT INTO t VALUES (42)");
    tx.commit();
  }
  // A restart breaks connections and keeps the data.
  pqxx::connection before(*url);
  const pid_t old_pid = s.pid();
  ASSERT_TRUE(s.Restart().ok());
  EXPECT_NE(s.pid(), old_pid);
  EXPECT_THROW(
      {
        pqxx::work tx(before);
        tx.exec1("SELECT 1");
      },
      pqxx::broken_connection);
  {
    pqxx::connection c(*url);
    pqxx::work tx(c);
    EXPECT_EQ(tx.exec1("SELECT v FROM t")[0].as<int>(), 42);
  }
  const pid_t pid = s.pid();
  ASSERT_TRUE(s.Stop().ok());
  EXPECT_FALSE(std::filesystem::exists(dir));
  EXPECT_NE(::kill(pid, 0), 0) << "postmaster still alive after Stop";
  EXPECT_THROW(pqxx::connection c(*url), pqxx::broken_connection);
}

}  // namespace
}  // namespace kiln::testing
