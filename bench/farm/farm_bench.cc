// The farm's benchmark (issue 19 "Benchmark", api/jobs.h "A farm"), through real processes on
// loopback: a throwaway PostgreSQL 15 (tests/support/pg_server.h; durability off, as in the tests),
// 2 kilnd replicas and W = 1, 2, 3 workers (`kilnd --role worker --devices <backend>:1`), a fresh
// database for each W. Prints, in one run:
//   jobs/s     `--jobs` tiny jobs (SubmitRun of a small conv-case model) submitted at once from
//              `--clients` threads (each its own channel and x-kiln-client), alternately through
//              the two replicas; jobs/s = jobs / (last finished_ms - first created_ms), both from
//              kiln_jobs; and the scaling ratios W=2 / W=1, W=3 / W=1.
//   queue wait p50/p99 of that burst (created -> started: mostly waiting behind other jobs).
//   claim latency p50/p99 on an idle farm: `--idle` jobs one at a time (the next submitted when the
//              last has finished), created_ms -> started_ms (submission on a replica -> RUNNING on
//              a worker: NOTIFY, the claim, the start).
//   farm metrics after the run: each worker's kiln_job_late_results_total,
//              kiln_job_leases_lost_total, kiln_job_attempts_total and how many jobs it ran; lease
//              expiries = queue entries with attempt > 1; jobs not SUCCEEDED.
//   database vs embedded: one kilnd on its data dir, one on PostgreSQL (no farm), both with
//              --compile-cache-bytes 0 (every compile really runs): median of `--compile-n` uploads
//              of mnist-ai85net5 (deleted in between, so each upload stores the bytes) and of
//              CompileAi8x of the stored model (the first compile of each is dropped: it warms the
//              process and the replica's blob cache). Target: compile ratio database / embedded <= 1.5.
//   bench_farm [--jobs 200] [--clients 8] [--workers 1,2,3] [--backend tt-emu|reference]
//              [--model NAME (tests/data/conv-cases)] [--idle 40] [--compile-n 15]
//              [--no-farm] [--no-compile] [--keep DIR]
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
  std::string backend = "tt-emu";
  std::string model = "conv_dilation21_nonsquare";
  int idle = 40;
  int compile_n = 15;
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

struct FarmFigures {
  int workers = 0;
  double jobs_per_s = 0, client_jobs_per_s = 0;
  double wait_p50 = 0, wait_p99 = 0, run_p50 = 0;
  double claim_p50 = 0, claim_p99 = 0, claim_max = 0;
  int not_succeeded = 0, retried = 0;
  double load = 0;
  std::vector<std::string> worker_lines;
};

FarmFigures MeasureFarm(kiln::testing::PgServer& pg, const Options& o, int w, const fs::path& dir) {
  FarmFigures f;
  f.workers = w;
  auto url = pg.CreateDatabase("farm_w" + std::to_string(w));
  if (!url.ok()) Die(url.status().ToString());
  const fs::path d = dir / ("w" + std::to_string(w));
  fs::create_directories(d);
  auto process = [&](const std::string& name, std::vector<std::string> extra) {
    std::vector<std::string> args = {"--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--data-dir",
                                     (d / name).string(), "--log-level", "warn", "--shutdown-grace", "5",
                                     "--job-max-queued", "100000", "--job-max-queued-per-client", "100000"};
    args.insert(args.end(), extra.begin(), extra.end());
    return std::make_unique<KilndProcess>(KILND_BINARY, args, (d / (name + ".log")).string(),
                                          std::vector<std::string>{"KILN_DATABASE=" + *url});
  };
  std::vector<std::unique_ptr<KilndProcess>> replicas, workers;
  replicas.push_back(process("a", {}));
  replicas.push_back(process("b", {}));
  for (int i = 0; i < w; ++i) {
    workers.push_back(process("w" + std::to_string(i + 1), {"--role", "worker", "--devices", o.backend + ":1"}));
  }
  // The model, through replica a.
  std::string model;
  {
    auto stub = kiln::v1::ModelService::NewStub(Channel(*replicas[0]));
    auto st = Upload(*stub, o.model, ReadBytes(std::string(KILN_TEST_DATA) + "/conv-cases/" + o.model + ".onnx"), &model);
    if (!st.ok()) Die("upload " + o.model + ": " + st.error_message());
  }
  std::vector<std::unique_ptr<kiln::v1::JobService::Stub>> stubs;
  for (auto& r : replicas) stubs.push_back(kiln::v1::JobService::NewStub(Channel(*r)));
  pqxx::connection db(*url);

  // Warm-up (not measured): every worker loads the model, plans it, opens its connections.
  for (int i = 0; i < 4 * w; ++i) {
    std::string id;
    auto st = Submit(*stubs[static_cast<size_t>(i % 2)], model, o.backend, "warm", "warm", &id);
    if (!st.ok()) Die("submit: " + st.error_message());
  }
  if (!WaitEnded(db, "warm", 4 * w, std::chrono::seconds(300))) Die("warm-up jobs did not end");

  // The burst: every client submits its share back to back.
  const auto t0 = Clock::now();
  std::atomic<int> failed{0};
  std::vector<std::thread> threads;
  for (int c = 0; c < o.clients; ++c) {
    threads.emplace_back([&, c] {
      auto stub = kiln::v1::JobService::NewStub(Channel(*replicas[static_cast<size_t>(c % 2)]));
      const int mine = o.jobs / o.clients + (c < o.jobs % o.clients ? 1 : 0);
      for (int i = 0; i < mine; ++i) {
        std::string id;
        auto st = Submit(*stub, model, o.backend, "client-" + std::to_string(c), "burst", &id);
        if (!st.ok()) {
          std::fprintf(stderr, "submit: %s\n", st.error_message().c_str());
          ++failed;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  if (failed > 0) Die(std::to_string(failed.load()) + " submissions failed");
  if (!WaitEnded(db, "burst", o.jobs, std::chrono::seconds(900))) Die("the burst's jobs did not end in 900 s");
  const double client_s = std::chrono::duration<double>(Clock::now() - t0).count();
  f.load = LoadAverage();
  {
    const auto jobs = Jobs(*url, "burst");
    int64_t first = INT64_MAX, last = 0;
    std::vector<double> wait, run;
    for (const auto& j : jobs) {
      first = std::min(first, j.created);
      last = std::max(last, j.finished);
      wait.push_back(static_cast<double>(j.started - j.created));
      run.push_back(static_cast<double>(j.finished - j.started));
      f.not_succeeded += j.state != 3;
    }
    f.jobs_per_s = static_cast<double>(jobs.size()) / (static_cast<double>(last - first) / 1e3);
    f.client_jobs_per_s = static_cast<double>(jobs.size()) / client_s;
    f.wait_p50 = Percentile(wait, 50);
    f.wait_p99 = Percentile(wait, 99);
    f.run_p50 = Percentile(run, 50);
  }

  // Claim latency on an idle farm: one job at a time.
  for (int i = 0; i < o.idle; ++i) {
    std::string id;
    auto st = Submit(*stubs[static_cast<size_t>(i % 2)], model, o.backend, "idle", "idle", &id);
    if (!st.ok()) Die("submit: " + st.error_message());
    if (!WaitEnded(db, "idle", i + 1, std::chrono::seconds(120))) Die("an idle-farm job did not end");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // every worker back to waiting
  }
  {
    std::vector<double> claim;
    for (const auto& j : Jobs(*url, "idle")) {
      claim.push_back(static_cast<double>(j.started - j.created));
      f.not_succeeded += j.state != 3;
    }
    f.claim_p50 = Percentile(claim, 50);
    f.claim_p99 = Percentile(claim, 99);
    f.claim_max = Percentile(claim, 100);
  }

  // Farm metrics: each worker's counters and jobs, lease expiries.
  {
    pqxx::work tx(db);
    f.retried = tx.exec1("SELECT count(*) FROM kiln_job_queue WHERE attempt > 1")[0].as<int>();
    std::map<std::string, int> ran;
    for (const auto& r : tx.exec("SELECT worker, count(*) FROM kiln_job_queue WHERE state = 3 GROUP BY worker")) {
      ran[r[0].as<std::string>()] = r[1].as<int>();
    }
    // Queue entries carry the worker's name (host/pid): match by pid.
    for (size_t i = 0; i < workers.size(); ++i) {
      auto m = Scrape(workers[i]->metrics_address());
      int jobs = 0;
      const std::string pid = "/" + std::to_string(workers[i]->pid());
      for (const auto& [name, n] : ran) {
        if (name.size() >= pid.size() && name.compare(name.size() - pid.size(), pid.size(), pid) == 0) jobs += n;
      }
      char line[512];
      std::snprintf(line, sizeof line,
                    "  w%zu: jobs %4d  late_results %g  leases_lost %g  attempts succeeded %g failed %g "
                    "cancelled %g interrupted %g",
                    i + 1, jobs, Sum(m, "kiln_job_late_results_total"), Sum(m, "kiln_job_leases_lost_total"),
                    m["kiln_job_attempts_total{result=\"succeeded\"}"], m["kiln_job_attempts_total{result=\"failed\"}"],
                    m["kiln_job_attempts_total{result=\"cancelled\"}"],
                    m["kiln_job_attempts_total{result=\"interrupted\"}"]);
      f.worker_lines.push_back(line);
    }
  }
  for (auto& k : workers) {
    if (int rc = k->Stop(); rc != 0) std::fprintf(stderr, "a worker exited %d (log in %s)\n", rc, d.c_str());
  }
  for (auto& k : replicas) {
    if (int rc = k->Stop(); rc != 0) std::fprintf(stderr, "a replica exited %d (log in %s)\n", rc, d.c_str());
  }
  return f;
}

struct StoreFigures {
  double upload = 0, compile = 0;
};

StoreFigures MeasureStore(const KilndProcess& k, const std::string& mnist, int n) {
  auto channel = Channel(k);
  auto models = kiln::v1::ModelService::NewStub(channel);
  auto compiler = kiln::v1::CompileService::NewStub(channel);
  StoreFigures f;
  std::vector<double> t;
  for (int i = 0; i < n + 1; ++i) {
    const auto a = Clock::now();
    std::string id;
    auto st = Upload(*models, "mnist", mnist, &id);
    const double s = std::chrono::duration<double>(Clock::now() - a).count();
    if (!st.ok()) Die("upload mnist: " + st.error_message());
    if (i > 0) t.push_back(s);
    if (i < n) {  // delete it, so the next upload stores the bytes again; the last one stays
      grpc::ClientContext ctx;
      kiln::v1::DeleteModelRequest req;
      req.set_model_id(id);
      kiln::v1::DeleteModelResponse resp;
      auto ds = models->DeleteModel(&ctx, req, &resp);
      if (!ds.ok()) Die("delete mnist: " + ds.error_message());
    }
  }
  f.upload = Median(t);
  kiln::v1::CompileAi8xRequest req;
  req.set_model_id("mnist");
  req.mutable_options()->set_arch("ai85net5");
  req.mutable_options()->set_dataset("MNIST");
  t.clear();
  for (int i = 0; i < n + 1; ++i) {
    grpc::ClientContext ctx;
    kiln::v1::CompileAi8xResponse resp;
    const auto a = Clock::now();
    grpc::Status st = compiler->CompileAi8x(&ctx, req, &resp);
    const double s = std::chrono::duration<double>(Clock::now() - a).count();
    if (!st.ok() || !resp.ok()) Die("compile: " + st.error_message());
    if (resp.cache_hit()) Die("compile: a cache hit with --compile-cache-bytes 0");
    if (i > 0) t.push_back(s);  // the first one warms the process (and fills the blob cache)
  }
  f.compile = Median(t);
  return f;
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
    else if (a == "--idle") o.idle = std::max(1, std::atoi(next().c_str()));
    else if (a == "--compile-n") o.compile_n = std::max(3, std::atoi(next().c_str()));
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

  std::vector<FarmFigures> farm;
  if (o.farm) {
    std::printf("\nfarm: 2 replicas, workers `--role worker --devices %s:1`, model %s; %d jobs from %d client threads "
                "through both replicas; claim latency: %d jobs one at a time on the idle farm\n",
                o.backend.c_str(), o.model.c_str(), o.jobs, o.clients, o.idle);
    std::fflush(stdout);
    for (int w : o.workers) {
      farm.push_back(MeasureFarm(**pg, o, w, dir));
      const auto& f = farm.back();
      std::printf("workers %d: %7.1f jobs/s (client-observed %7.1f)  queue wait p50 %6.0f ms p99 %6.0f ms  "
                  "run p50 %4.0f ms  idle claim latency p50 %4.0f ms p99 %4.0f ms max %4.0f ms  "
                  "not succeeded %d  lease expiries (attempt > 1) %d  load %.2f\n",
                  w, f.jobs_per_s, f.client_jobs_per_s, f.wait_p50, f.wait_p99, f.run_p50, f.claim_p50, f.claim_p99,
                  f.claim_max, f.not_succeeded, f.retried, f.load);
      for (const auto& l : f.worker_lines) std::printf("%s\n", l.c_str());
      std::fflush(stdout);
    }
    const FarmFigures* one = nullptr;
    for (const auto& f : farm) {
      if (f.workers == 1) one = &f;
    }
    if (one != nullptr) {
      for (const auto& f : farm) {
        if (f.workers != 1) {
          std::printf("scaling %d workers / 1: %.2fx (jobs/s; ideal %d.00x; %u cores shared by PostgreSQL, "
                      "2 replicas, the workers and this client)\n",
                      f.workers, f.jobs_per_s / one->jobs_per_s, f.workers, cores);
        }
      }
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
      KilndProcess k(KILND_BINARY, args("embedded"), (dir / "embedded.log").string());
      embedded = MeasureStore(k, mnist, o.compile_n);
    }
    {
      KilndProcess k(KILND_BINARY, args("shared"), (dir / "shared.log").string(), {"KILN_DATABASE=" + *url});
      shared = MeasureStore(k, mnist, o.compile_n);
    }
    std::printf("\ndatabase vs embedded: median of %d, one kilnd each, --compile-cache-bytes 0 (every compile runs), "
                "blob cache at its default; load %.2f\n",
                o.compile_n, LoadAverage());
    std::printf("%-40s %12s %12s %8s\n", "", "embedded", "database", "ratio");
    auto row = [](const char* what, double e, double d, const char* target) {
      std::printf("%-40s %9.2f ms %9.2f ms %7.2fx %s\n", what, e * 1e3, d * 1e3, d / e, target);
    };
    row("upload mnist-ai85net5 (deleted between)", embedded.upload, shared.upload, "");
    row("CompileAi8x of the stored mnist-ai85net5", embedded.compile, shared.compile,
        shared.compile / embedded.compile <= 1.5 ? "(target <= 1.5x: met)" : "(target <= 1.5x: NOT met)");
  }
  if (o.keep.empty()) fs::remove_all(dir);
  return 0;
}
