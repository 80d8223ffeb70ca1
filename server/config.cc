#include "server/config.h"

#include <yaml-cpp/yaml.h>

#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <utility>
#include <vector>

#include "api/jobs.h"
#include "device/backends/builtin.h"
#include "sched/scheduler.h"

namespace kiln::server {
namespace {

// One configurable setting, reachable by flag, environment variable and YAML key. The YAML key
// is the flag's name with '_' for '-' (YamlKey); `old_yaml` is a key it had before, still accepted
// with a warning (nullptr: none).
struct Setting {
  const char* flag;
  const char* env;
  const char* old_yaml;
  const char* help;
  // Applies a textual value; returns an error message or "".
  std::string (*apply)(Config&, const std::string&);
  // The value as the table shows it (for the default-constructed Config: the default).
  std::string (*show)(const Config&);
  // What the value is, as --help and the table show it: SECONDS, BYTES, COUNT, HOST:PORT, ...
  const char* type;
};

// "--shutdown-grace" -> "shutdown_grace".
std::string YamlKey(const Setting& s) {
  std::string key = std::string(s.flag).substr(2);
  for (char& c : key) c = c == '-' ? '_' : c;
  return key;
}

// The file's text with surrounding whitespace dropped (--token-file).
std::string ReadTokenFile(const std::string& path, std::string* token) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "cannot read '" + path + "'";
  std::ostringstream ss;
  ss << in.rdbuf();
  std::string t = ss.str();
  const char* space = " \t\r\n";
  t.erase(t.find_last_not_of(space) + 1);
  t.erase(0, t.find_first_not_of(space));
  if (t.empty()) return "'" + path + "' holds no token";
  *token = t;
  return "";
}

std::string Or(const std::string& v, const char* none) { return v.empty() ? none : v; }
std::string Num(double v) {
  std::string s = std::to_string(v);
  s.erase(s.find_last_not_of('0') + 1);
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s;
}

std::string ParseU64(const std::string& v, uint64_t* out) {
  try {
    size_t pos = 0;
    unsigned long long x = std::stoull(v, &pos);
    if (pos != v.size() || v.find('-') != std::string::npos) return "not an unsigned integer";
    *out = x;
    return "";
  } catch (...) {
    return "not an unsigned integer";
  }
}

std::string ParseRange(const std::string& v, uint64_t lo, uint64_t hi, uint64_t* out) {
  std::string err = ParseU64(v, out);
  if (!err.empty()) return err;
  if (*out < lo || *out > hi) return "must be " + std::to_string(lo) + ".." + std::to_string(hi);
  return "";
}

std::string ParseSeconds(const std::string& v, double* out, double min, double max) {
  try {
    size_t pos = 0;
    double x = std::stod(v, &pos);
    if (pos != v.size() || !(x >= min && x <= max)) throw std::invalid_argument("range");
    *out = x;
    return "";
  } catch (...) {
    return "expected seconds in " + Num(min) + ".." + Num(max);
  }
}

const std::vector<Setting>& Settings() {
  static const std::vector<Setting> kSettings = {
      {"--listen", "KILN_LISTEN", nullptr, "gRPC listen address host:port (port 0 = any free port)",
       [](Config& c, const std::string& v) {
         c.listen = v;
         return SplitHostPort(v).ok() ? std::string() : std::string("expected host:port");
       },
       [](const Config& c) { return std::string(c.listen); }, "HOST:PORT"},
      {"--metrics-listen", "KILN_METRICS_LISTEN", nullptr,
       "Prometheus /metrics listen address host:port",
       [](Config& c, const std::string& v) {
         c.metrics_listen = v;
         return SplitHostPort(v).ok() ? std::string() : std::string("expected host:port");
       },
       [](const Config& c) { return std::string(c.metrics_listen); }, "HOST:PORT"},
      {"--data-dir", "KILN_DATA_DIR", nullptr, "model store directory",
       [](Config& c, const std::string& v) {
         c.data_dir = v;
         return v.empty() ? std::string("must not be empty") : std::string();
       },
       [](const Config& c) { return std::string(c.data_dir); }, "DIR"},
      {"--database-url-file", "KILN_DATABASE_URL_FILE", nullptr,
       "file holding the PostgreSQL URL of a farm's shared state (a mounted Secret; or the URL in env "
       "KILN_DATABASE; never on the command line)",
       [](Config& c, const std::string& v) { c.database_url_file = v; return std::string(); },
       [](const Config& c) { return std::string(Or(c.database_url_file, "(none: embedded store)")); }, "FILE"},
      {"--role", "KILN_ROLE", nullptr,
       "server: serve kiln.v1 (with a database, jobs run on the farm's workers); worker: a device host of a "
       "farm (needs a database): claim and run jobs for --devices, serve only health and metrics",
       [](Config& c, const std::string& v) {
         c.role = v;
         return v == "server" || v == "worker" ? std::string() : std::string("expected server|worker");
       },
       [](const Config& c) { return std::string(c.role + " (or worker)"); }, "server|worker"},
      {"--job-lease-seconds", "KILN_JOB_LEASE_SECONDS", nullptr,
       "with a database: a worker's claim on a job lasts this long unless renewed; a job whose worker "
       "died, hung or lost the network is claimed again after it",
       [](Config& c, const std::string& v) { return ParseSeconds(v, &c.job_lease_seconds, 0.5, 3600); },
       [](const Config& c) { return Num(c.job_lease_seconds) + " (seconds)"; }, "SECONDS"},
      {"--job-heartbeat-seconds", "KILN_JOB_HEARTBEAT_SECONDS", nullptr,
       "with a database: how often a worker renews its leases and reports itself alive (below "
       "--job-lease-seconds)",
       [](Config& c, const std::string& v) { return ParseSeconds(v, &c.job_heartbeat_seconds, 0.05, 600); },
       [](const Config& c) { return Num(c.job_heartbeat_seconds) + " (seconds)"; }, "SECONDS"},
      {"--blob-cache-bytes", "KILN_BLOB_CACHE_BYTES", nullptr,
       "with a database: bytes of this replica's local cache of model bytes in the data dir, least "
       "recently used evicted (0 = no cache)",
       [](Config& c, const std::string& v) { return ParseU64(v, &c.blob_cache_bytes); },
       [](const Config& c) { return std::string(std::to_string(c.blob_cache_bytes) + " (0 = no cache)"); }, "BYTES"},
      {"--max-model-bytes", "KILN_MAX_MODEL_BYTES", nullptr,
       "largest accepted model in bytes",
       [](Config& c, const std::string& v) {
         std::string err = ParseU64(v, &c.max_model_bytes);
         if (!err.empty()) return err;
         // One model-size limit for store, loader and summary (common/limits.h).
         return c.max_model_bytes == 0 || c.max_model_bytes > kMaxModelBytes
                    ? "must be 1.." + std::to_string(kMaxModelBytes) + " (protobuf's limit)"
                    : std::string();
       },
       [](const Config& c) { return std::string(std::to_string(c.max_model_bytes)); }, "BYTES"},
      {"--max-store-bytes", "KILN_MAX_STORE_BYTES", nullptr,
       "total bytes the model store may hold (0 = unlimited)",
       [](Config& c, const std::string& v) { return ParseU64(v, &c.max_store_bytes); },
       [](const Config& c) { return std::string(std::to_string(c.max_store_bytes) + " (0 = no limit)"); }, "BYTES"},
      // Store limits (store/model_store.h ModelStoreOptions, server/model_service.h).
      {"--max-uploads-in-flight", "KILN_MAX_UPLOADS_IN_FLIGHT", nullptr,
       "uploads open at once, each holding a temp file (0 = no limit)",
       [](Config& c, const std::string& v) { return ParseU64(v, &c.max_uploads_in_flight); },
       [](const Config& c) { return std::string(std::to_string(c.max_uploads_in_flight)); }, "COUNT"},
      {"--max-upload-bytes-in-flight", "KILN_MAX_UPLOAD_BYTES_IN_FLIGHT", nullptr,
       "sum of the declared sizes of open uploads, re-uploads included (0 = no limit)",
       [](Config& c, const std::string& v) { return ParseU64(v, &c.max_upload_bytes_in_flight); },
       [](const Config& c) { return std::string(std::to_string(c.max_upload_bytes_in_flight)); }, "BYTES"},
      {"--max-metadata-bytes", "KILN_MAX_METADATA_BYTES", nullptr,
       "bytes of producer_name plus input/output names kept per model (0 = no limit)",
       [](Config& c, const std::string& v) { return ParseU64(v, &c.max_metadata_bytes); },
       [](const Config& c) { return std::string(std::to_string(c.max_metadata_bytes)); }, "BYTES"},
      {"--upload-idle-timeout", "KILN_UPLOAD_IDLE_TIMEOUT", "upload_idle_timeout_seconds",
       "an upload that sends less than 64 KiB (or what it still owes) in this time is ended and its "
       "reservation freed",
       [](Config& c, const std::string& v) {
         try {
           size_t pos = 0;
           c.upload_idle_timeout_seconds = std::stod(v, &pos);
           if (pos != v.size() || !(c.upload_idle_timeout_seconds > 0)) return std::string("expected seconds > 0");
         } catch (const std::exception&) {
           return std::string("expected seconds > 0");
         }
         return std::string();
       },
       [](const Config& c) { return std::string(Num(c.upload_idle_timeout_seconds) + " (seconds)"); }, "SECONDS"},
      // Streams that send stored bytes (server/stream_guard.h).
      {"--max-read-streams", "KILN_MAX_READ_STREAMS", nullptr,
       "ReadModel and GetJobResult streams open at once, a client at most half of them",
       [](Config& c, const std::string& v) {
         std::string err = ParseU64(v, &c.max_read_streams);
         return err.empty() && c.max_read_streams > 100000 ? std::string("must be 0..100000") : err;
       },
       [](const Config& c) {
         return c.max_read_streams == 0 ? std::string("0 (32; 8 with a database)") : std::to_string(c.max_read_streams);
       },
       "COUNT"},
      {"--stream-write-timeout", "KILN_STREAM_WRITE_TIMEOUT", nullptr,
       "a ReadModel or GetJobResult stream whose client takes no message in this time is cancelled",
       [](Config& c, const std::string& v) { return ParseSeconds(v, &c.stream_write_timeout_seconds, 0.1, 86400); },
       [](const Config& c) { return Num(c.stream_write_timeout_seconds) + " (seconds)"; }, "SECONDS"},
      {"--list-page-size", "KILN_LIST_PAGE_SIZE", nullptr,
       "most models in one ListModels answer (pages also stay under 2 MiB)",
       [](Config& c, const std::string& v) {
         std::string err = ParseU64(v, &c.list_page_size);
         return err.empty() && (c.list_page_size == 0 || c.list_page_size > 100000)
                    ? std::string("must be 1..100000") : err;
       },
       [](const Config& c) { return std::string(std::to_string(c.list_page_size)); }, "COUNT"},
      {"--tls-cert", "KILN_TLS_CERT", nullptr, "PEM certificate chain; enables TLS with --tls-key",
       [](Config& c, const std::string& v) { c.tls_cert = v; return std::string(); },
       [](const Config& c) { return std::string(Or(c.tls_cert, "(none: plaintext)")); }, "FILE"},
      {"--tls-key", "KILN_TLS_KEY", nullptr, "PEM private key for --tls-cert",
       [](Config& c, const std::string& v) { c.tls_key = v; return std::string(); },
       [](const Config& c) { return std::string(Or(c.tls_key, "(none)")); }, "FILE"},
      {"--tls-client-ca", "KILN_TLS_CLIENT_CA", nullptr,
       "PEM CA certificates: with --tls-cert, every client must present a certificate signed by one of them "
       "(mutual TLS), whose identity is then its principal",
       [](Config& c, const std::string& v) { c.tls_client_ca = v; return std::string(); },
       [](const Config& c) { return std::string(Or(c.tls_client_ca, "(none: no client certificates)")); }, "FILE"},
      {"--token", "KILN_TOKEN", nullptr,
       "require 'authorization: Bearer <token>' on every RPC but health",
       [](Config& c, const std::string& v) { c.token = v; return std::string(); },
       [](const Config& c) { return std::string(Or(c.token, "(none: no authentication)")); }, "TEXT"},
      {"--token-file", "KILN_TOKEN_FILE", nullptr,
       "file holding the token (its surrounding whitespace dropped): unlike --token, not visible in `ps`",
       [](Config& c, const std::string& v) { return ReadTokenFile(v, &c.token); },
       [](const Config&) { return std::string("(none)"); }, "FILE"},
      {"--shutdown-grace", "KILN_SHUTDOWN_GRACE", "shutdown_grace_seconds",
       "seconds in-flight RPCs get to finish on SIGTERM/SIGINT",
       [](Config& c, const std::string& v) {
         try {
           size_t pos = 0;
           c.shutdown_grace_seconds = std::stod(v, &pos);
           if (pos != v.size() || c.shutdown_grace_seconds < 0) return std::string("expected seconds >= 0");
           return std::string();
         } catch (...) {
           return std::string("expected seconds >= 0");
         }
       },
       [](const Config& c) { return std::string(Num(c.shutdown_grace_seconds) + " (seconds)"); }, "SECONDS"},
      {"--log-level", "KILN_LOG_LEVEL", nullptr, "trace|debug|info|warn|error",
       [](Config& c, const std::string& v) {
         c.log_level = v;
         static const char* kLevels[] = {"trace", "debug", "info", "warn", "error", "critical", "off"};
         for (const char* l : kLevels) {
           if (v == l) return std::string();
         }
         return std::string("expected trace|debug|info|warn|error|critical|off");
       },
       [](const Config& c) { return std::string(c.log_level); }, "LEVEL"},
      {"--compile-workers", "KILN_COMPILE_WORKERS", nullptr,
       "compiles running at once (also the workers of the plan lane, where runs are planned)",
       [](Config& c, const std::string& v) {
         std::string err = ParseU64(v, &c.compile_workers);
         return err.empty() && (c.compile_workers == 0 || c.compile_workers > 256)
                    ? std::string("must be 1..256") : err;
       },
       [](const Config& c) { return std::string(std::to_string(c.compile_workers)); }, "COUNT"},
      {"--compile-queue", "KILN_COMPILE_QUEUE", nullptr,
       "compiles waiting beyond the running ones; more get RESOURCE_EXHAUSTED",
       [](Config& c, const std::string& v) {
         std::string err = ParseU64(v, &c.compile_queue);
         return err.empty() && c.compile_queue > 1000000 ? std::string("must be 0..1000000") : err;
       },
       [](const Config& c) { return std::string(std::to_string(c.compile_queue)); }, "COUNT"},
      {"--compile-cache-bytes", "KILN_COMPILE_CACHE_BYTES", nullptr,
       "bytes of CompileAi8x answers kept, least recently used out, keyed by (model sha256, normalized options, "
       "Kiln version): a repeated compile answers without reading or compiling the model",
       [](Config& c, const std::string& v) { return ParseU64(v, &c.compile_cache_bytes); },
       [](const Config& c) { return std::string(std::to_string(c.compile_cache_bytes) + " (0 = no cache)"); }, "BYTES"},
      {"--devices", "KILN_DEVICES", nullptr, "device workers, e.g. tt-emu:2,reference:1",
       [](Config& c, const std::string& v) {
         c.devices = v;
         if (v.empty()) return std::string("must name at least one backend");
         // Checked here, as the other flags are (exit 2 before the data directory is touched),
         // with the scheduler's own parser and the built-in backends' names.
         auto list = sched::ParseDeviceList(v);
         if (!list.ok()) return std::string(list.status().message());
         const auto& registry = device::DefaultBackendRegistry();
         for (const auto& d : *list) {
           if (registry.Contains(d.backend)) continue;
           std::string known;
           for (const auto& n : registry.Names()) known += (known.empty() ? "" : ", ") + n;
           return "unknown backend '" + d.backend.substr(0, 64) + "' (known: " + known + ")";
         }
         return std::string();
       },
       [](const Config& c) { return std::string(c.devices); }, "BACKEND:N,..."},
      {"--device-queue", "KILN_DEVICE_QUEUE", nullptr, "queued conv runs per backend",
       [](Config& c, const std::string& v) {
         std::string err = ParseU64(v, &c.device_queue);
         return err.empty() && (c.device_queue == 0 || c.device_queue > 1000000)
                    ? std::string("must be 1..1000000") : err;
       },
       [](const Config& c) { return std::string(std::to_string(c.device_queue) + " (per backend)"); }, "COUNT"},
      {"--device-queue-per-client", "KILN_DEVICE_QUEUE_PER_CLIENT", nullptr,
       "queued conv runs per backend one principal (TLS client certificate, else peer address) may hold; "
       "x-kiln-client only splits it",
       [](Config& c, const std::string& v) { return ParseRange(v, 0, 1000000, &c.device_queue_per_client); },
       [](const Config& c) { return std::to_string(c.device_queue_per_client) + " (0 = half of --device-queue)"; }, "COUNT"},
      {"--reference-threads", "KILN_REFERENCE_THREADS", nullptr,
       "OpenMP threads of each fp32 reference worker (the reference devices, or the one kept for "
       "PCC when none is configured); 0 = the cores divided among them",
       [](Config& c, const std::string& v) {
         std::string err = ParseU64(v, &c.reference_threads);
         return err.empty() && c.reference_threads > 1024 ? std::string("must be 0..1024") : err;
       },
       [](const Config& c) { return std::string(std::to_string(c.reference_threads)); }, "COUNT"},
      {"--tt-emu-level", "KILN_TT_EMU_LEVEL", nullptr,
       "tt-emu numerics: exact (bit-level model) or fast (oneDNN bf16 per fidelity phase)",
       [](Config& c, const std::string& v) {
         c.tt_emu_level = v;
         return v == "exact" || v == "fast" ? std::string() : std::string("expected exact|fast");
       },
       [](const Config& c) { return std::string(c.tt_emu_level + " (or fast)"); }, "exact|fast"},
      {"--max-message-bytes", "KILN_MAX_MESSAGE_BYTES", nullptr,
       "largest gRPC message received or sent (conv tensors, inline models)",
       [](Config& c, const std::string& v) {
         std::string err = ParseU64(v, &c.max_message_bytes);
         return err.empty() && (c.max_message_bytes < (4u << 20) || c.max_message_bytes > (2047ull << 20))
                    ? std::string("must be between 4 MiB and 2047 MiB") : err;
       },
       [](const Config& c) { return std::string(std::to_string(c.max_message_bytes)); }, "BYTES"},
      // JobService limits (api/jobs.h JobLimits).
      {"--job-max-queued", "KILN_JOB_MAX_QUEUED", nullptr,
       "queued jobs (JobService), all clients; more get RESOURCE_EXHAUSTED with a retry hint",
       [](Config& c, const std::string& v) { return ParseRange(v, 1, 1000000, &c.job_max_queued); },
       [](const Config& c) { return std::to_string(c.job_max_queued); }, "COUNT"},
      {"--job-max-queued-per-client", "KILN_JOB_MAX_QUEUED_PER_CLIENT", nullptr,
       "queued jobs of one principal (TLS client certificate, else peer address); x-kiln-client only splits it",
       [](Config& c, const std::string& v) { return ParseRange(v, 1, 1000000, &c.job_max_queued_per_client); },
       [](const Config& c) { return std::to_string(c.job_max_queued_per_client); }, "COUNT"},
      {"--job-max-attempts", "KILN_JOB_MAX_ATTEMPTS", nullptr,
       "attempts of a job interrupted by a kilnd stop before it is FAILED (ABORTED)",
       [](Config& c, const std::string& v) { return ParseRange(v, 1, 100, &c.job_max_attempts); },
       [](const Config& c) { return std::to_string(c.job_max_attempts); }, "COUNT"},
      {"--job-max-events", "KILN_JOB_MAX_EVENTS", nullptr,
       "layer events stored per job (state changes are always kept)",
       [](Config& c, const std::string& v) { return ParseRange(v, 1, 100000000, &c.job_max_events); },
       [](const Config& c) { return std::to_string(c.job_max_events); }, "COUNT"},
      {"--job-max-configurations", "KILN_JOB_MAX_CONFIGURATIONS", nullptr,
       "precision sweep points per job",
       [](Config& c, const std::string& v) {
         return ParseRange(v, 1, api::JobLimits::kMaxConfigurationsCeiling, &c.job_max_configurations);
       },
       [](const Config& c) { return std::to_string(c.job_max_configurations); }, "COUNT"},
      {"--job-retention-seconds", "KILN_JOB_RETENTION_SECONDS", nullptr,
       "results of finished jobs are removed after this long",
       [](Config& c, const std::string& v) {
         try {
           size_t pos = 0;
           c.job_retention_seconds = std::stod(v, &pos);
           if (pos != v.size() || !(c.job_retention_seconds >= 0)) return std::string("expected seconds >= 0");
           return std::string();
         } catch (...) {
           return std::string("expected seconds >= 0");
         }
       },
       [](const Config& c) { return std::string(Num(c.job_retention_seconds) + " (seconds, 7 days)"); }, "SECONDS"},
      {"--job-results-max-bytes", "KILN_JOB_RESULTS_MAX_BYTES", nullptr,
       "job inputs and results on disk; over it, the oldest finished jobs' results are removed "
       "(jobs also count against --max-store-bytes)",
       [](Config& c, const std::string& v) { return ParseU64(v, &c.job_results_max_bytes); },
       [](const Config& c) { return std::string(std::to_string(c.job_results_max_bytes) + " (0 = no limit)"); }, "BYTES"},
      // Transport limits: docs/security.md explains each.
      {"--fd-reserve", "KILN_FD_RESERVE", nullptr,
       "file descriptors kept free below the soft RLIMIT_NOFILE (raised to the hard limit at start); "
       "gRPC connections accepted beyond it are closed at once",
       [](Config& c, const std::string& v) { return ParseRange(v, 16, 1u << 20, &c.fd_reserve); },
       [](const Config& c) { return std::to_string(c.fd_reserve); }, "COUNT"},
      {"--handshake-timeout", "KILN_HANDSHAKE_TIMEOUT", "handshake_timeout_seconds",
       "seconds a new connection has to finish its TLS/HTTP2 handshake (a silent connection is closed)",
       [](Config& c, const std::string& v) { return ParseSeconds(v, &c.handshake_timeout_seconds, 0.1, 3600); },
       [](const Config& c) { return Num(c.handshake_timeout_seconds) + " (seconds)"; }, "SECONDS"},
      {"--connection-idle-timeout", "KILN_CONNECTION_IDLE_TIMEOUT", "connection_idle_seconds",
       "seconds a connection without calls stays open (then GOAWAY)",
       [](Config& c, const std::string& v) { return ParseSeconds(v, &c.connection_idle_seconds, 1, 86400); },
       [](const Config& c) { return Num(c.connection_idle_seconds) + " (seconds)"; }, "SECONDS"},
      {"--max-concurrent-streams", "KILN_MAX_CONCURRENT_STREAMS", nullptr,
       "calls one connection may have open at once (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS)",
       [](Config& c, const std::string& v) { return ParseRange(v, 1, 65536, &c.max_concurrent_streams); },
       [](const Config& c) { return std::to_string(c.max_concurrent_streams); }, "COUNT"},
      {"--grpc-memory-bytes", "KILN_GRPC_MEMORY_BYTES", nullptr,
       "memory gRPC's transport may hold for in-flight requests (server ResourceQuota); under pressure "
       "it shrinks windows, then closes idle connections and cancels calls",
       [](Config& c, const std::string& v) { return ParseRange(v, 16ull << 20, 1ull << 40, &c.grpc_memory_bytes); },
       [](const Config& c) { return std::to_string(c.grpc_memory_bytes); }, "BYTES"},
      {"--metrics-client-timeout", "KILN_METRICS_CLIENT_TIMEOUT", "metrics_client_timeout_seconds",
       "seconds one /metrics client may take from connect to the end of its answer",
       [](Config& c, const std::string& v) { return ParseSeconds(v, &c.metrics_client_timeout_seconds, 0.1, 600); },
       [](const Config& c) { return Num(c.metrics_client_timeout_seconds) + " (seconds)"; }, "SECONDS"},
      {"--metrics-max-clients", "KILN_METRICS_MAX_CLIENTS", nullptr,
       "/metrics clients open at once; one more closes the oldest",
       [](Config& c, const std::string& v) { return ParseRange(v, 1, 4096, &c.metrics_max_clients); },
       [](const Config& c) { return std::to_string(c.metrics_max_clients); }, "COUNT"},
      {"--memory-budget", "KILN_MEMORY_BUDGET", "memory_budget_bytes",
       "bytes that admitted conv runs may hold at once (each run's estimate, docs/security.md); a run "
       "that needs more is refused; 0 = 75% of the cgroup's memory.max, else of physical RAM",
       [](Config& c, const std::string& v) { return ParseU64(v, &c.memory_budget_bytes); },
       [](const Config& c) { return std::string(std::to_string(c.memory_budget_bytes) + " (75% of memory)"); }, "BYTES"},
      {"--plan-cache-bytes", "KILN_PLAN_CACHE_BYTES", nullptr,
       "bytes of recently run models' plans kept in memory (least recently used dropped first)",
       [](Config& c, const std::string& v) { return ParseU64(v, &c.plan_cache_bytes); },
       [](const Config& c) { return std::string(std::to_string(c.plan_cache_bytes)); }, "BYTES"},
  };
  return kSettings;
}

// The database URL (Config::database_url): from --database-url-file or KILN_DATABASE, not both.
// Messages never echo the URL (it may hold a password).
Status LoadDatabaseUrl(Config& c) {
  const char* env = std::getenv("KILN_DATABASE");
  if (!c.database_url_file.empty()) {
    if (env != nullptr && *env != '\0') {
      return InvalidArgument("--database-url-file and KILN_DATABASE both name a database: give one");
    }
    std::ifstream in(c.database_url_file, std::ios::binary);
    if (!in) return InvalidArgument("--database-url-file: cannot read " + c.database_url_file);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (text.size() > 64 * 1024) return InvalidArgument("--database-url-file: " + c.database_url_file + " is over 64 KiB");
    c.database_url = text;
  } else if (env != nullptr) {
    c.database_url = env;
  }
  // A Secret's file often ends with a newline.
  while (!c.database_url.empty() && std::isspace(static_cast<unsigned char>(c.database_url.back()))) {
    c.database_url.pop_back();
  }
  const char* source = c.database_url_file.empty() ? "KILN_DATABASE" : "--database-url-file";
  if (c.database_url.empty()) {
    if (!c.database_url_file.empty()) return InvalidArgument(std::string(source) + ": the file is empty");
    return Status::Ok();
  }
  if (c.database_url.rfind("postgresql://", 0) != 0 && c.database_url.rfind("postgres://", 0) != 0) {
    return InvalidArgument(std::string(source) + ": expected a URL starting with postgresql:// or postgres://");
  }
  return Status::Ok();
}

}  // namespace

std::string ConfigMarkdownTable() {
  const Config defaults;
  auto cell = [](const std::string& text) {
    std::string out;
    for (char c : text) out += c == '|' ? std::string("\\|") : std::string(1, c);
    return out;
  };
  std::string out =
      "| flag | environment | YAML key | type | default | meaning |\n|---|---|---|---|---|---|\n";
  for (const auto& s : Settings()) {
    std::string key = "`" + YamlKey(s) + "`";
    if (s.old_yaml != nullptr && YamlKey(s) != s.old_yaml) key += " (deprecated: `" + std::string(s.old_yaml) + "`)";
    out += std::string("| `") + s.flag + "` | `" + s.env + "` | " + key + " | " + cell(s.type) + " | " +
           s.show(defaults) + " | " + cell(s.help) + " |\n";
  }
  return out;
}

Result<std::pair<std::string, int>> SplitHostPort(const std::string& address) {
  auto colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) {
    return InvalidArgument("address '" + address + "' is not host:port");
  }
  std::string host = address.substr(0, colon);
  if (host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  int port = 0;
  try {
    size_t pos = 0;
    port = std::stoi(address.substr(colon + 1), &pos);
    if (pos != address.size() - colon - 1) throw std::invalid_argument("port");
  } catch (...) {
    return InvalidArgument("address '" + address + "' has a bad port");
  }
  if (port < 0 || port > 65535) return InvalidArgument("address '" + address + "' port out of range");
  return std::make_pair(host, port);
}

Result<Config> LoadConfig(int argc, char** argv) {
  CLI::App app{"kilnd: the Kiln model-compilation server. Every setting is also an environment variable and a "
               "key of the --config file (README \"Running the server\"); flags override the environment, which "
               "overrides the file."};
  std::string config_path;
  app.add_option("--config", config_path, "YAML configuration file (env KILN_CONFIG)")->type_name("FILE");
  // Handled by kilnd_main.cc before this parse; declared here so that --help lists them.
  app.add_flag("--version")->description("print the version and exit");
  app.add_flag("--print-config-markdown")->description("print the settings as README's Markdown table and exit");
  app.add_flag("--repair")->description("rebuild the model store's index from its objects, then exit");
  app.footer("kilnd migrate --from-data-dir DIR [--dry-run] [settings]: copy the models of an embedded store "
             "(DIR, read-only; no kilnd may run on it) into the database named by --database-url-file or "
             "KILN_DATABASE, then exit (README \"Moving an embedded store into PostgreSQL\")");
  const Config defaults;
  std::map<std::string, std::string> flag_values;
  for (const auto& s : Settings()) {
    app.add_option(s.flag, flag_values[s.flag], std::string(s.help) + " (env " + s.env + ")")
        ->type_name(s.type)
        ->default_str(s.show(defaults));
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return Cancelled("help printed");
  } catch (const CLI::ParseError& e) {
    return InvalidArgument(std::string("command line: ") + e.what());
  }

  Config config;
  struct YamlValue {
    std::string key, value, error;  // error: why the entry cannot be a value (refused only where it wins)
  };
  std::map<const Setting*, YamlValue> yaml;  // setting -> its entry in the file
  if (config_path.empty()) {
    if (const char* env = std::getenv("KILN_CONFIG")) config_path = env;
  }
  if (!config_path.empty()) {
    YAML::Node root;
    if (std::ifstream probe(config_path); !probe) {  // yaml-cpp would say only "bad file"
      return InvalidArgument("config file " + config_path + ": cannot read it (" + std::strerror(errno) + ")");
    }
    try {
      root = YAML::LoadFile(config_path);
    } catch (const std::exception& e) {
      return InvalidArgument("config file " + config_path + ": " + e.what());
    }
    if (root && !root.IsNull() && !root.IsMap()) {
      return InvalidArgument("config file " + config_path + ": top level must be a mapping");
    }
    for (const auto& kv : root) {
      std::string key = kv.first.as<std::string>();
      const Setting* found = nullptr;
      bool deprecated = false;
      for (const auto& s : Settings()) {
        if (key == YamlKey(s)) {
          found = &s;
        } else if (s.old_yaml != nullptr && key == s.old_yaml) {
          found = &s;
          deprecated = true;
        }
      }
      if (!found) {
        std::string known;
        for (const auto& s : Settings()) known += (known.empty() ? "" : ", ") + YamlKey(s);
        return InvalidArgument("config file " + config_path + ": unknown key '" + key + "'; the keys are " + known);
      }
      if (auto it = yaml.find(found); it != yaml.end()) {
        return InvalidArgument("config file " + config_path + ": '" + key + "' and '" + it->second.key +
                               "' both set " + found->flag);
      }
      if (deprecated) {
        spdlog::warn("config file {}: key '{}' is deprecated, use '{}' (the flag's name, {})", config_path, key,
                     YamlKey(*found), found->flag);
      }
      yaml[found] = kv.second.IsScalar() ? YamlValue{key, kv.second.Scalar(), ""}
                                          : YamlValue{key, "", "must be a scalar"};
    }
  }
  // Per setting, the highest source given wins (flag, then environment, then file) and only its
  // value must be valid: a stale KILN_LISTEN does not stop a kilnd started with --listen. A value it
  // overrides that would be refused is named in a warning, so that the typo is seen before the
  // override goes. The winners are then applied source by source, the file's first and the flags'
  // last, so that across settings that set one field (--token and --token-file) the higher source
  // still wins.
  struct Source {
    int level;  // 0 file, 1 environment, 2 flag
    std::string where, value, error;  // error: why a file entry cannot be a value
  };
  std::vector<std::pair<const Setting*, Source>> winners;
  for (const auto& s : Settings()) {
    std::vector<Source> sources;  // highest first
    if (app.count(s.flag) > 0) sources.push_back({2, s.flag, flag_values[s.flag], ""});
    if (const char* env = std::getenv(s.env)) sources.push_back({1, std::string("environment ") + s.env, env, ""});
    if (auto it = yaml.find(&s); it != yaml.end()) {
      sources.push_back({0, "config file " + config_path + ": " + it->second.key, it->second.value, it->second.error});
    }
    if (sources.empty()) continue;
    winners.emplace_back(&s, sources[0]);
    for (size_t i = 1; i < sources.size(); ++i) {
      std::string err = sources[i].error;
      if (err.empty()) {
        Config scratch;
        err = s.apply(scratch, sources[i].value);
      }
      if (!err.empty()) spdlog::warn("{}: {} (not used: {} overrides it)", sources[i].where, err, sources[0].where);
    }
  }
  std::stable_sort(winners.begin(), winners.end(),
                   [](const auto& a, const auto& b) { return a.second.level < b.second.level; });
  for (const auto& [setting, w] : winners) {
    const std::string err = w.error.empty() ? setting->apply(config, w.value) : w.error;
    if (!err.empty()) return InvalidArgument(w.where + ": " + err);
  }
  KILN_RETURN_IF_ERROR(LoadDatabaseUrl(config));
  if (config.role == "worker" && config.database_url.empty()) {
    return InvalidArgument("--role worker needs the farm's database (--database-url-file or KILN_DATABASE): a "
                           "worker claims its jobs there");
  }
  if (config.job_heartbeat_seconds >= config.job_lease_seconds) {
    return InvalidArgument("--job-heartbeat-seconds (" + Num(config.job_heartbeat_seconds) +
                           ") must be below --job-lease-seconds (" + Num(config.job_lease_seconds) +
                           "): a lease would expire between two renewals");
  }
  if (config.tls_cert.empty() != config.tls_key.empty()) {
    return InvalidArgument("--tls-cert and --tls-key must be given together");
  }
  if (!config.tls_client_ca.empty() && config.tls_cert.empty()) {
    return InvalidArgument("--tls-client-ca needs --tls-cert and --tls-key: client certificates are only asked for "
                           "over TLS");
  }
  return config;
}

}  // namespace kiln::server
