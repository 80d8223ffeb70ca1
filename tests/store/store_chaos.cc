// Chaos suite of the model store, against the real kilnd binary on loopback (README, "Chaos
// tests"). Two modes:
//
//   store_chaos --kills N [--seed S]   kill -9 kilnd N times while 3 clients upload, delete and
//                                      run models, restarting it on the same store each time;
//   store_chaos --disk-full            kilnd on a 64 MiB tmpfs: fill it through uploads, then
//                                      fill the rest with a file, delete by name (the model
//                                      keeping other names), by last name and by id, kill -9.
//
// After every attack it asserts: nothing acknowledged is lost (each acknowledged upload is
// listed under its name with bytes that hash to its id, each acknowledged delete stays deleted),
// nothing partial is visible (every listed model reads back to bytes that hash to its id and is
// one this client sent; tmp/ is empty after start-up), and kilnd answers health within 5 s of the
// attack ending. Exit 0 = passed, 1 = failed, 77 = skipped (ctest SKIP_RETURN_CODE): the tmpfs
// can be mounted neither as root nor inside `unshare --mount --map-root-user`; with
// KILN_REQUIRE_TMPFS=1 (set by .ci/run) that is a failure instead.
#include <grpcpp/grpcpp.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/statvfs.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "common/sha256.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "kiln/v1/device.grpc.pb.h"
#include "kiln/v1/model.grpc.pb.h"
#include "tests/server/kilnd_process.h"
#include "tests/server/kilnd_test_util.h"
#include "tests/server/kilnd_test_util.h"
#include "tests/server/onnx_bytes.h"

namespace fs = std::filesystem;
using namespace kiln;
using namespace kiln::testing;
using Clock = std::chrono::steady_clock;

namespace {

int g_failures = 0;
#define CHECK_OR_FAIL(cond, ...)                       \
  do {                                                 \
    if (!(cond)) {                                     \
      std::fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
      std::fprintf(stderr, __VA_ARGS__);               \
      std::fprintf(stderr, "\n");                      \
      ++g_failures;                                    \
    }                                                  \
  } while (0)

// What the clients know: acknowledged models and deletes, and what was in flight at the kill.
struct Ledger {
  std::mutex mu;
  std::map<std::string, std::string> acked;          // id -> name
  std::set<std::string> deleted;                     // acknowledged deletes
  std::map<std::string, std::string> maybe_stored;   // upload in flight at the kill: id -> name
  std::set<std::string> maybe_deleted;               // delete in flight at the kill
  std::map<std::string, size_t> sizes;               // every id ever sent -> size
  uint64_t uploads_acked = 0, deletes_acked = 0;
};

std::shared_ptr<grpc::Channel> Channel(const KilndProcess& k) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  return grpc::CreateCustomChannel(k.grpc_address(), grpc::InsecureChannelCredentials(), args);
}

// Starts kilnd and waits for health; fails the run if health takes more than 5 s.
std::unique_ptr<KilndProcess> StartAndWaitHealthy(const fs::path& dir, const std::vector<std::string>& extra) {
  auto start = Clock::now();
  std::vector<std::string> args = {"--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
                                   "--data-dir", (dir / "data").string(), "--shutdown-grace", "1",
                                   "--devices", "reference:1"};
  args.insert(args.end(), extra.begin(), extra.end());
  std::unique_ptr<KilndProcess> k;
  try {
    k = std::make_unique<KilndProcess>(KILND_BINARY, args, (dir / "kilnd.log").string());
  } catch (const std::exception& e) {
    CHECK_OR_FAIL(false, "kilnd did not start: %s (log: %s)", e.what(), (dir / "kilnd.log").c_str());
    return nullptr;
  }
  auto health = grpc::health::v1::Health::NewStub(Channel(*k));
  bool ok = false;
  while (!ok && Clock::now() - start < std::chrono::seconds(5)) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
    grpc::health::v1::HealthCheckResponse resp;
    ok = health->Check(&ctx, {}, &resp).ok() && resp.status() == grpc::health::v1::HealthCheckResponse::SERVING;
  }
  double s = std::chrono::duration<double>(Clock::now() - start).count();
  CHECK_OR_FAIL(ok, "kilnd did not answer health within 5 s of the attack (%.2f s)", s);
  return k;
}

std::map<std::string, std::vector<std::string>> ListAll(kiln::v1::ModelService::Stub& stub, bool* ok) {
  std::map<std::string, std::vector<std::string>> out;
  kiln::v1::ListModelsRequest req;
  *ok = true;
  do {
    grpc::ClientContext ctx;
    kiln::v1::ListModelsResponse resp;
    grpc::Status st = stub.ListModels(&ctx, req, &resp);
    if (!st.ok()) {
      *ok = false;
      return out;
    }
    for (const auto& m : resp.models()) out[m.model_id()] = {m.names().begin(), m.names().end()};
    req.set_page_token(resp.next_page_token());
  } while (!req.page_token().empty());
  return out;
}

std::string ReadAll(kiln::v1::ModelService::Stub& stub, const std::string& id, grpc::Status* st) {
  grpc::ClientContext ctx;
  kiln::v1::ReadModelRequest req;
  req.set_model_id(id);
  auto reader = stub.ReadModel(&ctx, req);
  kiln::v1::ReadModelResponse resp;
  std::string out;
  while (reader->Read(&resp)) out += resp.chunk();
  *st = reader->Finish();
  return out;
}

// The checks after an attack; reconciles the in-flight operations with what survived.
void Verify(kiln::v1::ModelService::Stub& stub, const fs::path& dir, Ledger& L, bool check_tmp) {
  if (check_tmp) {
    size_t tmp_files = 0;
    std::error_code ec;
    for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir / "data" / "tmp", ec)) ++tmp_files;
    CHECK_OR_FAIL(tmp_files == 0, "%zu partial files left in tmp/ after start-up", tmp_files);
  }
  bool ok = false;
  auto listed = ListAll(stub, &ok);
  CHECK_OR_FAIL(ok, "ListModels failed after restart");
  std::lock_guard<std::mutex> lock(L.mu);
  for (const auto& [id, name] : L.acked) {
    auto it = listed.find(id);
    if (it == listed.end()) {
      if (L.maybe_deleted.count(id)) continue;
      CHECK_OR_FAIL(false, "acknowledged upload %s (%s) lost", id.c_str(), name.c_str());
      continue;
    }
    CHECK_OR_FAIL(std::find(it->second.begin(), it->second.end(), name) != it->second.end(),
                  "acknowledged upload %s lost its name %s", id.c_str(), name.c_str());
  }
  for (const auto& id : L.deleted) CHECK_OR_FAIL(!listed.count(id), "acknowledged delete of %s undone", id.c_str());
  for (const auto& [id, names] : listed) {
    CHECK_OR_FAIL(L.sizes.count(id) > 0, "model %s was never sent by this client", id.c_str());
    grpc::Status st;
    std::string bytes = ReadAll(stub, id, &st);
    CHECK_OR_FAIL(st.ok() && Sha256Hex(bytes) == id && bytes.size() == L.sizes[id],
                  "model %s reads back partial or wrong (%zu bytes, status %d: %s)", id.c_str(), bytes.size(),
                  static_cast<int>(st.error_code()), st.error_message().c_str());
  }
  // Reconcile: what was in flight either happened or did not.
  for (const auto& [id, name] : L.maybe_stored) {
    if (listed.count(id)) L.acked[id] = name;
  }
  for (const auto& id : L.maybe_deleted) {
    if (!listed.count(id)) {
      L.acked.erase(id);
      L.deleted.insert(id);
    }
  }
  L.maybe_stored.clear();
  L.maybe_deleted.clear();
}

// One client: uploads (sizes from 100 B to 1.5 MiB, so some span several chunks), deletes by
// id, and conv runs, until `stop` or kilnd goes away.
void Client(const KilndProcess& k, Ledger& L, std::atomic<bool>& stop, uint32_t seed, std::atomic<uint32_t>& next_model) {
  auto channel = Channel(k);
  auto models = kiln::v1::ModelService::NewStub(channel);
  auto device = kiln::v1::DeviceService::NewStub(channel);
  std::mt19937 rng(seed);
  while (!stop) {
    int op = static_cast<int>(rng() % 100);
    size_t acked_count;
    {
      std::lock_guard<std::mutex> lock(L.mu);
      acked_count = L.acked.size();
    }
    if ((op < 55 && acked_count <= 40) || acked_count == 0) {
      uint32_t n = next_model.fetch_add(1);
      size_t size = rng() % 10 == 0 ? (1u << 20) + 512 * 1024 : 100 + rng() % 20000;
      std::string bytes = MakeOnnxBytes(size, n + 1);
      std::string id = Sha256Hex(bytes), name = "c" + std::to_string(n);
      {
        std::lock_guard<std::mutex> lock(L.mu);
        L.sizes[id] = bytes.size();
        L.maybe_stored[id] = name;
      }
      kiln::v1::UploadModelResponse resp;
      grpc::Status st = UploadBytes(*models, name, bytes, &resp);
      std::lock_guard<std::mutex> lock(L.mu);
      if (st.ok()) {
        L.maybe_stored.erase(id);
        L.acked[id] = name;
        ++L.uploads_acked;
      } else if (st.error_code() != grpc::StatusCode::UNAVAILABLE && st.error_code() != grpc::StatusCode::CANCELLED &&
                 st.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED) {
        L.maybe_stored.erase(id);  // refused: never stored
      }
    } else if (op < 85) {
      std::string id;
      {
        std::lock_guard<std::mutex> lock(L.mu);
        auto it = L.acked.begin();
        std::advance(it, rng() % L.acked.size());
        id = it->first;
        if (L.maybe_deleted.count(id)) continue;
        L.maybe_deleted.insert(id);
      }
      grpc::ClientContext ctx;
      kiln::v1::DeleteModelRequest req;
      req.set_model_id(id);
      kiln::v1::DeleteModelResponse resp;
      grpc::Status st = models->DeleteModel(&ctx, req, &resp);
      std::lock_guard<std::mutex> lock(L.mu);
      if (st.ok()) {
        L.maybe_deleted.erase(id);
        L.acked.erase(id);
        L.deleted.insert(id);
        ++L.deletes_acked;
      } else if (st.error_code() == grpc::StatusCode::NOT_FOUND) {
        L.maybe_deleted.erase(id);  // another client deleted it first
      }
    } else {
      std::string id;
      {
        std::lock_guard<std::mutex> lock(L.mu);
        id = L.acked.begin()->first;
      }
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
      kiln::v1::RunConvLayersRequest req;
      req.set_model_id(id);
      req.set_backend("reference");
      req.set_omit_outputs(true);
      kiln::v1::RunConvLayersResponse resp;
      device->RunConvLayers(&ctx, req, &resp);  // any answer: the point is kill -9 mid-run
    }
  }
}

int KillLoop(int kills, uint32_t seed) {
  fs::path dir = fs::temp_directory_path() / ("kiln-chaos-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  Ledger L;
  std::mt19937 rng(seed);
  std::atomic<uint32_t> next_model{seed * 100000u};
  auto start = Clock::now();
  for (int i = 0; i < kills && g_failures == 0; ++i) {
    auto k = StartAndWaitHealthy(dir, {});
    if (!k) break;
    auto stub = kiln::v1::ModelService::NewStub(Channel(*k));
    Verify(*stub, dir, L, /*check_tmp=*/true);
    std::atomic<bool> stop{false};
    std::vector<std::thread> clients;
    for (int c = 0; c < 3; ++c) clients.emplace_back(Client, std::cref(*k), std::ref(L), std::ref(stop), rng(), std::ref(next_model));
    std::this_thread::sleep_for(std::chrono::milliseconds(30 + rng() % 250));
    ::kill(k->pid(), SIGKILL);
    k->Stop(SIGKILL);  // reaps it
    stop = true;
    for (auto& t : clients) t.join();
  }
  // Final restart: the state after the last kill.
  if (g_failures == 0) {
    auto k = StartAndWaitHealthy(dir, {});
    if (k) {
      auto stub = kiln::v1::ModelService::NewStub(Channel(*k));
      Verify(*stub, dir, L, true);
      k->Stop();
    }
  }
  double s = std::chrono::duration<double>(Clock::now() - start).count();
  std::printf("store_chaos: %d kills in %.1f s; %llu uploads and %llu deletes acknowledged; %zu models at the end; "
              "%d failures\n", kills, s, static_cast<unsigned long long>(L.uploads_acked),
              static_cast<unsigned long long>(L.deletes_acked), L.acked.size(), g_failures);
  if (g_failures == 0) fs::remove_all(dir);
  else std::fprintf(stderr, "store_chaos: left %s for inspection\n", dir.c_str());
  return g_failures == 0 ? 0 : 1;
}

// ------------------------------------------------------------------------------------------
// Disk full

int Skip(const std::string& why) {
  if (const char* req = std::getenv("KILN_REQUIRE_TMPFS"); req && std::string(req) == "1") {
    std::fprintf(stderr, "store_chaos --disk-full: cannot mount the 64 MiB tmpfs (%s) and KILN_REQUIRE_TMPFS=1\n",
                 why.c_str());
    return 1;
  }
  std::printf("SKIPPED store_chaos --disk-full: %s\n", why.c_str());
  return 77;
}

int DiskFull() {
  fs::path dir = fs::temp_directory_path() / ("kiln-diskfull-" + std::to_string(::getpid()));
  fs::create_directories(dir / "data");
  // As root: a private mount namespace of this process too, so the tmpfs never outlives it.
  if (::unshare(CLONE_NEWNS) == 0) ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr);
  if (::mount("tmpfs", (dir / "data").c_str(), "tmpfs", MS_NOSUID | MS_NODEV, "size=64m") != 0) {
    return Skip(std::string("mount(tmpfs): ") + std::strerror(errno));
  }
  Ledger L;
  auto k = StartAndWaitHealthy(dir, {"--max-store-bytes", "0"});
  if (!k) {
    ::umount2((dir / "data").c_str(), MNT_DETACH);
    return 1;
  }
  auto stub = kiln::v1::ModelService::NewStub(Channel(*k));
  // 1. Fill the file system through uploads: the first refusal must be RESOURCE_EXHAUSTED.
  grpc::Status refused;
  for (int i = 0; i < 40; ++i) {
    std::string bytes = MakeOnnxBytes(4 << 20, 1000 + i);
    std::string id = Sha256Hex(bytes);
    L.sizes[id] = bytes.size();
    kiln::v1::UploadModelResponse resp;
    grpc::Status st = UploadBytes(*stub, "full" + std::to_string(i), bytes, &resp);
    if (!st.ok()) {
      refused = st;
      break;
    }
    L.acked[id] = "full" + std::to_string(i);
    if (i == 0) {
      // Two more names for the first model, removed by name on the full disk below (step 3).
      for (const char* alias : {"alias-a", "alias-b", "alias-c"}) {
        grpc::Status ast = UploadBytes(*stub, alias, bytes, &resp);
        CHECK_OR_FAIL(ast.ok() && resp.already_stored(), "naming the first model %s: %d %s", alias,
                      static_cast<int>(ast.error_code()), ast.error_message().c_str());
      }
    }
  }
  const std::string first_id = [&] {
    for (const auto& [id, name] : L.acked) if (name == "full0") return id;
    return std::string();
  }();
  CHECK_OR_FAIL(refused.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED,
                "upload on a full disk answered %d (%s), want RESOURCE_EXHAUSTED",
                static_cast<int>(refused.error_code()), refused.error_message().c_str());
  CHECK_OR_FAIL(!L.acked.empty(), "no upload fitted on the 64 MiB tmpfs");
  // The refusal is counted (store/model_store.h on_refused, server/daemon.cc).
  {
    auto m = ScrapeMetrics(k->metrics_address());
    CHECK_OR_FAIL(m["kiln_rejected_requests_total{reason=\"disk_full\"}"] >= 1,
                  "the disk-full refusal is not in kiln_rejected_requests_total{reason=\"disk_full\"}");
  }
  Verify(*stub, dir, L, false);
  // 2. Fill every remaining block, so that even the index rewrite cannot allocate.
  {
    std::ofstream filler(dir / "data" / "filler", std::ios::binary);
    std::string block(1 << 16, 'f');
    while (filler.write(block.data(), block.size()) && filler.flush()) {
    }
  }
  {
    std::ofstream filler(dir / "data" / "filler2", std::ios::binary);
    while (filler.put('f') && filler.flush()) {
    }
  }
  auto remove = [&](const std::string& id_or_name) {
    grpc::ClientContext dctx;
    kiln::v1::DeleteModelRequest del;
    del.set_model_id(id_or_name);
    kiln::v1::DeleteModelResponse dresp;
    return stub->DeleteModel(&dctx, del, &dresp);
  };
  auto resolve = [&](const std::string& name) {  // the model id a name points at, "" if none
    grpc::ClientContext ctx;
    kiln::v1::GetModelRequest q;
    q.set_model_id(name);
    kiln::v1::GetModelResponse r;
    return stub->GetModel(&ctx, q, &r).ok() ? r.model().model_id() : std::string();
  };
  auto free_bytes = [&] {
    struct statvfs v{};
    return ::statvfs((dir / "data").c_str(), &v) == 0 ? static_cast<uint64_t>(v.f_bavail) * v.f_frsize : ~0ull;
  };
  // Not one page left: without the reserve no index rewrite could be written now.
  CHECK_OR_FAIL(free_bytes() < 4096, "the tmpfs is not full: %llu bytes free",
                static_cast<unsigned long long>(free_bytes()));
  // 3. Deleting must work on the full disk, and free space for new uploads.
  //    a. By name, the model keeping its other names (frees nothing; the index rewrite uses the
  //       store's index.reserve, store/model_store.h), twice: the reserve is re-created between.
  for (const char* alias : {"alias-a", "alias-b"}) {
    grpc::Status st = remove(alias);
    CHECK_OR_FAIL(st.ok(), "deleting the name %s on a full disk: %d %s", alias, static_cast<int>(st.error_code()),
                  st.error_message().c_str());
    CHECK_OR_FAIL(resolve(alias).empty(), "the deleted name %s still resolves", alias);
  }
  CHECK_OR_FAIL(!first_id.empty() && resolve("full0") == first_id, "the model lost its remaining name full0");
  // Under the reserve's 64 KiB: it was re-created after each of them.
  const uint64_t free_after_names = free_bytes();
  CHECK_OR_FAIL(free_after_names < (64u << 10), "the name deletes left %llu bytes free (the reserve was not re-created)",
                static_cast<unsigned long long>(free_after_names));
  //    a'. Without a reserve (removed behind kilnd's back, its room filled): a clear refusal
  //       that names what does free space, and nothing changes.
  {
    fs::remove(dir / "data" / "index.reserve");
    std::ofstream filler(dir / "data" / "filler3", std::ios::binary);
    while (filler.put('f') && filler.flush()) {
    }
  }
  {
    const double refused_before = ScrapeMetrics(k->metrics_address())["kiln_rejected_requests_total{reason=\"disk_full\"}"];
    grpc::Status st = remove("alias-c");
    CHECK_OR_FAIL(ScrapeMetrics(k->metrics_address())["kiln_rejected_requests_total{reason=\"disk_full\"}"] ==
                      refused_before + 1,
                  "the refused name delete is not counted as reason disk_full");
    CHECK_OR_FAIL(st.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED &&
                      st.error_message().find("delete the model by its id") != std::string::npos &&
                      st.error_message().find(first_id) != std::string::npos,
                  "deleting a name on a full disk without reserve: %d %s, want RESOURCE_EXHAUSTED naming the "
                  "model id to delete", static_cast<int>(st.error_code()), st.error_message().c_str());
    CHECK_OR_FAIL(resolve("alias-c") == first_id, "a refused name delete changed the name");
  }
  //    b. By its last name: the model goes, and its space with it.
  std::string by_name_id;
  for (const auto& [id, name] : L.acked) {
    if (name == "full1") by_name_id = id;
  }
  if (!by_name_id.empty()) {
    grpc::Status st = remove("full1");
    CHECK_OR_FAIL(st.ok(), "deleting the last name full1 on a full disk: %d %s", static_cast<int>(st.error_code()),
                  st.error_message().c_str());
    if (st.ok()) {
      L.acked.erase(by_name_id);
      L.deleted.insert(by_name_id);
    }
  }
  //    c. By id.
  std::string victim;
  for (const auto& [id, name] : L.acked) {
    if (id != first_id) victim = id;
  }
  grpc::Status st = remove(victim);
  CHECK_OR_FAIL(st.ok(), "DeleteModel on a full disk: %d %s", static_cast<int>(st.error_code()), st.error_message().c_str());
  if (st.ok()) {
    L.acked.erase(victim);
    L.deleted.insert(victim);
  }
  Verify(*stub, dir, L, false);
  {
    std::error_code ec;
    const auto reserve = fs::file_size(dir / "data" / "index.reserve", ec);
    CHECK_OR_FAIL(!ec && reserve >= (64u << 10), "index.reserve was not re-created once space was freed (%s)",
                  ec ? ec.message().c_str() : std::to_string(reserve).c_str());
  }
  std::string small = MakeOnnxBytes(1000, 7);
  L.sizes[Sha256Hex(small)] = small.size();
  kiln::v1::UploadModelResponse resp;
  st = UploadBytes(*stub, "after-delete", small, &resp);
  CHECK_OR_FAIL(st.ok(), "upload after freeing space: %d %s", static_cast<int>(st.error_code()), st.error_message().c_str());
  if (st.ok()) L.acked[Sha256Hex(small)] = "after-delete";
  // 4. kill -9 on the full disk, restart: nothing acknowledged lost, nothing partial.
  ::kill(k->pid(), SIGKILL);
  k->Stop(SIGKILL);
  k = StartAndWaitHealthy(dir, {"--max-store-bytes", "0"});
  if (k) {
    stub = kiln::v1::ModelService::NewStub(Channel(*k));
    Verify(*stub, dir, L, true);
    // The acknowledged name deletes stay done.
    CHECK_OR_FAIL(resolve("alias-a").empty() && resolve("alias-b").empty(), "a deleted name is back after restart");
    CHECK_OR_FAIL(resolve("full0") == first_id && resolve("alias-c") == first_id,
                  "full0 or alias-c no longer names the first model after restart");
    k->Stop();
  }
  k.reset();
  ::umount2((dir / "data").c_str(), MNT_DETACH);
  std::printf("store_chaos --disk-full: %zu models filled the tmpfs; refusal: %s; %llu bytes free after two "
              "name deletes on the full disk; %d failures\n", L.acked.size(), refused.error_message().c_str(),
              static_cast<unsigned long long>(free_after_names), g_failures);
  if (g_failures == 0) fs::remove_all(dir);
  return g_failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  int kills = 0;
  uint32_t seed = 1;
  bool disk_full = false, in_namespace = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--kills" && i + 1 < argc) kills = std::atoi(argv[++i]);
    else if (a == "--seed" && i + 1 < argc) seed = static_cast<uint32_t>(std::atoi(argv[++i]));
    else if (a == "--disk-full") disk_full = true;
    else if (a == "--in-namespace") in_namespace = true;
    else {
      std::fprintf(stderr, "usage: store_chaos --kills N [--seed S] | --disk-full\n");
      return 2;
    }
  }
  if (!disk_full) return KillLoop(kills, seed);
  if (::geteuid() == 0 || in_namespace) return DiskFull();
  // Not root: a private mount namespace where this process is root (no privilege on the host).
  std::string self = fs::read_symlink("/proc/self/exe").string();
  std::string cmd = "unshare --mount --map-root-user " + self + " --disk-full --in-namespace";
  int st = std::system(cmd.c_str());
  if (!WIFEXITED(st)) return 1;
  int code = WEXITSTATUS(st);
  if (code == 1 && std::system("unshare --mount --map-root-user true >/dev/null 2>&1") != 0) {
    return Skip("not root, and `unshare --mount --map-root-user` is refused (user namespaces disabled)");
  }
  return code;
}
