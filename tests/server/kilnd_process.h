// Runs the real kilnd binary as a child process for end-to-end tests: parses its first stdout
// line ("kilnd listening grpc=HOST:PORT metrics=HOST:PORT") and stops it with a signal.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <vector>

namespace kiln::testing {

class KilndProcess {
 public:
  /// Starts `binary` with `args`; stderr goes to `log_path`. Throws if it does not print its
  /// listening line within 20 s. `nofile` > 0 sets the child's RLIMIT_NOFILE (soft and hard).
  KilndProcess(const std::string& binary, const std::vector<std::string>& args,
               const std::string& log_path, const std::vector<std::string>& env = {},
               rlim_t nofile = 0) {
    int out[2];
    if (pipe(out) != 0) throw std::runtime_error("pipe");
    pid_ = fork();
    if (pid_ == 0) {
      dup2(out[1], STDOUT_FILENO);
      int log = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (log >= 0) dup2(log, STDERR_FILENO);
      close(out[0]);
      for (const auto& e : env) putenv(const_cast<char*>(e.c_str()));
      if (nofile > 0) {
        rlimit lim{nofile, nofile};
        if (setrlimit(RLIMIT_NOFILE, &lim) != 0) _exit(126);
      }
      std::vector<char*> argv{const_cast<char*>(binary.c_str())};
      for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(binary.c_str(), argv.data());
      _exit(127);
    }
    close(out[1]);
    stdout_fd_ = out[0];
    std::string line = ReadLine(std::chrono::seconds(20));
    const std::string prefix = "kilnd listening grpc=";
    auto m = line.find(" metrics=");
    if (line.rfind(prefix, 0) != 0 || m == std::string::npos) {
      Kill();
      throw std::runtime_error("kilnd did not start; first line: '" + line + "'");
    }
    grpc_address_ = line.substr(prefix.size(), m - prefix.size());
    metrics_address_ = line.substr(m + 9);
  }

  ~KilndProcess() { Kill(); }

  const std::string& grpc_address() const { return grpc_address_; }
  const std::string& metrics_address() const { return metrics_address_; }
  pid_t pid() const { return pid_; }

  /// Sends `sig` and waits for exit; returns the exit status (or 128+signal), -1 on timeout.
  int Stop(int sig = SIGTERM, std::chrono::seconds timeout = std::chrono::seconds(30)) {
    if (pid_ <= 0) return exit_code_;
    kill(pid_, sig);
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      pid_t r = waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        pid_ = -1;
        exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        return exit_code_;
      }
      usleep(10000);
    }
    return -1;
  }

  /// What kilnd wrote to stdout after its listening line, so far (it should write nothing: logs
  /// go to stderr, and a stdout nobody reads would block the writer once the pipe is full).
  std::string StdoutSoFar() {
    std::string out;
    char buf[4096];
    pollfd p{stdout_fd_, POLLIN, 0};
    while (stdout_fd_ >= 0 && poll(&p, 1, 0) > 0 && (p.revents & POLLIN)) {
      ssize_t n = read(stdout_fd_, buf, sizeof buf);
      if (n <= 0) break;
      out.append(buf, static_cast<size_t>(n));
    }
    return out;
  }

  void Kill() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
    if (stdout_fd_ >= 0) close(stdout_fd_);
    stdout_fd_ = -1;
  }

 private:
  std::string ReadLine(std::chrono::seconds timeout) {
    std::string line;
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd p{stdout_fd_, POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      char c;
      ssize_t n = read(stdout_fd_, &c, 1);
      if (n <= 0) break;
      if (c == '\n') return line;
      line.push_back(c);
    }
    return line;
  }

  pid_t pid_ = -1;
  int stdout_fd_ = -1;
  int exit_code_ = -1;
  std::string grpc_address_;
  std::string metrics_address_;
};

/// Minimal HTTP/1.0 GET over loopback; returns the body ("" on failure).
std::string HttpGet(const std::string& host_port, const std::string& path);

}  // namespace kiln::testing
