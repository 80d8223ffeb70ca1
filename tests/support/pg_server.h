// Test fixture: a throwaway PostgreSQL 15 server, for tests of the shared
// state against a real database — no mocks.
//
//   auto pg = kiln::testing::PgServer::Start();   // initdb + postgres, ~1 s
//   ASSERT_TRUE(pg.ok()) << pg.status().ToString();
//   auto url = (*pg)->CreateDatabase("blobs");     // a fresh database per test
//
// What it does: initdb into a new temp dir (TMPDIR or /tmp, kiln-pg-XXXXXX) with the binaries of
// Debian's postgresql-15 (/usr/lib/postgresql/15/bin; scripts/install-deps.sh installs it), then
// runs `postgres` on a free port of 127.0.0.1 (picked by binding port 0; retried when another
// process takes it first) with its unix socket in the same temp dir. The cluster that installing
// the package creates on 5432 is never touched. PostgreSQL refuses to run as root, so when the
// test runs as root (CI) the temp dir is chown'ed to the `postgres` user and the children drop to
// it (setgroups, setgid, setuid) before exec; as another user they run as that user.
// Durability is off (fsync, synchronous_commit, full_page_writes): a test database never
// outlives its test. Superuser `kiln`, trust authentication on loopback only.
// The server dies with the thread that started it (PR_SET_PDEATHSIG: SIGQUIT, an immediate
// shutdown), so a crashed test leaves no server behind, and the next Start removes the temp dirs
// whose owner (owner.pid) is gone; Stop() (or the destructor) shuts the server down (SIGINT, fast
// shutdown; SIGKILL after 10 s) and removes the temp dir.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>

#include "common/status.h"

namespace kiln::testing {

class PgServer {
 public:
  static constexpr char kBinDir[] = "/usr/lib/postgresql/15/bin";

  /// FAILED_PRECONDITION when postgresql-15 is not installed or, as root, there is no `postgres`
  /// user; INTERNAL (with the tail of initdb's or postgres' log) when the server does not start.
  static Result<std::unique_ptr<PgServer>> Start();
  ~PgServer();
  PgServer(const PgServer&) = delete;
  PgServer& operator=(const PgServer&) = delete;

  /// postgresql://kiln@127.0.0.1:<port>/<database>
  std::string url(const std::string& database = "postgres") const;
  /// Creates a new, empty database named `<prefix>_<n>` and returns its URL.
  Result<std::string> CreateDatabase(const std::string& prefix);
  /// Fast shutdown, then removes the temp dir. Idempotent.
  Status Stop();
  /// Stops the server (fast shutdown) and starts it again on the same data dir and port, after
  /// `down` without a server: connections break, data stays (tests of reconnection).
  Status Restart(std::chrono::milliseconds down = std::chrono::milliseconds(0));

  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  const std::string& dir() const { return dir_; }

 private:
  PgServer() = default;
  Status RunInitdb();
  Status StartPostgres();
  Status WaitReady();
  Status Shutdown();

  std::string dir_;  // temp dir: data/, the socket, *.log
  int port_ = 0;
  pid_t pid_ = -1;
  uid_t uid_ = 0;    // what the children run as
  gid_t gid_ = 0;
  bool drop_ = false;  // running as root: children drop to uid_/gid_
  int next_db_ = 0;
};

}  // namespace kiln::testing
