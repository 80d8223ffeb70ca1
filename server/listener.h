// kilnd's own gRPC listening socket. gRPC 1.51's listener stops accepting for good after one
// EMFILE (upstream grpc/grpc#20418; src/core/lib/iomgr/tcp_server_posix.cc on_read gives up), so
// kilnd never lets gRPC accept: this class binds the socket itself (no SO_REUSEPORT, so a second
// kilnd on the same port fails with "address in use"), accepts on its own thread, and hands each
// connection to gRPC through ServerBuilder::experimental().AddExternalConnectionAcceptor.
//
// Connection cap: a connection accepted while the process holds more than
// (soft RLIMIT_NOFILE - fd_reserve) descriptors is closed at once (the client sees the
// connection reset) and counted as kiln_rejected_requests_total{reason="connection_limit"}; the
// reserve keeps descriptors for the store, the metrics endpoint and logs. Idle connections are
// reclaimed by gRPC (GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS, GRPC_ARG_MAX_CONNECTION_IDLE_MS, set in
// daemon.cc), so the cap frees itself. If accept itself fails (EMFILE from elsewhere), the loop
// waits 50 ms and tries again instead of giving up.
#pragma once

#include <grpcpp/server_builder.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>

#include "common/status.h"

namespace kiln::server {

/// Raises the soft RLIMIT_NOFILE to the hard limit (a CI or systemd hard limit may be lower than
/// wanted; that is not an error). Returns the soft limit in force afterwards.
uint64_t RaiseFdLimit();

/// Descriptors this process has open now (entries of /proc/self/fd).
uint64_t OpenFdCount();

/// A listening TCP socket (non-blocking, close-on-exec, SO_REUSEADDR but never SO_REUSEPORT).
struct BoundSocket {
  int fd = -1;
  int port = 0;
  std::string address;  ///< "host:port" as bound (IPv6 host in brackets)
};
/// Binds and listens on "host:port". UNAVAILABLE "... address in use ..." when another process
/// holds the port, INVALID_ARGUMENT for an address that does not parse or resolve.
Result<BoundSocket> BindTcpListener(const std::string& address);

class ConnectionListener {
 public:
  struct Options {
    std::string address;      ///< "host:port" (IPv6 as "[::1]:port"); port 0 = any free port
    uint64_t fd_reserve = 64;  ///< descriptors kept free below the soft RLIMIT_NOFILE
    /// Called (on the accept thread) for every connection closed by the cap.
    std::function<void()> on_rejected;
  };

  /// Binds and listens. UNAVAILABLE "address in use" when another process holds the port,
  /// INVALID_ARGUMENT for an address that does not resolve.
  static Result<std::unique_ptr<ConnectionListener>> Bind(Options options);
  ~ConnectionListener();

  int port() const { return port_; }
  /// Most descriptors the process may hold before new connections are closed.
  uint64_t fd_cap() const { return fd_cap_; }
  /// Starts the accept thread; connections go to `acceptor` (owned by the caller, must outlive
  /// Stop()). The gRPC server must already be started.
  void Start(grpc::experimental::ExternalConnectionAcceptor* acceptor);
  /// Stops accepting and closes the listening socket (idempotent).
  void Stop();
  /// Shuts down (shutdown(2), SHUT_RDWR; the descriptors stay gRPC's to close) every accepted
  /// connection still open, so that gRPC's pending reads and writes on them fail at once. For the
  /// end of a shutdown: a connection whose client stopped reading holds a write that a cancelled
  /// call never completes, and gRPC's Server::Shutdown waits for it for ever (a stopped client
  /// held kilnd's exit for 12 minutes). Returns how many were shut down. Safe after Stop().
  int ShutdownConnections();

 private:
  // The accepted connections gRPC may still hold: descriptor → the socket's inode (st_ino), so
  // that a descriptor gRPC closed and the process reused for something else is never touched.
  void TrackConnection(int fd);
  std::mutex conns_mu_;
  std::unordered_map<int, uint64_t> conns_;
  size_t prune_mark_ = 0;  // conns_.size() after the last prune

  ConnectionListener(Options options, int fd, int port);
  void AcceptLoop();

  Options options_;
  int fd_ = -1;
  int wake_[2] = {-1, -1};  // pipe that ends poll() in Stop()
  int port_ = 0;
  uint64_t fd_cap_ = 0;
  grpc::experimental::ExternalConnectionAcceptor* acceptor_ = nullptr;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace kiln::server
