// GET /metrics over HTTP/1.x on kilnd's metrics address, served by one poll() thread.
//
// It replaces prometheus-cpp's Exposer (civetweb), whose fixed pool of worker threads each waits
// on one client: four idle TCP clients blocked every scrape. Here a client costs a descriptor and
// a few KiB, never a thread, and none can hold the endpoint:
//   * each client gets `client_timeout` from accept to the last byte of the answer (slow or idle
//     clients are closed when it passes, trickling bytes does not extend it);
//   * at most `max_clients` are open; a new client then closes the oldest one;
//   * request heads over 8 KiB are answered 431 and closed.
// Every answer closes the connection (HTTP/1.0 style, as Prometheus' scraper accepts).
// The answer holds the registry's families and the process_* ones (server/process_metrics.h);
// no exposer_* series (prometheus-cpp's Exposer is not used).
#pragma once

#include <prometheus/registry.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "common/status.h"

namespace kiln::server {

class MetricsEndpoint {
 public:
  struct Options {
    std::string address;  ///< "host:port", port 0 = any free port
    std::chrono::milliseconds client_timeout{5000};
    int max_clients = 32;
  };
  /// Binds `options.address` and starts serving `registry`. UNAVAILABLE when it cannot bind.
  static Result<std::unique_ptr<MetricsEndpoint>> Start(Options options,
                                                        std::shared_ptr<prometheus::Registry> registry);
  ~MetricsEndpoint();
  /// "host:port" actually bound.
  const std::string& address() const { return address_; }

 private:
  MetricsEndpoint(Options options, std::shared_ptr<prometheus::Registry> registry, int fd, std::string address);
  void Loop();
  std::string Answer(const std::string& head) const;

  Options options_;
  std::shared_ptr<prometheus::Registry> registry_;
  int fd_ = -1;
  int wake_[2] = {-1, -1};
  std::string address_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace kiln::server
