#include "store/pg/pg_pool.h"

#include <regex>

namespace kiln::store::pg {

std::string RedactUrl(const std::string& url) {
  // postgresql://user:secret@host → postgresql://user:***@host; password=secret → password=***
  static const std::regex kUri(R"(^([a-z]+://[^:/@]*:)[^@]*@)");
  static const std::regex kKeyword(R"((password\s*=\s*)('[^']*'|\S+))");
  std::string s = std::regex_replace(url, kUri, "$1***@");
  s = std::regex_replace(s, kKeyword, "$1***");
  static const std::regex kQuery(R"(([?&]password=)[^&]*)");
  return std::regex_replace(s, kQuery, "$1***");
}

namespace {

// libpq's messages span lines ("...failed: Connection refused\n\tIs the server running..."): one
// line for logs and gRPC messages, where a newline reads as a literal \n.
std::string OneLine(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c != '\n' && c != '\t' && c != '\r' && c != ' ') {
      out.push_back(c);
    } else if (!out.empty() && out.back() != ' ') {
      out.push_back(' ');
    }
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

}  // namespace

Status PgErrorStatus(const std::exception& e, const std::string& what) {
  const std::string msg = what + ": " + OneLine(e.what());
  if (dynamic_cast<const pqxx::broken_connection*>(&e)) return Unavailable(msg);
  if (dynamic_cast<const pqxx::in_doubt_error*>(&e)) return Unavailable(msg + " (commit outcome unknown)");
  if (const auto* sql = dynamic_cast<const pqxx::sql_error*>(&e)) {
    const std::string& st = sql->sqlstate();
    if (st.rfind("40", 0) == 0) return {StatusCode::kAborted, msg};
    if (st.rfind("53", 0) == 0) return ResourceExhausted(msg);
    if (st.rfind("57P0", 0) == 0 || st.rfind("08", 0) == 0) return Unavailable(msg);
  }
  if (dynamic_cast<const pqxx::transaction_rollback*>(&e)) return {StatusCode::kAborted, msg};
  return Internal(msg);
}

bool ConnectionLost(const std::exception& e, pqxx::connection_base& c) {
  if (dynamic_cast<const pqxx::broken_connection*>(&e)) return true;
  try {
    return !c.is_open();
  } catch (...) {
    return true;
  }
}

Result<std::unique_ptr<PgPool>> PgPool::Open(PgPoolOptions options) {
  if (options.size == 0) options.size = 1;
  std::unique_ptr<PgPool> pool(new PgPool(std::move(options)));
  auto first = pool->Connect();
  if (!first.ok()) return first.status();
  {
    std::lock_guard<std::mutex> lock(pool->mu_);
    pool->open_ = 1;
    pool->idle_.push_back(std::move(first).value());
  }
  return pool;
}

PgPool::~PgPool() = default;

Result<std::unique_ptr<pqxx::connection>> PgPool::Connect() {
  try {
    auto c = std::make_unique<pqxx::connection>(options_.url);
    if (options_.idle_in_transaction_timeout.count() > 0) {
      pqxx::nontransaction n(*c);
      n.exec("SET idle_in_transaction_session_timeout = " + std::to_string(options_.idle_in_transaction_timeout.count()));
    }
    return c;
  } catch (const std::exception& e) {
    // libpq's message names host and port, never the password.
    return Unavailable("connecting to PostgreSQL at " + RedactUrl(options_.url) + ": " + OneLine(e.what()));
  }
}

void PgPool::Prepare(const std::string& name, const std::string& sql) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [n, s] : statements_) {
    if (n == name) return;
  }
  statements_.emplace_back(name, sql);
}

void PgPool::PrepareAll(pqxx::connection& c) {
  std::vector<std::pair<std::string, std::string>> statements;
  {
    std::lock_guard<std::mutex> lock(mu_);
    statements = statements_;
  }
  // connection_base::prepare registers a definition (prepared on first use); registering the same
  // definition again is a no-op in libpqxx 6.
  for (const auto& [name, sql] : statements) c.prepare(name, sql);
}

Result<PgPool::Lease> PgPool::Acquire() {
  std::unique_lock<std::mutex> lock(mu_);
  const auto deadline = std::chrono::steady_clock::now() + options_.acquire_timeout;
  for (;;) {
    if (!idle_.empty()) {
      std::unique_ptr<pqxx::connection> c = std::move(idle_.back());
      idle_.pop_back();
      lock.unlock();
      if (!c->is_open()) {
        c.reset();
        lock.lock();
        --open_;
        continue;
      }
      try {
        PrepareAll(*c);
      } catch (const std::exception& e) {
        Lease dropped(this, nullptr);
        return PgErrorStatus(e, "preparing statements");
      }
      return Lease(this, std::move(c));
    }
    if (open_ < options_.size) {
      ++open_;
      lock.unlock();
      auto c = Connect();
      if (!c.ok()) {
        lock.lock();
        --open_;
        cv_.notify_one();
        return c.status();
      }
      try {
        PrepareAll(**c);
      } catch (const std::exception& e) {
        Lease dropped(this, nullptr);
        return PgErrorStatus(e, "preparing statements");
      }
      return Lease(this, std::move(c).value());
    }
    if (cv_.wait_until(lock, deadline) == std::cv_status::timeout && idle_.empty() && open_ >= options_.size) {
      return Unavailable("no PostgreSQL connection free within " +
                         std::to_string(options_.acquire_timeout.count()) + " ms (pool of " +
                         std::to_string(options_.size) + ")");
    }
  }
}

void PgPool::Return(std::unique_ptr<pqxx::connection> c) {
  std::lock_guard<std::mutex> lock(mu_);
  if (c && c->is_open()) {
    idle_.push_back(std::move(c));
  } else {
    --open_;
  }
  cv_.notify_one();
}

void PgPool::DropIdle() {
  std::vector<std::unique_ptr<pqxx::connection>> idle;
  {
    std::lock_guard<std::mutex> lock(mu_);
    idle.swap(idle_);
    open_ -= idle.size();
  }
  cv_.notify_all();
}  // closed here, outside the lock

void PgPool::Lease::Discard() {
  conn_.reset();
  if (pool_) pool_->DropIdle();
}

PgPool::Lease::~Lease() {
  if (pool_) pool_->Return(std::move(conn_));
}

size_t PgPool::open_connections() const {
  std::lock_guard<std::mutex> lock(mu_);
  return open_;
}

std::string TextArrayLiteral(const std::vector<std::string>& v) {
  std::string s = "{";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ',';
    s += '"';
    for (char c : v[i]) {
      if (c == '"' || c == '\\') s += '\\';
      s += c;
    }
    s += '"';
  }
  return s + "}";
}

std::string ByteaBytes(const pqxx::field& f) {
  pqxx::binarystring b(f);
  return b.str();
}

}  // namespace kiln::store::pg
