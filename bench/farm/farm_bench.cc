// The farm's benchmark (README "Benchmarks", api/jobs.h "A farm"), through real processes on
// loopback: a throwaway PostgreSQL 15 (tests/support/pg_server.h; durability off, as in the tests)
// and one farm per W in --workers (default 1, 2, 3): its own database, 2 kilnd replicas and W
// workers (`kilnd --role worker --devices <backend>:1`), all farms up at once. Prints, in one run:
//   jobs/s     --rounds rounds; in each, every farm in turn takes a burst of --jobs tiny jobs
//              (SubmitRun of a small conv-case model) submitted at once from --clients threads (each
//              its own channel and x-kiln-client), alternately through the two replicas; jobs/s =
//              jobs / (last finished_ms - first created_ms of the burst, from kiln_jobs); the median
//              over rounds per W, and the scaling ratios W / 1 (taking turns, the farms see the
//              same machine: it matters on a shared one).
//   queue wait p50/p99 of the bursts (created -> started: mostly waiting behind other jobs), run
//              time (started -> finished), CPU per job of replicas, workers, PostgreSQL, the client.
//   claim latency p50/p99 on an idle farm: --idle jobs one at a time (the next submitted when the
//              last has ended), created_ms -> started_ms (submission on a replica -> RUNNING on a
//              worker: NOTIFY, the claim, the start); and the idle farm's CPU.
//   farm metrics after the run: each worker's heartbeat age (kiln_workers), kiln_job_late_results_total,
//              kiln_job_leases_lost_total, kiln_job_attempts_total and how many jobs it ran; lease
//              expiries = queue entries with attempt > 1; jobs not SUCCEEDED. (There is no
//              per-worker heartbeat record to read an age from: leases live on queue entries.)
//   fairness   client "hog" submits --fairness jobs at once, then client "small" one, to the first
//              farm and to an embedded kilnd (--devices <backend>:1): how many of hog's jobs started
//              between small's submission and its start (round-robin across clients: about one per
//              device; FIFO: every one still queued), and small's wait.
//   database vs embedded: one kilnd on its data dir, one on PostgreSQL (no farm), both with
//              --compile-cache-bytes 0 (every compile really runs), called in turns (so that both
//              see the same load): median of --upload-n uploads of mnist-ai85net5 (deleted in
//              between, so each upload stores the bytes) and of --compile-n CompileAi8x of the
//              stored model (the first of each dropped: it warms the process and the replica's blob
//              cache). Target: compile ratio database / embedded <= 1.5.
// The default backend is reference: a tiny job costs less there than on tt-emu, so the farm's own
// overhead is a larger share (--backend tt-emu measures the emulator's farm).
//   bench_farm [--jobs 200] [--clients 8] [--rounds 3] [--workers 1,2,3] [--backend reference|tt-emu]
//              [--model NAME (tests/data/conv-cases)] [--idle 40] [--fairness 100 (0: none)] [--upload-n 15] [--compile-n 101]
//              [--lease S] [--heartbeat S] (the farm's --job-lease-seconds, --job-heartbeat-seconds;
//              kilnd's defaults, 30 and 10, unless given) [--worker-env K=V (the workers' environment,
//              e.g. OMP_WAIT_POLICY=passive; repeatable)] [--no-farm] [--no-compile] [--keep DIR]
#include <grpcpp/grpcpp.h>

#include <pqxx/pqxx>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "common/sha256.h"
#include "kiln/v1/compile.grpc.pb.h"
#include "kiln/v1/job.grpc.pb.h"
#include "kiln/v1/model.grpc.pb.h"
#include "tests/server/kilnd_process.h"
#include "tests/support/pg_server.h"

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using kiln::testing::KilndProcess;

namespace {

struct Options {
  int jobs = 200;
  int clients = 8;
  std::vector<int> workers = {1, 2, 3};
  std::string backend = "reference";  // cheaper per tiny job than tt-emu: the overhead shows more
  std::string model = "conv_dilation21_nonsquare";
  int idle = 40;
  int rounds = 3;
  int upload_n = 15;
  int compile_n = 101;
  std::string lease, heartbeat;  // --job-lease-seconds / --job-heartbeat-seconds ("" = kilnd's defaults)
  std::vector<std::string> worker_env;  // --worker-env K=V: extra environment of the workers only
  int fairness = 100;  // jobs of the "hog" client in the fairness check; 0 = no check
  bool farm = true;
  bool compile = true;
  std::string keep;  // keep logs here (else a temp dir, removed)
};

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "bench_farm: %s\n", what.c_str());
  std::exit(1);
}

std::string ReadBytes(const std::string& path) {
  std::string out;
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return out;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  std::fclose(f);
  return out;
}

std::shared_ptr<grpc::Channel> Channel(const KilndProcess& k) {
  grpc::ChannelArguments ch;
  ch.SetMaxReceiveMessageSize(64 << 20);
  // Distinct channels for distinct clients (gRPC would otherwise share one subchannel).
  static std::atomic<int> n{0};
  ch.SetInt("kiln.bench.channel", n++);
  return grpc::CreateCustomChannel(k.grpc_address(), grpc::InsecureChannelCredentials(), ch);
}

grpc::Status Upload(kiln::v1::ModelService::Stub& stub, const std::string& name, const std::string& bytes,
                    std::string* id = nullptr) {
  grpc::ClientContext ctx;
  kiln::v1::UploadModelResponse resp;
  auto w = stub.UploadModel(&ctx, &resp);
  kiln::v1::UploadModelRequest req;
  req.mutable_header()->set_name(name);
  req.mutable_header()->set_size_bytes(bytes.size());
  req.mutable_header()->set_sha256(kiln::Sha256Hex(bytes));
  w->Write(req);
  req.clear_header();
  for (size_t off = 0; off < bytes.size(); off += 1 << 20) {
    req.set_chunk(bytes.substr(off, 1 << 20));
    if (!w->Write(req)) break;
  }
  w->WritesDone();
  grpc::Status st = w->Finish();
  if (st.ok() && id != nullptr) *id = resp.model().model_id();
  return st;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t rank = static_cast<size_t>(p / 100.0 * static_cast<double>(v.size()) + 0.999999);  // nearest rank
  rank = std::clamp<size_t>(rank, 1, v.size());
  return v[rank - 1];
}
double Median(std::vector<double> v) { return Percentile(std::move(v), 50); }

double LoadAverage() {
  double l[1] = {0};
  return getloadavg(l, 1) == 1 ? l[0] : -1;
}

// "name{labels}" -> value of a /metrics page.
std::map<std::string, double> Scrape(const std::string& address) {
  std::map<std::string, double> out;
  std::string body = kiln::testing::HttpGet(address, "/metrics");
  auto hdr = body.find("\r\n\r\n");
  if (hdr != std::string::npos) body = body.substr(hdr + 4);
  std::istringstream in(body);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    auto sp = line.rfind(' ');
    if (sp == std::string::npos) continue;
    try {
      out[line.substr(0, sp)] = std::stod(line.substr(sp + 1));
    } catch (...) {
    }
  }
  return out;
}
double Sum(const std::map<std::string, double>& m, const std::string& name) {
  double s = 0;
  for (const auto& [k, v] : m) {
    if (k == name || k.rfind(name + "{", 0) == 0) s += v;
  }
  return s;
}

// CPU seconds (user + system) of a process, or of a process and its children now alive (the
// PostgreSQL postmaster's backends), from /proc.
double CpuSeconds(pid_t pid, bool with_children = false) {
  auto one = [](const std::string& stat_path, pid_t* ppid) -> double {
    std::string st = ReadBytes(stat_path);
    auto rp = st.rfind(')');
    if (rp == std::string::npos) return 0;
    std::istringstream in(st.substr(rp + 2));
    std::string field;
    std::vector<std::string> f;
    while (in >> field) f.push_back(field);
    if (f.size() < 13) return 0;
    if (ppid != nullptr) *ppid = static_cast<pid_t>(std::atol(f[1].c_str()));
    // after ")": state(0) ppid(1) ... utime(11) stime(12)
    return (std::atof(f[11].c_str()) + std::atof(f[12].c_str())) / static_cast<double>(sysconf(_SC_CLK_TCK));
  };
  double total = one("/proc/" + std::to_string(pid) + "/stat", nullptr);
  if (with_children) {
    for (const auto& e : fs::directory_iterator("/proc")) {
      const std::string name = e.path().filename().string();
      if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
      pid_t ppid = 0;
      const double t = one(e.path().string() + "/stat", &ppid);
      if (ppid == pid) total += t;
    }
  }
  return total;
}

struct JobTimes {
  std::string job_id, worker;
  int state = 0, attempt = 0;
  int64_t created = 0, started = 0, finished = 0;
};

// Every job labelled bench=<phase>, with its queue entry's worker.
std::vector<JobTimes> Jobs(const std::string& url, const std::string& phase) {
  pqxx::connection c(url);
  pqxx::work tx(c);
  std::vector<JobTimes> out;
  for (const auto& r : tx.exec(
           "SELECT j.job_id, j.state, j.attempt, j.created_ms, j.started_ms, j.finished_ms, coalesce(q.worker, '') "
           "FROM kiln_jobs j JOIN kiln_job_labels l ON l.job_id = j.job_id AND l.key = 'bench' AND l.value = " +
           tx.quote(phase) + " LEFT JOIN kiln_job_queue q ON q.job_id = j.job_id")) {
    JobTimes t;
    t.job_id = r[0].as<std::string>();
    t.state = r[1].as<int>();
    t.attempt = r[2].as<int>();
    t.created = r[3].as<int64_t>();
    t.started = r[4].as<int64_t>();
    t.finished = r[5].as<int64_t>();
    t.worker = r[6].as<std::string>();
    out.push_back(t);
  }
  return out;
}

// Waits until `n` jobs of `phase` have ended (SUCCEEDED, FAILED or CANCELLED).
bool WaitEnded(pqxx::connection& c, const std::string& phase, int n, std::chrono::seconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    int64_t ended = 0;
    {
      pqxx::work tx(c);
      ended = tx.exec1("SELECT count(*) FROM kiln_jobs j JOIN kiln_job_labels l ON l.job_id = j.job_id "
                       "AND l.key = 'bench' AND l.value = " + tx.quote(phase) + " WHERE j.state >= 3")[0]
                  .as<int64_t>();
    }
    if (ended >= n) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

grpc::Status Submit(kiln::v1::JobService::Stub& jobs, const std::string& model, const std::string& backend,
                    const std::string& client, const std::string& phase, std::string* id) {
  grpc::ClientContext ctx;
  ctx.AddMetadata("x-kiln-client", client);
  kiln::v1::SubmitRunRequest req;
  req.mutable_run()->set_model_id(model);
  req.mutable_run()->set_backend(backend);
  (*req.mutable_labels())["bench"] = phase;
  kiln::v1::Job job;
  grpc::Status st = jobs.SubmitRun(&ctx, req, &job);
  if (st.ok()) *id = job.job_id();
  return st;
}

// One farm: its own database, 2 replicas, `workers` workers, the model uploaded through replica a.
class Farm {
 public:
  Farm(kiln::testing::PgServer& pg, const Options& o, int workers, const fs::path& dir)
      : o_(o), workers_n_(workers), dir_(dir / ("w" + std::to_string(workers))) {
    auto url = pg.CreateDatabase("farm_w" + std::to_string(workers));
    if (!url.ok()) Die(url.status().ToString());
    url_ = *url;
    fs::create_directories(dir_);
    replicas_.push_back(Process("a", {}, {}));
    replicas_.push_back(Process("b", {}, {}));
    for (int i = 0; i < workers; ++i) {
      workers_.push_back(
          Process("w" + std::to_string(i + 1), {"--role", "worker", "--devices", o.backend + ":1"}, o.worker_env));
    }
    auto stub = kiln::v1::ModelService::NewStub(Channel(*replicas_[0]));
    auto st = Upload(*stub, o.model, ReadBytes(std::string(KILN_TEST_DATA) + "/conv-cases/" + o.model + ".onnx"), &model_);
    if (!st.ok()) Die("upload " + o.model + ": " + st.error_message());
    for (auto& r : replicas_) stubs_.push_back(kiln::v1::JobService::NewStub(Channel(*r)));
    db_ = std::make_unique<pqxx::connection>(url_);
  }

  int workers() const { return workers_n_; }
  pid_t pg_pid = -1;

  // Not measured: every worker loads the model, plans it, opens its connections.
  void WarmUp() {
    for (int i = 0; i < 4 * workers_n_; ++i) SubmitOne("warm", i % 2);
    if (!WaitEnded(*db_, "warm", 4 * workers_n_, std::chrono::seconds(300))) Die("warm-up jobs did not end");
  }

  // CPU seconds: replicas, workers, PostgreSQL (all of it: the farms share one server), this process.
  std::vector<double> Cpu() const {
    std::vector<double> v = {0, 0, CpuSeconds(pg_pid, true), CpuSeconds(getpid())};
    for (auto& r : replicas_) v[0] += CpuSeconds(r->pid());
    for (auto& k : workers_) v[1] += CpuSeconds(k->pid());
    return v;
  }

  struct Burst {
    double jobs_per_s = 0, submit_s = 0, wall_s = 0;
    std::vector<double> cpu;  // per job, ms: replicas, workers, PostgreSQL, client
  };

  // `jobs` submitted at once by `clients` threads (alternately through the replicas), until all ended.
  Burst RunBurst(const std::string& phase) {
    Burst b;
    const auto cpu0 = Cpu();
    const auto t0 = Clock::now();
    std::atomic<int> failed{0};
    std::vector<std::thread> threads;
    for (int c = 0; c < o_.clients; ++c) {
      threads.emplace_back([&, c] {
        auto stub = kiln::v1::JobService::NewStub(Channel(*replicas_[static_cast<size_t>(c % 2)]));
        const int mine = o_.jobs / o_.clients + (c < o_.jobs % o_.clients ? 1 : 0);
        for (int i = 0; i < mine; ++i) {
          std::string id;
          auto st = Submit(*stub, model_, o_.backend, "client-" + std::to_string(c), phase, &id);
          if (!st.ok()) {
            std::fprintf(stderr, "submit: %s\n", st.error_message().c_str());
            ++failed;
          }
        }
      });
    }
    for (auto& t : threads) t.join();
    b.submit_s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (failed > 0) Die(std::to_string(failed.load()) + " submissions failed");
    if (!WaitEnded(*db_, phase, o_.jobs, std::chrono::seconds(900))) Die("the burst's jobs did not end in 900 s");
    b.wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
    const auto cpu1 = Cpu();
    for (size_t i = 0; i < cpu1.size(); ++i) b.cpu.push_back((cpu1[i] - cpu0[i]) * 1e3 / o_.jobs);
    int64_t first = INT64_MAX, last = 0;
    for (const auto& j : Jobs(url_, phase)) {
      first = std::min(first, j.created);
      last = std::max(last, j.finished);
      wait_.push_back(static_cast<double>(j.started - j.created));
      run_.push_back(static_cast<double>(j.finished - j.started));
      not_succeeded_ += j.state != 3;
      ++burst_jobs_;
    }
    b.jobs_per_s = static_cast<double>(o_.jobs) / (static_cast<double>(last - first) / 1e3);
    return b;
  }

  // What the idle farm costs: CPU (% of one core) over 3 s with nothing queued.
  std::vector<double> IdleCpu() const {
    const auto c0 = Cpu();
    const auto a = Clock::now();
    std::this_thread::sleep_for(std::chrono::seconds(3));
    const auto c1 = Cpu();
    const double s = std::chrono::duration<double>(Clock::now() - a).count();
    std::vector<double> out;
    for (size_t i = 0; i < 3; ++i) out.push_back((c1[i] - c0[i]) / s * 100);
    return out;
  }

  // Claim latency on an idle farm: one job at a time, created_ms -> started_ms.
  std::vector<double> IdleClaims() {
    for (int i = 0; i < o_.idle; ++i) {
      SubmitOne("idle", i % 2);
      if (!WaitEnded(*db_, "idle", i + 1, std::chrono::seconds(120))) Die("an idle-farm job did not end");
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // every worker back to waiting
    }
    std::vector<double> claim;
    for (const auto& j : Jobs(url_, "idle")) {
      claim.push_back(static_cast<double>(j.started - j.created));
      not_succeeded_ += j.state != 3;
    }
    return claim;
  }

  // Each worker's counters and the jobs it ran; lease expiries (queue entries with attempt > 1).
  std::vector<std::string> WorkerLines(int* retried) {
    std::vector<std::string> lines;
    pqxx::work tx(*db_);
    *retried = tx.exec1("SELECT count(*) FROM kiln_job_queue WHERE attempt > 1")[0].as<int>();
    std::map<std::string, int> ran;
    for (const auto& r : tx.exec("SELECT worker, count(*) FROM kiln_job_queue WHERE state = 3 GROUP BY worker")) {
      ran[r[0].as<std::string>()] = r[1].as<int>();
    }
    // The worker registry (kiln_workers, what `kiln devices` lists): heartbeat age by the database's clock.
    std::map<std::string, double> age;
    for (const auto& r : tx.exec("SELECT worker, extract(epoch FROM clock_timestamp() - heartbeat_at)::float8"
                                 " FROM kiln_workers")) {
      age[r[0].as<std::string>()] = r[1].as<double>();
    }
    // Queue entries carry the worker's name (host/pid): match by pid.
    auto ends_with = [](const std::string& name, const std::string& pid) {
      return name.size() >= pid.size() && name.compare(name.size() - pid.size(), pid.size(), pid) == 0;
    };
    for (size_t i = 0; i < workers_.size(); ++i) {
      auto m = Scrape(workers_[i]->metrics_address());
      int jobs = 0;
      const std::string pid = "/" + std::to_string(workers_[i]->pid());
      for (const auto& [name, n] : ran) {
        if (ends_with(name, pid)) jobs += n;
      }
      double heartbeat_age = -1;
      for (const auto& [name, a] : age) {
        if (ends_with(name, pid)) heartbeat_age = a;
      }
      char line[512];
      std::snprintf(line, sizeof line,
                    "    w%zu: ran %4d jobs; heartbeat age %.2f s; kiln_job_late_results_total %g, "
                    "kiln_job_leases_lost_total %g, kiln_job_attempts_total succeeded %g failed %g cancelled %g "
                    "interrupted %g",
                    i + 1, jobs, heartbeat_age, Sum(m, "kiln_job_late_results_total"), Sum(m, "kiln_job_leases_lost_total"),
                    m["kiln_job_attempts_total{result=\"succeeded\"}"], m["kiln_job_attempts_total{result=\"failed\"}"],
                    m["kiln_job_attempts_total{result=\"cancelled\"}"],
                    m["kiln_job_attempts_total{result=\"interrupted\"}"]);
      lines.push_back(line);
    }
    return lines;
  }

  void Stop() {
    for (auto& k : workers_) {
      if (int rc = k->Stop(); rc != 0) std::fprintf(stderr, "a worker exited %d (log in %s)\n", rc, dir_.c_str());
    }
    for (auto& k : replicas_) {
      if (int rc = k->Stop(); rc != 0) std::fprintf(stderr, "a replica exited %d (log in %s)\n", rc, dir_.c_str());
    }
  }

  const std::vector<double>& wait() const { return wait_; }
  const KilndProcess& replica(size_t i) const { return *replicas_[i]; }
  const std::string& model() const { return model_; }
  const std::vector<double>& run() const { return run_; }
  int not_succeeded() const { return not_succeeded_; }
  int burst_jobs() const { return burst_jobs_; }

 private:
  std::unique_ptr<KilndProcess> Process(const std::string& name, std::vector<std::string> extra,
                                        std::vector<std::string> env) {
    env.push_back("KILN_DATABASE=" + url_);
    std::vector<std::string> args = {"--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--data-dir",
                                     (dir_ / name).string(), "--log-level", "warn", "--shutdown-grace", "5",
                                     "--job-max-queued", "100000", "--job-max-queued-per-client", "100000"};
    if (!o_.lease.empty()) args.insert(args.end(), {"--job-lease-seconds", o_.lease});
    if (!o_.heartbeat.empty()) args.insert(args.end(), {"--job-heartbeat-seconds", o_.heartbeat});
    args.insert(args.end(), extra.begin(), extra.end());
    return std::make_unique<KilndProcess>(KILND_BINARY, args, (dir_ / (name + ".log")).string(), env);
  }
  void SubmitOne(const std::string& phase, int replica) {
    std::string id;
    auto st = Submit(*stubs_[static_cast<size_t>(replica)], model_, o_.backend, phase, phase, &id);
    if (!st.ok()) Die("submit: " + st.error_message());
  }

  const Options& o_;
  int workers_n_;
  fs::path dir_;
  std::string url_, model_;
  std::vector<std::unique_ptr<KilndProcess>> replicas_, workers_;
  std::vector<std::unique_ptr<kiln::v1::JobService::Stub>> stubs_;
  std::unique_ptr<pqxx::connection> db_;
  std::vector<double> wait_, run_;
  int not_succeeded_ = 0, burst_jobs_ = 0;
};

struct StoreFigures {
  double upload = 0, compile = 0, compile_p10 = 0;
};

// The two kilnds measured turn about (embedded, database, embedded, ...), so that both see the
// same load on a shared machine: `uploads` uploads of mnist each (deleted in between, so that each
// stores the bytes; the first dropped), then `compiles` compiles of the stored model each (the
// first dropped: it warms the process and the replica's blob cache).
void MeasureStores(const KilndProcess& embedded, const KilndProcess& shared, const std::string& mnist, int uploads,
                   int compiles, StoreFigures* fe, StoreFigures* fs) {
  struct Side {
    std::unique_ptr<kiln::v1::ModelService::Stub> models;
    std::unique_ptr<kiln::v1::CompileService::Stub> compiler;
    std::vector<double> up, comp;
  };
  Side sides[2];
  const KilndProcess* k[2] = {&embedded, &shared};
  for (int s = 0; s < 2; ++s) {
    auto ch = Channel(*k[s]);
    sides[s].models = kiln::v1::ModelService::NewStub(ch);
    sides[s].compiler = kiln::v1::CompileService::NewStub(ch);
  }
  for (int i = 0; i < uploads + 1; ++i) {
    for (auto& side : sides) {
      const auto a = Clock::now();
      std::string id;
      auto st = Upload(*side.models, "mnist", mnist, &id);
      const double t = std::chrono::duration<double>(Clock::now() - a).count();
      if (!st.ok()) Die("upload mnist: " + st.error_message());
      if (i > 0) side.up.push_back(t);
      if (i < uploads) {  // the last one stays, to be compiled
        grpc::ClientContext ctx;
        kiln::v1::DeleteModelRequest req;
        req.set_model_id(id);
        kiln::v1::DeleteModelResponse resp;
        auto ds = side.models->DeleteModel(&ctx, req, &resp);
        if (!ds.ok()) Die("delete mnist: " + ds.error_message());
      }
    }
  }
  kiln::v1::CompileAi8xRequest req;
  req.set_model_id("mnist");
  req.mutable_options()->set_arch("ai85net5");
  req.mutable_options()->set_dataset("MNIST");
  for (int i = 0; i < compiles + 1; ++i) {
    for (auto& side : sides) {
      grpc::ClientContext ctx;
      kiln::v1::CompileAi8xResponse resp;
      const auto a = Clock::now();
      grpc::Status st = side.compiler->CompileAi8x(&ctx, req, &resp);
      const double t = std::chrono::duration<double>(Clock::now() - a).count();
      if (!st.ok() || !resp.ok()) Die("compile: " + st.error_message());
      if (resp.cache_hit()) Die("compile: a cache hit with --compile-cache-bytes 0");
      if (i > 0) side.comp.push_back(t);
    }
  }
  StoreFigures* out[2] = {fe, fs};
  for (int s = 0; s < 2; ++s) {
    out[s]->upload = Median(sides[s].up);
    out[s]->compile = Median(sides[s].comp);
    out[s]->compile_p10 = Percentile(sides[s].comp, 10);
  }
}

// Fairness across clients: client "hog" submits `hog` jobs at once, then client "small" one job.
// Returns how many of hog's jobs started between small's submission and its start (at most about
// one per device with round-robin across clients, as the embedded JobManager does; all of hog's
// jobs still queued with FIFO) and small's queue wait, from GetJob (ms timestamps).
std::pair<int, double> Fairness(const KilndProcess& k, const std::string& model, const std::string& backend, int hog) {
  auto stub = kiln::v1::JobService::NewStub(Channel(k));
  std::vector<std::string> ids;
  for (int i = 0; i < hog + 1; ++i) {
    std::string id;
    auto st = Submit(*stub, model, backend, i < hog ? "hog" : "small", "fairness", &id);
    if (!st.ok()) Die("submit: " + st.error_message());
    ids.push_back(id);
  }
  auto ms = [](const google::protobuf::Timestamp& t) { return t.seconds() * 1e3 + t.nanos() / 1e6; };
  std::vector<kiln::v1::Job> jobs(ids.size());
  const auto deadline = Clock::now() + std::chrono::seconds(300);
  for (size_t i = 0; i < ids.size(); ++i) {
    while (true) {
      grpc::ClientContext ctx;
      kiln::v1::GetJobRequest req;
      req.set_job_id(ids[i]);
      auto st = stub->GetJob(&ctx, req, &jobs[i]);
      if (!st.ok()) Die("get job: " + st.error_message());
      if (jobs[i].state() >= kiln::v1::SUCCEEDED) break;
      if (Clock::now() > deadline) Die("fairness jobs did not end");
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  const double small_created = ms(jobs.back().created()), small_started = ms(jobs.back().started());
  int between = 0;
  for (int i = 0; i < hog; ++i) {
    const double t = ms(jobs[static_cast<size_t>(i)].started());
    between += t >= small_created && t < small_started;
  }
  return {between, small_started - small_created};
}

std::vector<int> ParseList(const std::string& s) {
  std::vector<int> out;
  std::stringstream in(s);
  std::string part;
  while (std::getline(in, part, ',')) out.push_back(std::max(1, std::atoi(part.c_str())));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) Die(a + " needs a value");
      return argv[++i];
    };
    if (a == "--jobs") o.jobs = std::max(1, std::atoi(next().c_str()));
    else if (a == "--clients") o.clients = std::max(1, std::atoi(next().c_str()));
    else if (a == "--workers") o.workers = ParseList(next());
    else if (a == "--backend") o.backend = next();
    else if (a == "--model") o.model = next();
    else if (a == "--rounds") o.rounds = std::max(1, std::atoi(next().c_str()));
    else if (a == "--idle") o.idle = std::max(1, std::atoi(next().c_str()));
    else if (a == "--upload-n") o.upload_n = std::max(3, std::atoi(next().c_str()));
    else if (a == "--compile-n") o.compile_n = std::max(3, std::atoi(next().c_str()));
    else if (a == "--lease") o.lease = next();
    else if (a == "--heartbeat") o.heartbeat = next();
    else if (a == "--worker-env") o.worker_env.push_back(next());
    else if (a == "--fairness") o.fairness = std::max(0, std::atoi(next().c_str()));
    else if (a == "--no-farm") o.farm = false;
    else if (a == "--no-compile") o.compile = false;
    else if (a == "--keep") o.keep = next();
    else Die("unknown argument " + a + " (see the header of bench/farm/farm_bench.cc)");
  }
  auto pg = kiln::testing::PgServer::Start();
  if (!pg.ok()) Die("PostgreSQL: " + pg.status().ToString());
  const fs::path dir = o.keep.empty() ? fs::temp_directory_path() / ("kiln-bench-farm-" + std::to_string(::getpid()))
                                      : fs::path(o.keep);
  fs::remove_all(dir);
  fs::create_directories(dir);
  const unsigned cores = std::thread::hardware_concurrency();
  std::printf("bench_farm: %u cores, load average %.2f at start; PostgreSQL 15 (fsync off), kilnd on loopback\n",
              cores, LoadAverage());

  if (o.farm) {
    std::string worker_env;
    for (const auto& e : o.worker_env) worker_env += (worker_env.empty() ? "" : " ") + e;
    std::printf("\nfarm: 2 replicas, workers `--role worker --devices %s:1`, model %s (tests/data/conv-cases); "
                "%d rounds, each a burst of %d jobs from %d client threads through both replicas on every farm "
                "in turn (the farms all up at once, on one PostgreSQL); claim latency: %d jobs one at a time "
                "on the idle farm; lease %s s, heartbeat %s s; workers' extra environment: %s\n",
                o.backend.c_str(), o.model.c_str(), o.rounds, o.jobs, o.clients, o.idle,
                o.lease.empty() ? "30 (default)" : o.lease.c_str(), o.heartbeat.empty() ? "10 (default)" : o.heartbeat.c_str(),
                worker_env.empty() ? "none" : worker_env.c_str());
    std::fflush(stdout);
    std::vector<std::unique_ptr<Farm>> farms;
    for (int w : o.workers) {
      farms.push_back(std::make_unique<Farm>(**pg, o, w, dir));
      farms.back()->pg_pid = (*pg)->pid();
    }
    for (auto& f : farms) f->WarmUp();
    std::vector<std::vector<Farm::Burst>> bursts(farms.size());
    for (int r = 0; r < o.rounds; ++r) {
      for (size_t i = 0; i < farms.size(); ++i) {
        bursts[i].push_back(farms[i]->RunBurst("burst-" + std::to_string(r)));
        const auto& b = bursts[i].back();
        std::printf("  round %d, %d workers: %6.1f jobs/s (submissions %.2f s, all ended after %.2f s), load %.2f\n",
                    r + 1, farms[i]->workers(), b.jobs_per_s, b.submit_s, b.wall_s, LoadAverage());
        std::fflush(stdout);
      }
    }
    std::vector<double> median_rate(farms.size());
    std::printf("\n");
    for (size_t i = 0; i < farms.size(); ++i) {
      Farm& f = *farms[i];
      std::vector<double> rates;
      std::vector<double> cpu(4, 0);
      for (const auto& b : bursts[i]) {
        rates.push_back(b.jobs_per_s);
        for (size_t k = 0; k < 4; ++k) cpu[k] += b.cpu[k] / static_cast<double>(bursts[i].size());
      }
      median_rate[i] = Median(rates);
      const auto idle = f.IdleCpu();
      const auto claims = f.IdleClaims();
      int retried = 0;
      const auto lines = f.WorkerLines(&retried);
      std::printf("workers %d: %6.1f jobs/s (median of %d rounds; min %.1f, max %.1f)\n", f.workers(), median_rate[i],
                  o.rounds, Percentile(rates, 0), Percentile(rates, 100));
      std::printf("  burst: queue wait (created -> started) p50 %.0f ms, p99 %.0f ms; run (started -> finished) "
                  "p50 %.0f ms, p99 %.0f ms\n",
                  Percentile(f.wait(), 50), Percentile(f.wait(), 99), Percentile(f.run(), 50), Percentile(f.run(), 99));
      std::printf("  idle-farm claim latency (created -> started), %zu jobs: p50 %.0f ms, p99 %.0f ms, max %.0f ms\n",
                  claims.size(), Percentile(claims, 50), Percentile(claims, 99), Percentile(claims, 100));
      std::printf("  CPU per burst job (ms): replicas %.1f, workers %.1f, PostgreSQL %.1f, this client %.1f; "
                  "idle farm CPU (%% of one core): replicas %.1f, workers %.1f, PostgreSQL %.1f\n",
                  cpu[0], cpu[1], cpu[2], cpu[3], idle[0], idle[1], idle[2]);
      std::printf("  jobs not SUCCEEDED %d of %d; lease expiries (queue entries with attempt > 1) %d\n",
                  f.not_succeeded(), f.burst_jobs() + static_cast<int>(claims.size()), retried);
      for (const auto& l : lines) std::printf("%s\n", l.c_str());
      std::fflush(stdout);
    }
    if (o.fairness > 0) {
      // The same submissions to the first farm (through replica a) and to an embedded kilnd with
      // one device of the backend.
      const auto farm_fair = Fairness(farms[0]->replica(0), farms[0]->model(), o.backend, o.fairness);
      KilndProcess e(KILND_BINARY,
                     {"--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--data-dir",
                      (dir / "fair-embedded").string(), "--log-level", "warn", "--devices", o.backend + ":1",
                      "--job-max-queued", "100000", "--job-max-queued-per-client", "100000"},
                     (dir / "fair-embedded.log").string());
      std::string model;
      auto ms = kiln::v1::ModelService::NewStub(Channel(e));
      auto st = Upload(*ms, o.model, ReadBytes(std::string(KILN_TEST_DATA) + "/conv-cases/" + o.model + ".onnx"), &model);
      if (!st.ok()) Die("upload: " + st.error_message());
      const auto emb_fair = Fairness(e, model, o.backend, o.fairness);
      std::printf("fairness: client \"hog\" submits %d jobs, then client \"small\" 1; hog's jobs started between "
                  "small's submission and its start: farm (%d worker%s) %d, small waited %.0f ms; embedded kilnd (%s:1) %d, small waited %.0f ms\n",
                  o.fairness, farms[0]->workers(), farms[0]->workers() == 1 ? "" : "s", farm_fair.first,
                  farm_fair.second, o.backend.c_str(), emb_fair.first, emb_fair.second);
      e.Stop();
    }
    for (auto& f : farms) f->Stop();
    for (size_t i = 0; i < farms.size(); ++i) {
      if (farms[0]->workers() != 1 || i == 0) continue;
      std::printf("scaling %d workers / 1: %.2fx (median jobs/s; ideal %d.00x) -- on %u cores shared by PostgreSQL, "
                  "2 replicas, the workers and this client (and, on a shared machine, whatever else runs)\n",
                  farms[i]->workers(), median_rate[i] / median_rate[0], farms[i]->workers(), cores);
    }
  }

  if (o.compile) {
    const std::string mnist = ReadBytes(std::string(KILN_TEST_DATA) + "/server/mnist-ai85net5.qat.onnx");
    if (mnist.empty()) Die("cannot read the mnist model");
    auto url = (*pg)->CreateDatabase("store");
    if (!url.ok()) Die(url.status().ToString());
    auto args = [&](const std::string& data) {
      return std::vector<std::string>{"--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--data-dir",
                                      (dir / data).string(), "--compile-cache-bytes", "0", "--log-level", "warn"};
    };
    StoreFigures embedded, shared;
    {
      KilndProcess e(KILND_BINARY, args("embedded"), (dir / "embedded.log").string());
      KilndProcess d(KILND_BINARY, args("shared"), (dir / "shared.log").string(), {"KILN_DATABASE=" + *url});
      MeasureStores(e, d, mnist, o.upload_n, o.compile_n, &embedded, &shared);
    }
    std::printf("\ndatabase vs embedded: one kilnd each, taking turns; medians of %d uploads and %d compiles; "
                "--compile-cache-bytes 0 (every compile runs), blob cache at its default; load %.2f\n",
                o.upload_n, o.compile_n, LoadAverage());
    std::printf("%-40s %12s %12s %8s\n", "", "embedded", "database", "ratio");
    auto row = [](const char* what, double e, double d, const char* target) {
      std::printf("%-40s %9.2f ms %9.2f ms %7.2fx %s\n", what, e * 1e3, d * 1e3, d / e, target);
    };
    row("upload mnist-ai85net5 (deleted between)", embedded.upload, shared.upload, "");
    row("CompileAi8x of the stored mnist-ai85net5", embedded.compile, shared.compile,
        shared.compile / embedded.compile <= 1.5 ? "(target <= 1.5x: met)" : "(target <= 1.5x: NOT met)");
    row("  the same, 10th percentile", embedded.compile_p10, shared.compile_p10, "");
  }
  if (o.keep.empty()) fs::remove_all(dir);
  return 0;
}
