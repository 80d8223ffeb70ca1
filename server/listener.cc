#include "server/listener.h"

#include <dirent.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <iterator>

#include "server/config.h"

namespace kiln::server {

uint64_t RaiseFdLimit() {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0) return 1024;
  if (lim.rlim_cur < lim.rlim_max) {
    rlimit raised = lim;
    raised.rlim_cur = lim.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) lim = raised;
  }
  return lim.rlim_cur == RLIM_INFINITY ? (1ull << 20) : static_cast<uint64_t>(lim.rlim_cur);
}

uint64_t OpenFdCount() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return 0;
  uint64_t n = 0;
  while (const dirent* e = readdir(dir)) {
    if (e->d_name[0] != '.') ++n;
  }
  closedir(dir);
  return n > 0 ? n - 1 : 0;  // the directory stream's own descriptor
}

Result<BoundSocket> BindTcpListener(const std::string& address) {
  auto hp = SplitHostPort(address);
  if (!hp.ok()) return hp.status();
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string port = std::to_string(hp->second);
  int rc = getaddrinfo(hp->first.empty() ? nullptr : hp->first.c_str(), port.c_str(), &hints, &res);
  if (rc != 0) return InvalidArgument("cannot resolve listen address " + address + ": " + gai_strerror(rc));
  int fd = -1;
  int err = 0;
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
    if (fd < 0) {
      err = errno;
      continue;
    }
    // SO_REUSEADDR only lets a restarted kilnd bind past TIME_WAIT; unlike SO_REUSEPORT (gRPC's
    // default) it never lets two live listeners share the port.
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (ai->ai_family == AF_INET6) {
      int zero = 0;  // "[::]" also takes IPv4, as gRPC's own listener does
      setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
    }
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, SOMAXCONN) == 0) break;
    err = errno;
    close(fd);
    fd = -1;
  }
  freeaddrinfo(res);
  if (fd < 0) {
    if (err == EADDRINUSE) {
      return Unavailable("cannot listen on " + address + ": address in use (is another kilnd running on this port?)");
    }
    return Unavailable("cannot listen on " + address + ": " + std::strerror(err));
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
  const int bound_port = bound.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                                                     : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  std::string host = hp->first.find(':') != std::string::npos ? "[" + hp->first + "]" : hp->first;
  return BoundSocket{fd, bound_port, host + ":" + std::to_string(bound_port)};
}

Result<std::unique_ptr<ConnectionListener>> ConnectionListener::Bind(Options options) {
  auto sock = BindTcpListener(options.address);
  if (!sock.ok()) return sock.status();
  return std::unique_ptr<ConnectionListener>(new ConnectionListener(std::move(options), sock->fd, sock->port));
}

ConnectionListener::ConnectionListener(Options options, int fd, int port)
    : options_(std::move(options)), fd_(fd), port_(port) {
  const uint64_t limit = RaiseFdLimit();
  fd_cap_ = limit > options_.fd_reserve ? limit - options_.fd_reserve : 0;
  if (pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) wake_[0] = wake_[1] = -1;
}

ConnectionListener::~ConnectionListener() {
  Stop();
  for (int& p : wake_) {
    if (p >= 0) close(p);
    p = -1;
  }
}

void ConnectionListener::Start(grpc::experimental::ExternalConnectionAcceptor* acceptor) {
  acceptor_ = acceptor;
  thread_ = std::thread([this] { AcceptLoop(); });
}

void ConnectionListener::Stop() {
  if (thread_.joinable()) {
    char c = 0;
    if (write(wake_[1], &c, 1) < 0) {
      // The pipe is non-blocking and empty: a failed write leaves the loop's 200 ms poll to notice.
    }
    stopping_.store(true);
    thread_.join();
  }
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

void ConnectionListener::AcceptLoop() {
  auto last_warning = std::chrono::steady_clock::time_point{};
  uint64_t rejected_since_warning = 0;
  while (!stopping_.load()) {
    pollfd fds[2] = {{fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
    if (poll(fds, wake_[0] >= 0 ? 2 : 1, 200) <= 0 || fds[1].revents != 0) continue;
    int conn = accept4(fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (conn < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        // Descriptors ran out elsewhere: the connection stays in the backlog; try again soon.
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      continue;
    }
    if (OpenFdCount() > fd_cap_) {
      close(conn);
      ++rejected_since_warning;
      if (options_.on_rejected) options_.on_rejected();
      const auto now = std::chrono::steady_clock::now();
      if (now - last_warning > std::chrono::seconds(10)) {
        spdlog::warn("connection limit: {} connection(s) closed at accept ({} descriptors in use, cap {} = "
                     "RLIMIT_NOFILE minus --fd-reserve {})",
                     rejected_since_warning, OpenFdCount(), fd_cap_, options_.fd_reserve);
        last_warning = now;
        rejected_since_warning = 0;
      }
      continue;
    }
    int one = 1;
    setsockopt(conn, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    grpc::experimental::ExternalConnectionAcceptor::NewConnectionParameters params;
    params.listener_fd = fd_;
    params.fd = conn;
    TrackConnection(conn);
    acceptor_->HandleNewConnection(&params);  // gRPC owns (and eventually closes) conn now
  }
}

namespace {
// The inode of the socket behind `fd`, or 0 when `fd` is closed or not a socket.
uint64_t SocketInode(int fd) {
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) return 0;
  return static_cast<uint64_t>(st.st_ino);
}
}  // namespace

void ConnectionListener::TrackConnection(int fd) {
  std::lock_guard<std::mutex> lock(conns_mu_);
  // Entries of connections gRPC has closed since are dropped when the map has doubled, so it
  // stays within twice the open connections.
  static constexpr size_t kMinPrune = 256;
  if (conns_.size() >= kMinPrune && conns_.size() >= 2 * prune_mark_) {
    for (auto it = conns_.begin(); it != conns_.end();) {
      it = SocketInode(it->first) == it->second ? std::next(it) : conns_.erase(it);
    }
    prune_mark_ = conns_.size();
  }
  conns_[fd] = SocketInode(fd);
}

int ConnectionListener::ShutdownConnections() {
  std::lock_guard<std::mutex> lock(conns_mu_);
  int n = 0;
  for (const auto& [fd, inode] : conns_) {
    if (inode != 0 && SocketInode(fd) == inode && ::shutdown(fd, SHUT_RDWR) == 0) ++n;
  }
  conns_.clear();
  return n;
}

}  // namespace kiln::server
