// kilnd: the Kiln server. See server/config.h for flags, environment and config-file keys.
#include <signal.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>

#include "server/config.h"
#include "api/version.h"
#include "server/daemon.h"

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--version") == 0) {
      std::printf("kilnd %s\n", kiln::api::KilnVersion());
      return 0;
    }
    if (std::strcmp(argv[i], "--print-config-markdown") == 0) {
      std::printf("%s", kiln::server::ConfigMarkdownTable().c_str());
      return 0;
    }
  }
  // Logs go to stderr: stdout's first line is the machine-readable "listening" line.
  spdlog::set_default_logger(spdlog::stderr_color_mt("kilnd"));
  auto config = kiln::server::LoadConfig(argc, argv);
  if (!config.ok()) {
    if (config.status().code() == kiln::StatusCode::kCancelled) return 0;  // --help
    std::fprintf(stderr, "kilnd: %s\n", config.status().message().c_str());
    return 2;
  }
  spdlog::set_level(spdlog::level::from_str(config->log_level));

  // Block the shutdown signals in every thread (gRPC's included); main waits for them below.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);
  // No configuration reload: a hang-up (closed terminal) must not take the server down.
  signal(SIGHUP, SIG_IGN);

  kiln::server::Daemon daemon(*config);
  kiln::Status st = daemon.Start();
  if (!st.ok()) {
    std::fprintf(stderr, "kilnd: %s\n", st.ToString().c_str());
    return 1;
  }
  std::cout << "kilnd listening grpc=" << daemon.grpc_address()
            << " metrics=" << daemon.metrics_address() << std::endl;

  int sig = 0;
  sigwait(&signals, &sig);
  spdlog::info("received {}", sig == SIGINT ? "SIGINT" : "SIGTERM");
  daemon.Shutdown();
  // Everything durable is fsync'ed and every RPC has ended. Skip the remaining destructors:
  // civetweb's mg_stop (the metrics exposer) sleeps up to 2 s in its poll loop for nothing.
  spdlog::shutdown();
  std::fflush(nullptr);
  std::_Exit(0);
}
