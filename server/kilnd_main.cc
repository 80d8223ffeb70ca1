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
#include "server/migrate_command.h"
#include "store/model_store.h"

int main(int argc, char** argv) {
  // `kilnd migrate --from-data-dir DIR`: a command with flags of its own (server/migrate_command.h).
  if (argc > 1 && std::strcmp(argv[1], "migrate") == 0) {
    spdlog::set_default_logger(spdlog::stderr_color_mt("kilnd"));
    return kiln::server::RunMigrateCommand(argc, argv);
  }
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
  // --repair: rebuild the store's index from its objects (store/model_store.h, ModelStore::Repair;
  // README "Repairing the store"), then exit. Not a setting: an action, taken out of argv here.
  bool repair = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--repair") == 0) {
      repair = true;
      for (int j = i; j + 1 < argc; ++j) argv[j] = argv[j + 1];
      --argc;
      break;
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
  if (repair && !config->database_url.empty()) {
    std::fprintf(stderr, "kilnd --repair rebuilds an embedded store's index (a data dir); with a database "
                         "configured there is none to repair: start it without one\n");
    return 2;
  }
  if (repair) {
    kiln::store::ModelStoreOptions store_options;
    store_options.dir = config->data_dir;
    auto report = kiln::store::ModelStore::Repair(store_options);
    if (!report.ok()) {
      std::fprintf(stderr, "kilnd --repair: %s\n", report.status().ToString().c_str());
      return 1;
    }
    std::printf("kilnd --repair: %s: index rebuilt with %zu models (%zu names kept from the old index, "
                "%zu objects back from orphans/, %zu unverifiable files in orphans/)%s%s\n",
                config->data_dir.c_str(), report->models, report->names_kept, report->from_orphans,
                report->rejected, report->damaged_index.empty() ? "" : "; old index kept as ",
                report->damaged_index.c_str());
    return 0;
  }

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
  // Everything durable is fsync'ed and every RPC has ended: skip the remaining destructors (the
  // process ends anyway; tearing down gRPC's and the scheduler's threads only costs time).
  spdlog::shutdown();
  std::fflush(nullptr);
  std::_Exit(0);
}
