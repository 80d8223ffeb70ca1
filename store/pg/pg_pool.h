// kiln::store::pg::PgPool — a small pool of libpqxx connections to the PostgreSQL that holds a
// farm's shared state (../../README.md "Shared state on PostgreSQL").
//
// Client library: libpqxx 6.4 (Debian 12's libpqxx-dev; its API differs from the 7.x
// documentation: see /usr/include/pqxx). The URL is handed to libpq as is, so every libpq
// connection parameter works, `sslmode=verify-full&sslrootcert=...` included (TLS is libpq's).
// Connections are opened lazily up to `size`, handed out one caller at a time (Lease) and returned
// on the lease's destruction; a connection that broke (pqxx::broken_connection: PostgreSQL
// restarted, network cut) is dropped and the next Acquire opens a new one, so the pool recovers
// from a database restart by itself.
// Prepared statements: components register (name, SQL) once (Prepare); every connection prepares
// them before it is handed out (libpqxx prepares lazily, on first use, per connection).
// Errors: UNAVAILABLE when no connection can be opened or none frees up within acquire_timeout.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <pqxx/pqxx>

#include "common/reactor.h"
#include "common/status.h"

namespace kiln::store::pg {

struct PgPoolOptions {
  std::string url;   ///< libpq URL or keyword string: postgresql://user@host:port/db?sslmode=...
  size_t size = 8;   ///< connections at most
  std::chrono::milliseconds acquire_timeout{10000};
  /// PostgreSQL's idle_in_transaction_session_timeout for every connection (0: none). The server
  /// ends a session that stays idle inside a transaction this long, and with it the row locks of a
  /// frozen or cut-off process: a worker stopped between a fenced write's statements (its job's
  /// queue row locked FOR UPDATE) would otherwise keep the job from every other worker, whose
  /// claims skip locked rows (store/pg/pg_job_queue.cc). Kiln's transactions run their statements
  /// back to back; the ones that wait on a client on purpose (blob streams,
  /// store/pg/pg_blob_store.cc) lift the bound for themselves.
  std::chrono::milliseconds idle_in_transaction_timeout{30000};
};

class PgPool {
 public:
  /// Opens one connection to check the URL (UNAVAILABLE with libpq's message, password elided).
  static Result<std::unique_ptr<PgPool>> Open(PgPoolOptions options);
  ~PgPool();
  PgPool(const PgPool&) = delete;
  PgPool& operator=(const PgPool&) = delete;

  /// Registers a prepared statement for every connection (idempotent for the same name and SQL).
  void Prepare(const std::string& name, const std::string& sql);

  /// One connection, exclusively, until destroyed.
  class Lease {
   public:
    Lease(Lease&& o) noexcept : pool_(o.pool_), conn_(std::move(o.conn_)) { o.pool_ = nullptr; }
    Lease& operator=(Lease&&) = delete;
    ~Lease();
    pqxx::connection& conn() { return *conn_; }
    /// The connection broke: it is closed, and so are the idle ones (a broken connection most
    /// often means PostgreSQL restarted or the network went, which broke them too).
    void Discard();

   private:
    friend class PgPool;
    Lease(PgPool* pool, std::unique_ptr<pqxx::connection> c) : pool_(pool), conn_(std::move(c)) {}
    PgPool* pool_;
    std::unique_ptr<pqxx::connection> conn_;
  };

  /// A connection: an idle one, a new one while fewer than `size` exist, else waits for one up to
  /// acquire_timeout. UNAVAILABLE when that runs out or PostgreSQL cannot be reached.
  Result<Lease> Acquire();

  /// Runs `fn(pqxx::work&)` in one transaction and commits it. A broken connection (before the
  /// commit was sent) and serialization failures / deadlocks are retried (`attempts` in all) on a
  /// fresh transaction, so `fn` must be safe to run again. Exceptions of `fn` become a Status
  /// (PgErrorStatus); a Status returned by `fn` rolls back and is returned.
  template <typename Fn>
  Status Transact(const std::string& what, Fn&& fn, int attempts = 3) {
    return Run<pqxx::work>(what, std::forward<Fn>(fn), attempts);
  }
  /// Transact for one statement that only reads (a statement sees one snapshot by itself):
  /// `fn(pqxx::nontransaction&)`, no BEGIN and COMMIT, so one round trip instead of three.
  template <typename Fn>
  Status ReadOne(const std::string& what, Fn&& fn, int attempts = 3) {
    return Run<pqxx::nontransaction>(what, std::forward<Fn>(fn), attempts);
  }

  const PgPoolOptions& options() const { return options_; }
  /// Connections open now (idle + leased).
  size_t open_connections() const;

 private:
  template <typename Tx, typename Fn>
  Status Run(const std::string& what, Fn&& fn, int attempts);
  explicit PgPool(PgPoolOptions options) : options_(std::move(options)) {}
  Result<std::unique_ptr<pqxx::connection>> Connect();
  void PrepareAll(pqxx::connection& c);
  void Return(std::unique_ptr<pqxx::connection> c);
  void DropIdle();

  PgPoolOptions options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<pqxx::connection>> idle_;
  size_t open_ = 0;
  std::vector<std::pair<std::string, std::string>> statements_;
};

/// A libpqxx exception as a Status naming `what`: broken_connection → UNAVAILABLE; SQLSTATE class
/// 40 (serialization failure, deadlock) → ABORTED; class 53 (disk full, out of memory, too many
/// connections) → RESOURCE_EXHAUSTED; 57P0x (admin shutdown, crash shutdown, cannot connect now)
/// → UNAVAILABLE; anything else → INTERNAL. Never throws.
Status PgErrorStatus(const std::exception& e, const std::string& what);

/// True when `e` means the connection is gone: broken_connection, or any failure after which
/// libpq reports the connection bad (large-object calls report a terminated connection as a plain
/// pqxx::failure). The caller then Discards its lease; the status to return is UNAVAILABLE.
bool ConnectionLost(const std::exception& e, pqxx::connection_base& c);

/// The URL without its password (for messages and logs).
std::string RedactUrl(const std::string& url);
/// A text[] literal ({"a","b"}) of `v`, every element quoted, for a `$n::text[]` parameter.
std::string TextArrayLiteral(const std::vector<std::string>& v);
/// The bytes of a bytea field.
std::string ByteaBytes(const pqxx::field& f);

// --- template definitions ---
template <typename Tx, typename Fn>
Status PgPool::Run(const std::string& what, Fn&& fn, int attempts) {
  AssertNotOnReactor("a PostgreSQL round trip (store/pg)");  // common/reactor.h
  Status last;
  for (int i = 0; i < attempts; ++i) {
    auto lease = Acquire();
    if (!lease.ok()) return lease.status().WithContext(what);
    try {
      Tx tx(lease->conn());
      Status s = fn(tx);
      if (!s.ok()) return s;  // tx's destructor rolls back
      tx.commit();
      return Status::Ok();
    } catch (const pqxx::in_doubt_error& e) {
      lease->Discard();
      return PgErrorStatus(e, what);  // the commit may or may not have happened: never retried
    } catch (const pqxx::statement_completion_unknown& e) {
      lease->Discard();
      return PgErrorStatus(e, what);  // as above
    } catch (const pqxx::broken_connection& e) {
      lease->Discard();
      last = PgErrorStatus(e, what);
    } catch (const pqxx::transaction_rollback& e) {
      last = PgErrorStatus(e, what);
    } catch (const std::exception& e) {
      // A server that terminates the session (restart: SQLSTATE 57P01) can surface as sql_error.
      if (!ConnectionLost(e, lease->conn())) return PgErrorStatus(e, what);
      lease->Discard();
      last = Unavailable(PgErrorStatus(e, what).message());
    }
  }
  return last;
}

}  // namespace kiln::store::pg
