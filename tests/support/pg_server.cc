#include "tests/support/pg_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include <pqxx/pqxx>

namespace fs = std::filesystem;

namespace kiln::testing {
namespace {

std::string Tail(const std::string& path, size_t max = 2000) {
  std::ifstream in(path, std::ios::binary);
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return s.size() > max ? s.substr(s.size() - max) : s;
}

int FreeLoopbackPort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  int port = -1;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  ::close(fd);
  return port;
}

// fork + (drop privileges) + exec `args` with stdout and stderr appended to `log`. Everything
// the child touches is prepared before fork (only async-signal-safe calls after it).
pid_t Spawn(const std::vector<std::string>& args, const std::string& log, bool drop, uid_t uid,
            gid_t gid, bool die_with_parent) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid != 0) return pid;
  int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd >= 0) {
    ::dup2(fd, 1);
    ::dup2(fd, 2);
  }
  int null = ::open("/dev/null", O_RDONLY);
  if (null >= 0) ::dup2(null, 0);
  if (drop) {
    if (::setgroups(0, nullptr) != 0 || ::setgid(gid) != 0 || ::setuid(uid) != 0) ::_exit(126);
  }
  // After setuid: a change of credentials clears the parent-death signal.
  if (die_with_parent) ::prctl(PR_SET_PDEATHSIG, SIGQUIT);
  ::execv(argv[0], argv.data());
  ::_exit(127);
}

// Removes the temp dirs of servers whose test process died without Stop() (a crash, SIGKILL):
// their postgres died with it (PR_SET_PDEATHSIG), the dir names the owner in owner.pid.
void RemoveStaleDirs(const fs::path& tmp) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(tmp, ec)) {
    if (e.path().filename().string().rfind("kiln-pg-", 0) != 0) continue;
    std::ifstream in(e.path() / "owner.pid");
    long pid = 0;
    if (!(in >> pid) || pid <= 0) continue;  // being created, or not ours
    if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) fs::remove_all(e.path(), ec);
  }
}

}  // namespace

Result<std::unique_ptr<PgServer>> PgServer::Start() {
  const std::string bin = kBinDir;
  if (::access((bin + "/initdb").c_str(), X_OK) != 0 || ::access((bin + "/postgres").c_str(), X_OK) != 0) {
    return FailedPrecondition(bin + "/initdb or postgres not found: install postgresql-15 (scripts/install-deps.sh)");
  }
  std::unique_ptr<PgServer> s(new PgServer());
  s->uid_ = ::getuid();
  s->gid_ = ::getgid();
  if (::geteuid() == 0) {
    const passwd* pw = ::getpwnam("postgres");
    if (pw == nullptr) return FailedPrecondition("running as root and there is no `postgres` user to run PostgreSQL as");
    s->uid_ = pw->pw_uid;
    s->gid_ = pw->pw_gid;
    s->drop_ = true;
  }
  std::error_code ec;
  fs::path tmp = fs::temp_directory_path(ec);
  if (ec) tmp = "/tmp";
  RemoveStaleDirs(tmp);
  std::string templ = (tmp / "kiln-pg-XXXXXX").string();
  if (::mkdtemp(templ.data()) == nullptr) return Internal("mkdtemp " + templ + ": " + std::strerror(errno));
  s->dir_ = templ;
  std::ofstream(s->dir_ + "/owner.pid") << ::getpid() << "\n";
  if (s->drop_ && ::chown(s->dir_.c_str(), s->uid_, s->gid_) != 0) {
    return Internal("chown " + s->dir_ + " to postgres: " + std::strerror(errno));
  }
  KILN_RETURN_IF_ERROR(s->RunInitdb());
  // A port picked by binding port 0 can be taken by another process before postgres binds it.
  Status started;
  for (int attempt = 0; attempt < 5; ++attempt) {
    s->port_ = FreeLoopbackPort();
    if (s->port_ <= 0) return Internal("no free loopback port");
    started = s->StartPostgres();
    if (started.ok()) return s;
    if (Tail(s->dir_ + "/postgres.log").find("could not bind") == std::string::npos) break;
  }
  return started;
}

Status PgServer::RunInitdb() {
  const std::string log = dir_ + "/initdb.log";
  pid_t pid = Spawn({std::string(kBinDir) + "/initdb", "-D", dir_ + "/data", "-U", "kiln", "-A", "trust",
                     "-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions"},
                    log, drop_, uid_, gid_, /*die_with_parent=*/true);
  if (pid < 0) return Internal(std::string("fork: ") + std::strerror(errno));
  int st = 0;
  if (::waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    return Internal("initdb failed (status " + std::to_string(st) + "): " + Tail(log));
  }
  return Status::Ok();
}

Status PgServer::StartPostgres() {
  const std::string log = dir_ + "/postgres.log";
  pid_ = Spawn({std::string(kBinDir) + "/postgres", "-D", dir_ + "/data", "-p", std::to_string(port_), "-k", dir_,
                "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "synchronous_commit=off", "-c",
                "full_page_writes=off", "-c", "max_connections=200", "-c", "shared_buffers=32MB", "-c",
                "logging_collector=off", "-c", "log_min_messages=warning"},
               log, drop_, uid_, gid_, /*die_with_parent=*/true);
  if (pid_ < 0) return Internal(std::string("fork: ") + std::strerror(errno));
  return WaitReady();
}

Status PgServer::WaitReady() {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    int st = 0;
    if (::waitpid(pid_, &st, WNOHANG) == pid_) {
      pid_ = -1;
      return Internal("postgres exited during start-up: " + Tail(dir_ + "/postgres.log"));
    }
    try {
      pqxx::connection c(url());
      return Status::Ok();
    } catch (const std::exception&) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  return Internal("postgres not ready after 30 s: " + Tail(dir_ + "/postgres.log"));
}

std::string PgServer::url(const std::string& database) const {
  return "postgresql://kiln@127.0.0.1:" + std::to_string(port_) + "/" + database;
}

Result<std::string> PgServer::CreateDatabase(const std::string& prefix) {
  std::string name = prefix + "_" + std::to_string(++next_db_);
  try {
    pqxx::connection c(url());
    pqxx::nontransaction tx(c);
    tx.exec0("CREATE DATABASE " + tx.quote_name(name));
  } catch (const std::exception& e) {
    return Internal("CREATE DATABASE " + name + ": " + e.what());
  }
  return url(name);
}

Status PgServer::Shutdown() {
  if (pid_ <= 0) return Status::Ok();
  ::kill(pid_, SIGINT);  // fast shutdown: disconnects clients, rolls back, checkpoints
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  int st = 0;
  for (;;) {
    pid_t r = ::waitpid(pid_, &st, WNOHANG);
    if (r == pid_ || r < 0) break;
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &st, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  pid_ = -1;
  return Status::Ok();
}

Status PgServer::Restart(std::chrono::milliseconds down) {
  KILN_RETURN_IF_ERROR(Shutdown());
  std::this_thread::sleep_for(down);
  return StartPostgres();
}

Status PgServer::Stop() {
  KILN_RETURN_IF_ERROR(Shutdown());
  if (!dir_.empty()) {
    std::error_code ec;
    fs::remove_all(dir_, ec);
    dir_.clear();
  }
  return Status::Ok();
}

PgServer::~PgServer() { (void)Stop(); }

}  // namespace kiln::testing
