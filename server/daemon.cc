#include "server/daemon.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/resource_quota.h>
#include <openssl/bio.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <spdlog/spdlog.h>

#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "api/lanes.h"
#include "api/version.h"
#include "common/memory.h"
#include "server/auth_interceptor.h"
#include "store/shared_model_store.h"

namespace kiln::server {

namespace {
// Connections to the shared database: each open ReadModel stream, model read and upload commit
// holds one while it runs (store/pg/pg_blob_store.h), the store lane's workers bound the rest.
constexpr size_t kDatabaseConnections = 16;

// A worker's name in the farm's queue and logs: host name and process id.
std::string WorkerName() {
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) std::snprintf(host, sizeof host, "unknown");
  return std::string(host) + "/" + std::to_string(getpid());
}

Result<std::string> ReadFile(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return InvalidArgument(std::string("cannot read ") + what + " file '" + path + "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// gRPC 1.51 reports an unusable key only as a failed port ("address in use or invalid"), so the
// pair is checked here first: PEM parse, then X509_check_private_key.
Status CheckKeyPair(const std::string& cert_pem, const std::string& key_pem, const Config& config) {
  BIO* cbio = BIO_new_mem_buf(cert_pem.data(), static_cast<int>(cert_pem.size()));
  X509* cert = cbio ? PEM_read_bio_X509(cbio, nullptr, nullptr, nullptr) : nullptr;
  BIO_free(cbio);
  BIO* kbio = BIO_new_mem_buf(key_pem.data(), static_cast<int>(key_pem.size()));
  EVP_PKEY* key = kbio ? PEM_read_bio_PrivateKey(kbio, nullptr, nullptr, nullptr) : nullptr;
  BIO_free(kbio);
  Status st = Status::Ok();
  if (cert == nullptr) {
    st = InvalidArgument("TLS certificate file '" + config.tls_cert + "' holds no PEM certificate");
  } else if (key == nullptr) {
    st = InvalidArgument("TLS key file '" + config.tls_key + "' holds no PEM private key (or it is encrypted)");
  } else if (X509_check_private_key(cert, key) != 1) {
    st = InvalidArgument("TLS key '" + config.tls_key + "' does not match certificate '" + config.tls_cert + "'");
  }
  X509_free(cert);
  EVP_PKEY_free(key);
  return st;
}

// The --tls-client-ca bundle must hold at least one PEM certificate: gRPC 1.51 would otherwise
// fail only at the first handshake (every client refused, nothing said at start-up).
Status CheckClientCa(const std::string& pem, const std::string& path) {
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  X509* cert = bio ? PEM_read_bio_X509(bio, nullptr, nullptr, nullptr) : nullptr;
  BIO_free(bio);
  const bool ok = cert != nullptr;
  X509_free(cert);
  if (!ok) return InvalidArgument("TLS client CA file '" + path + "' holds no PEM certificate");
  return Status::Ok();
}
}  // namespace

Daemon::Daemon(Config config) : config_(std::move(config)) {}

Daemon::~Daemon() {
  if (server_) Shutdown();
}

Status Daemon::Start() {
  // Thread creation (executors, device workers) and the metrics listener can throw; start-up
  // failures must become a message and an exit code, not an abort.
  try {
    return StartServices();
  } catch (const std::exception& e) {
    return Unavailable(std::string("start-up failed: ") + e.what());
  }
}

Status Daemon::StartServices() {
  const bool worker = config_.role == "worker";
  metrics_ = std::make_unique<Metrics>(api::KilnVersion());
  // Bind before touching the store: a second kilnd on the same port stops here ("address in use")
  // instead of serving a second view of the data directory (server/listener.h).
  auto listener = ConnectionListener::Bind(
      {config_.listen, config_.fd_reserve, [m = metrics_.get()] { m->CountRejected("connection_limit"); }});
  if (!listener.ok()) return listener.status();
  listener_ = std::move(listener).value();
  // The store, the scheduler and the job manager report each refusal for a limit where they
  // decide it; it is counted here (metrics_ outlives them: server/daemon.h member order).
  auto count_refused = [m = metrics_.get()](std::string_view reason) { m->CountRejected(reason); };
  store::ModelStoreOptions store_options;
  store_options.on_refused = count_refused;
  store_options.dir = config_.data_dir;
  store_options.max_model_bytes = config_.max_model_bytes;
  store_options.max_store_bytes = config_.max_store_bytes;
  store_options.max_uploads_in_flight = config_.max_uploads_in_flight;
  store_options.max_upload_bytes_in_flight = config_.max_upload_bytes_in_flight;
  store_options.max_metadata_bytes = config_.max_metadata_bytes;
  if (!config_.database_url.empty()) {
    // The farm: models in PostgreSQL (store/shared_model_store.h over store/pg/), the data dir
    // only for this replica's upload spool. Open migrates the schema, or refuses one newer than
    // this kilnd can use (store/pg/pg_schema.h).
    store::pg::PgPoolOptions pg;
    pg.url = config_.database_url;
    pg.size = kDatabaseConnections;
    auto shared = store::pg::PgSharedState::Open(pg, static_cast<int>(config_.job_max_attempts));
    if (!shared.ok()) return shared.status().WithContext("database " + store::pg::RedactUrl(config_.database_url));
    shared_ = std::move(shared).value();
    spdlog::info("shared state: PostgreSQL {} (schema version {}, was {})", store::pg::RedactUrl(config_.database_url),
                 shared_->schema().after, shared_->schema().before);
    store_options.blob_cache_bytes = config_.blob_cache_bytes;
    auto store = store::SharedModelStore::Open(&shared_->models(), &shared_->blobs(), store_options);
    if (!store.ok()) return store.status().WithContext("shared model store (spool in " + config_.data_dir + ")");
    store_ = std::move(store).value();
  } else {
    auto store = store::ModelStore::Open(store_options);
    if (!store.ok()) return store.status().WithContext("model store " + config_.data_dir);
    store_ = std::move(store).value();
  }
  auth_ = std::make_unique<Authenticator>(config_.token);

  auto sched_options = api::KilndSchedulerOptions(
      {config_.devices,
       {static_cast<int>(config_.compile_workers), static_cast<int>(config_.compile_queue),
        static_cast<int>(config_.device_queue)},
       static_cast<int>(config_.reference_threads), config_.tt_emu_level});
  if (!sched_options.ok()) return sched_options.status();
  sched_options->metrics = metrics_->shared_registry();
  sched_options->on_refused = count_refused;
  sched_options->max_queued_per_client = static_cast<int>(config_.device_queue_per_client);
  sched_options->memory_budget_bytes =
      config_.memory_budget_bytes > 0 ? config_.memory_budget_bytes : DefaultMemoryBudgetBytes();
  spdlog::info("memory budget {} ({})", FormatBytes(sched_options->memory_budget_bytes),
               config_.memory_budget_bytes > 0 ? "--memory-budget" : "75% of the memory limit");
  auto scheduler = sched::Scheduler::Create(*std::move(sched_options));
  if (!scheduler.ok()) return scheduler.status().WithContext("scheduler");
  scheduler_ = std::move(scheduler).value();

  StreamGuard::Options stream_options;
  // A ReadModel stream of a blob the cache does not hold keeps one database connection while it
  // runs (store/pg/pg_blob_store.h): by default at most half of them.
  if (config_.max_read_streams > 0) {
    stream_options.max_streams = static_cast<size_t>(config_.max_read_streams);
  } else if (shared_) {
    stream_options.max_streams = kDatabaseConnections / 2;
  }
  stream_options.write_timeout =
      std::chrono::milliseconds(static_cast<int64_t>(config_.stream_write_timeout_seconds * 1000));
  streams_ = std::make_unique<StreamGuard>(stream_options, metrics_.get());
  ServiceEnv env{metrics_.get(), auth_.get(), &drain_, scheduler_.get(), static_cast<int64_t>(config_.max_message_bytes),
                 streams_.get()};
  ModelServiceOptions model_options;
  model_options.upload_idle_timeout = std::chrono::milliseconds(
      static_cast<int64_t>(config_.upload_idle_timeout_seconds * 1000));
  model_options.list_page_size = config_.list_page_size;
  model_service_ = std::make_unique<ModelServiceImpl>(store_.get(), env, model_options);
  compile_service_ =
      std::make_unique<CompileServiceImpl>(store_.get(), scheduler_.get(), env, config_.compile_cache_bytes);
  device_service_ = std::make_unique<DeviceServiceImpl>(store_.get(), scheduler_.get(),
                                                        static_cast<int>(config_.device_queue), env,
                                                        static_cast<int64_t>(config_.plan_cache_bytes));
  api::JobLimits limits;
  limits.max_queued = static_cast<int>(config_.job_max_queued);
  limits.max_queued_per_client = static_cast<int>(config_.job_max_queued_per_client);
  limits.max_attempts = static_cast<int>(config_.job_max_attempts);
  limits.max_events = static_cast<int64_t>(config_.job_max_events);
  limits.max_configurations = static_cast<int>(config_.job_max_configurations);
  limits.retention_seconds = config_.job_retention_seconds;
  limits.results_max_bytes = static_cast<int64_t>(config_.job_results_max_bytes);
  limits.max_result_bytes = static_cast<int64_t>(config_.max_message_bytes);
  limits.max_store_bytes = static_cast<int64_t>(config_.max_store_bytes);
  api::JobManager::Env job_env;
  job_env.models = store_.get();
  job_env.scheduler = scheduler_.get();
  job_env.plans = device_service_->plans();
  job_env.metrics = metrics_->shared_registry();
  job_env.on_refused = count_refused;
  if (shared_) {
    // A farm: jobs, their queue, events and results in PostgreSQL (store/pg/pg_job_store.h); a
    // serving replica queues them, workers (--role worker) claim and run them (api/jobs.h).
    job_env.jobs = &shared_->job_store();
    job_env.queue = &shared_->jobs();
    job_env.worker = worker;
    job_env.worker_name = WorkerName();
    job_env.lease = std::chrono::milliseconds(static_cast<int64_t>(config_.job_lease_seconds * 1000));
    job_env.heartbeat = std::chrono::milliseconds(static_cast<int64_t>(config_.job_heartbeat_seconds * 1000));
    limits.max_store_bytes = 0;  // the embedded store's disk limit; a farm's database has its own
    if (worker) {
      spdlog::info("worker {}: claiming jobs for {} (lease {} s, heartbeat {} s)", job_env.worker_name,
                   config_.devices, config_.job_lease_seconds, config_.job_heartbeat_seconds);
    }
  } else {
    auto job_store = store::JobStore::Open(config_.data_dir);
    if (!job_store.ok()) return job_store.status().WithContext("job store " + config_.data_dir + "/jobs");
    job_store_ = std::move(job_store).value();
    store_->SetOtherBytes([js = job_store_.get()] { return static_cast<uint64_t>(js->total_bytes()); });
    job_env.jobs = job_store_.get();
  }
  auto jobs = api::JobManager::Create(std::move(job_env), limits);
  if (!jobs.ok()) return jobs.status().WithContext("jobs");
  jobs_ = std::move(jobs).value();
  job_service_ = std::make_unique<JobServiceImpl>(jobs_.get(), env);
  if (shared_) device_service_->SetFarm(jobs_.get());

  std::shared_ptr<grpc::ServerCredentials> creds;
  if (!config_.tls_cert.empty()) {
    auto cert = ReadFile(config_.tls_cert, "TLS certificate");
    if (!cert.ok()) return cert.status();
    auto key = ReadFile(config_.tls_key, "TLS key");
    if (!key.ok()) return key.status();
    if (Status st = CheckKeyPair(*cert, *key, config_); !st.ok()) return st;
    grpc::SslServerCredentialsOptions ssl;
    ssl.pem_key_cert_pairs.push_back({*key, *cert});
    if (!config_.tls_client_ca.empty()) {
      // Mutual TLS: a connection without a certificate signed by this CA fails its handshake (the
      // client sees UNAVAILABLE); a verified one names the principal (server/rpc_context.h Principal).
      auto ca = ReadFile(config_.tls_client_ca, "TLS client CA");
      if (!ca.ok()) return ca.status();
      if (Status st = CheckClientCa(*ca, config_.tls_client_ca); !st.ok()) return st;
      ssl.pem_root_certs = *ca;
      ssl.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
    }
    creds = grpc::SslServerCredentials(ssl);
    // With TLS the token is checked in the auth filter, before a request's body is read.
    if (auth_->enabled()) creds->SetAuthMetadataProcessor(MakeTokenProcessor(auth_.get(), metrics_.get()));
  } else {
    creds = grpc::InsecureServerCredentials();
  }

  auto hp = SplitHostPort(config_.listen);
  if (!hp.ok()) return hp.status();
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  // Connections come from listener_ only (no gRPC listening port, see server/listener.h).
  auto acceptor = builder.experimental().AddExternalConnectionAcceptor(
      grpc::ServerBuilder::experimental_type::ExternalConnectionType::FROM_FD, creds);
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS,
                             static_cast<int>(config_.handshake_timeout_seconds * 1000));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS, static_cast<int>(config_.connection_idle_seconds * 1000));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, static_cast<int>(config_.max_concurrent_streams));
  // One quota for all transport memory (read buffers, received messages): gRPC shrinks flow-control
  // windows under pressure, then reclaims idle connections and cancels calls, instead of growing.
  grpc::ResourceQuota quota("kilnd");
  quota.Resize(static_cast<size_t>(config_.grpc_memory_bytes));
  builder.SetResourceQuota(quota);
  // One limit for every method: conv tensors and inline models need it large; uploads still
  // enforce their own 1 MiB chunk size.
  builder.SetMaxReceiveMessageSize(static_cast<int>(config_.max_message_bytes));
  builder.SetMaxSendMessageSize(static_cast<int>(config_.max_message_bytes));
  if (!worker) {
    // A worker serves only grpc.health.v1 (its probes) and /metrics; clients talk to replicas.
    builder.RegisterService(model_service_.get());
    builder.RegisterService(compile_service_.get());
    builder.RegisterService(device_service_.get());
    builder.RegisterService(job_service_.get());
  }
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(std::make_unique<AuthInterceptorFactory>(auth_.get(), metrics_.get()));
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  server_ = builder.BuildAndStart();
  if (!server_) return Unavailable("gRPC server did not start on " + config_.listen);
  // grpc.health.v1 answers for each registered service by name too (`kiln health --service
  // kiln.v1.DeviceService`), not only for the whole server (""); Shutdown() turns all NOT_SERVING.
  if (auto* health = server_->GetHealthCheckService(); health != nullptr && !worker) {
    for (const char* name : {kiln::v1::ModelService::service_full_name(), kiln::v1::CompileService::service_full_name(),
                             kiln::v1::DeviceService::service_full_name(), kiln::v1::JobService::service_full_name()}) {
      health->SetServingStatus(name, true);
    }
  }
  acceptor_ = std::move(acceptor);
  listener_->Start(acceptor_.get());
  std::string host = hp->first.find(':') != std::string::npos ? "[" + hp->first + "]" : hp->first;
  grpc_address_ = host + ":" + std::to_string(listener_->port());

  auto metrics_addr = metrics_->Serve(
      config_.metrics_listen,
      std::chrono::milliseconds(static_cast<int64_t>(config_.metrics_client_timeout_seconds * 1000)),
      static_cast<int>(config_.metrics_max_clients));
  if (!metrics_addr.ok()) {
    listener_->Stop();
    server_->Shutdown();
    server_.reset();
    return metrics_addr.status();
  }
  metrics_address_ = *metrics_addr;
  spdlog::info("model store {}: {} models, {} bytes", shared_ ? "(shared)" : config_.data_dir, store_->model_count(),
               store_->total_bytes());
  spdlog::info("connections: descriptors capped at {} (RLIMIT_NOFILE minus --fd-reserve {})", listener_->fd_cap(),
               config_.fd_reserve);
  return Status::Ok();
}

void Daemon::Shutdown() {
  if (!server_) return;
  drain_.Start();
  spdlog::info("shutting down: draining for up to {} s", config_.shutdown_grace_seconds);
  if (auto* health = server_->GetHealthCheckService()) health->Shutdown();
  model_service_->CancelUploads();
  // Watch streams end now (UNAVAILABLE), no job starts any more; running jobs get the grace below.
  if (jobs_) jobs_->Shutdown();
  // gRPC's own Shutdown(deadline) waits out the whole deadline while any client keeps a
  // connection open, so wait for our in-flight RPCs ourselves and then shut down at once.
  auto deadline = std::chrono::steady_clock::now() +
                  std::chrono::milliseconds(static_cast<int64_t>(config_.shutdown_grace_seconds * 1000));
  auto busy = [this] { return drain_.inflight() > 0 || (jobs_ && jobs_->running() > 0); };
  while (busy() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (busy()) {
    spdlog::warn("grace period over: cancelling {} RPCs and {} jobs still in flight (the jobs run again after the "
                 "restart)",
                 drain_.inflight(), jobs_ ? jobs_->running() : 0);
  }
  // Cancels whatever work is left (its RPCs then finish with CANCELLED or UNAVAILABLE).
  if (scheduler_) scheduler_->Shutdown(/*drain=*/false);
  if (listener_) listener_->Stop();
  {
    // gRPC cancels the calls left after 100 ms, but a call whose client stopped reading keeps a
    // write pending on a full socket, and Shutdown waits on it for as long as the client sleeps.
    // So if Shutdown has not returned a second later, the connections still open are shut down
    // under it (ConnectionListener::ShutdownConnections), which fails those writes.
    std::mutex mu;
    std::condition_variable cv;
    bool down = false;
    std::thread watchdog([&] {
      std::unique_lock<std::mutex> lock(mu);
      if (cv.wait_for(lock, std::chrono::milliseconds(1100), [&] { return down; }) || !listener_) return;
      const int n = listener_->ShutdownConnections();
      spdlog::warn("shutdown: {} connection(s) still open after their calls were cancelled (clients not reading); "
                   "closed their sockets",
                   n);
    });
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(100));
    server_->Wait();
    {
      std::lock_guard<std::mutex> lock(mu);
      down = true;
    }
    cv.notify_all();
    watchdog.join();
  }
  server_.reset();
  // The job manager's last writes before main's _Exit: the ends of the jobs cancelled above, a
  // worker's claims released and its row removed from the farm's registry. Bounded, so that a
  // database that stopped answering delays the exit by at most this much.
  constexpr std::chrono::seconds kJobsStopTimeout{10};
  if (jobs_ && !jobs_->Stop(std::chrono::steady_clock::now() + kJobsStopTimeout)) {
    spdlog::warn("jobs still writing their ends after {} s; exiting without them (a farm's leases re-offer their "
                 "jobs)",
                 kJobsStopTimeout.count());
  }
  spdlog::info("shutdown complete");
}

}  // namespace kiln::server
