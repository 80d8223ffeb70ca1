#include "server/metrics_endpoint.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <prometheus/text_serializer.h>

#include <algorithm>
#include <cerrno>
#include <sstream>
#include <vector>

#include "server/listener.h"
#include "server/process_metrics.h"

namespace kiln::server {
namespace {

constexpr size_t kMaxHead = 8 << 10;

struct Client {
  int fd = -1;
  std::chrono::steady_clock::time_point deadline;
  uint64_t order = 0;  // accept order: the smallest is the oldest
  std::string in;
  std::string out;
  size_t sent = 0;
  bool answered = false;
};

std::string Response(const char* status, const char* type, const std::string& body) {
  return std::string("HTTP/1.1 ") + status + "\r\nContent-Type: " + type +
         "\r\nContent-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
}

}  // namespace

Result<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::Start(Options options,
                                                                std::shared_ptr<prometheus::Registry> registry) {
  auto sock = BindTcpListener(options.address);
  if (!sock.ok()) return Unavailable("metrics listener: " + sock.status().message());
  std::unique_ptr<MetricsEndpoint> ep(
      new MetricsEndpoint(std::move(options), std::move(registry), sock->fd, sock->address));
  ep->thread_ = std::thread([p = ep.get()] { p->Loop(); });
  return ep;
}

MetricsEndpoint::MetricsEndpoint(Options options, std::shared_ptr<prometheus::Registry> registry, int fd,
                                 std::string address)
    : options_(std::move(options)), registry_(std::move(registry)), fd_(fd), address_(std::move(address)) {
  if (pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) wake_[0] = wake_[1] = -1;
}

MetricsEndpoint::~MetricsEndpoint() {
  stopping_.store(true);
  if (wake_[1] >= 0) {
    char c = 0;
    if (write(wake_[1], &c, 1) < 0) {
      // Non-blocking and empty: cannot fail in practice; the loop's 200 ms poll notices anyway.
    }
  }
  if (thread_.joinable()) thread_.join();
  for (int fd : {fd_, wake_[0], wake_[1]}) {
    if (fd >= 0) close(fd);
  }
}

std::string MetricsEndpoint::Answer(const std::string& head) const {
  const auto line_end = head.find_first_of("\r\n");
  std::istringstream line(head.substr(0, line_end));
  std::string method, target;
  line >> method >> target;
  if (method != "GET" && method != "HEAD") return Response("405 Method Not Allowed", "text/plain", "GET only\n");
  const std::string path = target.substr(0, target.find('?'));
  if (path != "/metrics") return Response("404 Not Found", "text/plain", "see /metrics\n");
  std::ostringstream body;
  auto families = registry_->Collect();
  for (auto& f : ProcessMetricFamilies()) families.push_back(std::move(f));  // process_* (server/process_metrics.h)
  prometheus::TextSerializer().Serialize(body, families);
  std::string answer = Response("200 OK", "text/plain; version=0.0.4; charset=utf-8", body.str());
  if (method == "HEAD") answer.resize(answer.find("\r\n\r\n") + 4);
  return answer;
}

void MetricsEndpoint::Loop() {
  std::vector<Client> clients;
  uint64_t accepted = 0;
  while (!stopping_.load()) {
    std::vector<pollfd> fds;
    fds.push_back({fd_, POLLIN, 0});
    fds.push_back({wake_[0], POLLIN, 0});
    for (const auto& c : clients) fds.push_back({c.fd, static_cast<short>(c.answered ? POLLOUT : POLLIN), 0});
    const auto now = std::chrono::steady_clock::now();
    auto wait = std::chrono::milliseconds(200);
    for (const auto& c : clients) {
      wait = std::min(wait, std::chrono::duration_cast<std::chrono::milliseconds>(c.deadline - now) +
                                std::chrono::milliseconds(1));
    }
    poll(fds.data(), fds.size(), static_cast<int>(std::max<int64_t>(0, wait.count())));
    if (fds[1].revents != 0) break;

    for (size_t i = 0; i < clients.size(); ++i) {
      Client& c = clients[i];
      const short ev = fds[i + 2].revents;
      if (ev == 0) continue;
      if (!c.answered) {
        char buf[4096];
        ssize_t n = recv(c.fd, buf, sizeof(buf), 0);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
          c.deadline = {};  // closed by the peer: drop below
          continue;
        }
        if (n > 0) c.in.append(buf, static_cast<size_t>(n));
        // The head with its blank line, over kMaxHead bytes, is refused however it arrived (the
        // reads take 4 KiB, so a whole head can come in with the bytes that pass the limit).
        // The first blank line ends the head, CRLF or bare LF.
        const size_t crlf = c.in.find("\r\n\r\n"), lf = c.in.find("\n\n");
        const size_t end = std::min(crlf, lf), head = end + (end == crlf ? 4 : 2);
        if (end != std::string::npos && head <= kMaxHead) {
          c.out = Answer(c.in.substr(0, end));
          c.answered = true;
        } else if (end != std::string::npos || c.in.size() > kMaxHead) {
          c.out = Response("431 Request Header Fields Too Large", "text/plain", "request head over 8 KiB\n");
          c.answered = true;
        }
      }
      if (c.answered && c.sent < c.out.size()) {
        ssize_t n = send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL);
        if (n > 0) c.sent += static_cast<size_t>(n);
        if (n < 0 && errno != EAGAIN && errno != EINTR) c.deadline = {};
        if (c.sent == c.out.size()) c.deadline = {};  // done: close below
      }
    }
    // Close finished, failed and timed-out clients.
    const auto after = std::chrono::steady_clock::now();
    for (size_t i = 0; i < clients.size();) {
      if (clients[i].deadline <= after) {
        close(clients[i].fd);
        clients[i] = std::move(clients.back());
        clients.pop_back();
      } else {
        ++i;
      }
    }
    if (fds[0].revents & POLLIN) {
      for (int k = 0; k < 16; ++k) {  // a burst, without starving the clients above
        int conn = accept4(fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (conn < 0) break;
        if (static_cast<int>(clients.size()) >= options_.max_clients) {
          auto oldest = clients.begin();
          for (auto it = clients.begin(); it != clients.end(); ++it) {
            if (it->order < oldest->order) oldest = it;
          }
          close(oldest->fd);
          *oldest = std::move(clients.back());
          clients.pop_back();
        }
        Client c;
        c.fd = conn;
        c.order = accepted++;
        c.deadline = std::chrono::steady_clock::now() + options_.client_timeout;
        clients.push_back(std::move(c));
      }
    }
  }
  for (const auto& c : clients) close(c.fd);
}

}  // namespace kiln::server
