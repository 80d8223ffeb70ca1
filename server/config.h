// kilnd configuration: defaults, then an optional YAML file (--config / KILN_CONFIG), then
// environment variables (KILN_*), then command-line flags; a later source overrides an earlier one.
//
// The settings, their flag, variable, type and default are declared once, in config.cc's table;
// a YAML key is its flag's name with '_' for '-' (a key renamed so is still read, with a
// deprecation warning); an unknown key is an error listing the known ones. `kilnd --help` shows
// each setting's type and default; `kilnd --print-config-markdown` prints the README's table (a
// test diffs the two).
// Port 0 in either listen address picks a free port.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/limits.h"
#include "common/status.h"

namespace kiln::server {

struct Config {
  std::string listen = "127.0.0.1:50051";
  std::string metrics_listen = "127.0.0.1:9464";
  std::string data_dir = "./var/kiln";
  /// Shared state in PostgreSQL (store/pg/): a file holding the libpq URL (a mounted
  /// Secret). The URL may carry a password, so it never comes from the command line: from this
  /// file, or from the environment variable KILN_DATABASE (a Secret as env). Both empty = embedded.
  std::string database_url_file;
  std::string database_url;  ///< loaded from the file or KILN_DATABASE; never printed
  /// "server": serve kiln.v1 (with a database, jobs go to the shared queue and run on workers);
  /// "worker": a farm's device worker (needs a database): claims jobs for its --devices from the
  /// shared queue and runs them; serves only grpc.health.v1 and /metrics (api/job_worker.h).
  std::string role = "server";
  double job_lease_seconds = 30;      ///< a worker's claim on a job lasts this long unless renewed
  double job_heartbeat_seconds = 10;  ///< how often a worker renews its leases (< job_lease_seconds)
  /// With a database: bytes of this replica's local blob cache (store/blob_cache.h), 0 = none.
  uint64_t blob_cache_bytes = 1ull << 30;
  uint64_t max_model_bytes = kMaxModelBytes;
  uint64_t max_store_bytes = 64ull << 30;
  // Store limits (store/model_store.h ModelStoreOptions; server/model_service.h).
  uint64_t max_uploads_in_flight = 16;
  uint64_t max_upload_bytes_in_flight = 8ull << 30;
  uint64_t max_metadata_bytes = 64u << 10;
  double upload_idle_timeout_seconds = 30;
  // Streams that send stored bytes (server/stream_guard.h StreamGuard::Options). 0: 32, or 8 with
  // a database (half of its connections, server/daemon.cc).
  uint64_t max_read_streams = 0;
  double stream_write_timeout_seconds = 300;
  uint64_t list_page_size = 1000;
  std::string tls_cert;  ///< PEM file; with tls_key enables TLS
  std::string tls_key;
  /// PEM CA bundle (--tls-client-ca): with TLS, require and verify a client certificate signed by
  /// it (mutual TLS); the certificate's identity is then the principal (server/rpc_context.h).
  std::string tls_client_ca;
  std::string token;     ///< bearer token (--token or --token-file); empty = no authentication
  double shutdown_grace_seconds = 10;
  std::string log_level = "info";
  uint64_t compile_workers = 2;  ///< compiles running at once
  uint64_t compile_queue = 16;   ///< compiles waiting; more -> RESOURCE_EXHAUSTED
  /// Bytes of compile answers kept for repeated compiles (api/compile_cache.h); 0 = no cache.
  uint64_t compile_cache_bytes = 64ull << 20;
  /// Device workers per backend, "tt-emu:2,reference:1" (sched/scheduler.h ParseDeviceList).
  std::string devices = "tt-emu:1,reference:1";
  uint64_t device_queue = 64;    ///< queued conv runs per backend; more -> RESOURCE_EXHAUSTED
  /// Queued conv runs per backend one principal may hold (server/rpc_context.h Principal);
  /// 0 = half of device_queue.
  uint64_t device_queue_per_client = 0;
  /// OpenMP threads per fp32 reference worker; 0 = hardware threads / reference workers.
  uint64_t reference_threads = 0;
  std::string tt_emu_level = "exact";  ///< tt-emu backend level: exact | fast
  /// Largest gRPC message in either direction (conv inputs/outputs, inline compile bytes).
  uint64_t max_message_bytes = 256ull << 20;
  // JobService (api/jobs.h JobLimits).
  uint64_t job_max_queued = 1024;            ///< queued jobs, all clients
  uint64_t job_max_queued_per_client = 256;  ///< queued jobs of one client
  uint64_t job_max_attempts = 3;             ///< interrupted attempts before a job FAILS
  uint64_t job_max_events = 100000;          ///< stored events per job
  uint64_t job_max_configurations = 64;      ///< sweep points per job
  double job_retention_seconds = 7 * 86400;  ///< results of finished jobs are kept this long
  uint64_t job_results_max_bytes = 8ull << 30;  ///< job inputs + results on disk, oldest removed first

  // Transport limits (docs/security.md; server/listener.h, server/metrics_endpoint.h).
  uint64_t fd_reserve = 64;                      ///< descriptors kept free below RLIMIT_NOFILE
  double handshake_timeout_seconds = 10;         ///< GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS
  double connection_idle_seconds = 300;          ///< GRPC_ARG_MAX_CONNECTION_IDLE_MS
  uint64_t max_concurrent_streams = 128;         ///< GRPC_ARG_MAX_CONCURRENT_STREAMS per connection
  uint64_t grpc_memory_bytes = 1ull << 30;       ///< gRPC ResourceQuota (in-flight request bytes)
  double metrics_client_timeout_seconds = 5;     ///< one /metrics client, accept to last byte
  uint64_t metrics_max_clients = 32;             ///< open /metrics clients; more close the oldest
  /// Process-wide memory budget of admitted runs (sched/scheduler.h "Memory"); 0 = 75 % of the
  /// cgroup's memory.max, else of physical RAM (common/memory.h DefaultMemoryBudgetBytes).
  uint64_t memory_budget_bytes = 0;
  /// Bytes of cached plans (api/run_conv.h PlanCache).
  uint64_t plan_cache_bytes = 1ull << 30;
};

/// Builds the configuration from argv, the environment and the YAML file named by --config or
/// KILN_CONFIG. INVALID_ARGUMENT names the flag, variable or key that is wrong. When --help is
/// given, returns CANCELLED after printing the help text to stdout.
Result<Config> LoadConfig(int argc, char** argv);

/// The settings table (flag, environment variable, YAML key, default, meaning) as Markdown, one
/// row per setting, from config.cc's declarations and a default-constructed Config.
std::string ConfigMarkdownTable();

/// Splits "host:port" (IPv6 as "[::1]:port"). INVALID_ARGUMENT when malformed.
Result<std::pair<std::string, int>> SplitHostPort(const std::string& address);

}  // namespace kiln::server
