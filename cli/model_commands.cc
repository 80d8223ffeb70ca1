#include "cli/model_commands.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/options.h"
#include "common/sha256.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "kiln/v1/model.grpc.pb.h"

namespace kiln::cli {
namespace {

constexpr size_t kChunk = 1u << 20;

int Fail(const std::string& what, const std::string& why) {
  std::cerr << "kiln: " << what << ": " << why << "\n";
  return 1;
}

// Progress on stderr: a redrawn bar on a terminal, plain "NN%" lines every 10% otherwise.
class Progress {
 public:
  explicit Progress(uint64_t total) : total_(total), tty_(isatty(STDERR_FILENO)) {}
  void Update(uint64_t done) {
    int pct = total_ ? static_cast<int>(done * 100 / total_) : 100;
    if (tty_) {
      int filled = pct * 30 / 100;
      std::fprintf(stderr, "\r[%.*s%*s] %3d%% %.1f/%.1f MiB", filled,
                   "##############################", 30 - filled, "", pct, done / 1048576.0,
                   total_ / 1048576.0);
      if (done >= total_) std::fputc('\n', stderr);
    } else if (pct / 10 > last_ / 10 || (done >= total_ && last_ < 100)) {
      std::fprintf(stderr, "upload %d%%\n", pct);
    }
    last_ = pct;
  }

 private:
  uint64_t total_;
  bool tty_;
  int last_ = -1;
};

void PrintModel(const kiln::v1::Model& m) {
  std::cout << "model_id: " << m.model_id() << "\n";
  std::cout << "names: ";
  for (int i = 0; i < m.names_size(); ++i) std::cout << (i ? ", " : "") << m.names(i);
  std::cout << "\nsize_bytes: " << m.size_bytes() << "\nopset: " << m.opset()
            << "\nnode_count: " << m.node_count() << "\ninputs: ";
  for (int i = 0; i < m.inputs_size(); ++i) std::cout << (i ? ", " : "") << m.inputs(i);
  std::cout << "\noutputs: ";
  for (int i = 0; i < m.outputs_size(); ++i) std::cout << (i ? ", " : "") << m.outputs(i);
  std::cout << "\nproducer: " << m.producer_name() << "\n";
}

// `kiln model --json` / one entry of `kiln models --json` (docs/cli-json.md kiln.model/1).
nlohmann::ordered_json ModelJson(const kiln::v1::Model& m) {
  nlohmann::ordered_json j;
  j["model_id"] = m.model_id();
  j["names"] = std::vector<std::string>(m.names().begin(), m.names().end());
  j["size_bytes"] = m.size_bytes();
  j["opset"] = m.opset();
  j["node_count"] = m.node_count();
  j["inputs"] = std::vector<std::string>(m.inputs().begin(), m.inputs().end());
  j["outputs"] = std::vector<std::string>(m.outputs().begin(), m.outputs().end());
  j["producer_name"] = m.producer_name();
  j["created_unix_seconds"] = m.created_unix_seconds();
  return j;
}

int ListModels(const ClientOptions& options, bool json) {
  kiln::v1::ListModelsRequest request;  // every page (kiln/v1/model.proto, ListModelsRequest)
  nlohmann::ordered_json models = nlohmann::ordered_json::array();
  bool header = false;  // printed with the first answer: a failed call prints only the error
  do {
    kiln::v1::ListModelsResponse response;
    grpc::Status st = CallUnary(options, &kiln::v1::ModelService::Stub::ListModels, request, &response);
    if (!st.ok()) return Fail("models", Describe(st));
    if (!json && !header) {
      std::printf("%-64s  %12s  %5s  %5s  %s\n", "MODEL_ID", "SIZE_BYTES", "OPSET", "NODES", "NAMES");
      header = true;
    }
    for (const auto& m : response.models()) {
      if (json) {
        models.push_back(ModelJson(m));
        continue;
      }
      std::string names;
      for (int i = 0; i < m.names_size(); ++i) names += (i ? "," : "") + m.names(i);
      std::printf("%-64s  %12llu  %5lld  %5lld  %s\n", m.model_id().c_str(),
                  static_cast<unsigned long long>(m.size_bytes()), static_cast<long long>(m.opset()),
                  static_cast<long long>(m.node_count()), names.c_str());
    }
    request.set_page_token(response.next_page_token());
  } while (!request.page_token().empty());
  if (json) {
    nlohmann::ordered_json j;
    j["schema"] = "kiln.models/1";
    j["models"] = std::move(models);
    std::cout << j.dump(2) << "\n";
  }
  return 0;
}

int GetModel(const ClientOptions& options, const std::string& id, bool json) {
  kiln::v1::GetModelRequest req;
  req.set_model_id(id);
  kiln::v1::GetModelResponse response;
  grpc::Status st = CallUnary(options, &kiln::v1::ModelService::Stub::GetModel, req, &response);
  if (!st.ok()) return Fail("model " + id, Describe(st));
  if (json) {
    nlohmann::ordered_json j;
    j["schema"] = "kiln.model/1";
    j.update(ModelJson(response.model()));
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  PrintModel(response.model());
  return 0;
}

int DeleteModel(const ClientOptions& options, const std::string& id) {
  kiln::v1::DeleteModelRequest req;
  req.set_model_id(id);
  kiln::v1::DeleteModelResponse response;
  grpc::Status st = CallUnary(options, &kiln::v1::ModelService::Stub::DeleteModel, req, &response);
  if (!st.ok()) return Fail("rm " + id, Describe(st));
  std::cout << "deleted " << id << "\n";
  return 0;
}

int Health(const ClientOptions& options, const std::string& service) {
  ClientOptions o = options;
  if (o.timeout_seconds <= 0) o.timeout_seconds = 5;
  grpc::health::v1::HealthCheckRequest req;
  req.set_service(service);
  grpc::health::v1::HealthCheckResponse response;
  grpc::Status st = CallUnary(o, &grpc::health::v1::Health::Stub::Check, req, &response);
  if (!st.ok()) return Fail("health", Describe(st));
  std::cout << grpc::health::v1::HealthCheckResponse::ServingStatus_Name(response.status()) << "\n";
  return response.status() == grpc::health::v1::HealthCheckResponse::SERVING ? 0 : 1;
}

int Upload(const ClientOptions& options, const std::string& path, const std::string& name) {
  auto id = UploadFile(options, path, name);
  if (!id.ok()) return Fail("upload " + path, id.status().message());
  std::cout << *id << "\n";
  return 0;
}

}  // namespace

std::string StoredName(const std::string& path, const std::string& name) {
  return name.empty() ? std::filesystem::path(path).stem().string() : name;
}

Result<std::string> UploadFile(const ClientOptions& options, const std::string& path,
                               std::string name) {
  std::error_code exists_ec;
  if (!std::filesystem::exists(path, exists_ec)) return NotFound("no such file: " + path);  // as compile and run
  if (!std::filesystem::is_regular_file(path, exists_ec)) return InvalidArgument("not a regular file: " + path);
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("cannot open '" + path + "'");
  std::error_code ec;
  uint64_t size = std::filesystem::file_size(path, ec);
  if (ec) return NotFound("cannot stat '" + path + "': " + ec.message());
  name = StoredName(path, name);
  Sha256 hash;
  std::vector<char> buf(kChunk);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    hash.Update(buf.data(), static_cast<size_t>(in.gcount()));
  }
  std::string sha = hash.HexDigest();
  in.clear();
  in.seekg(0);

  auto channel = Connect(options);
  if (!channel.ok()) return channel.status();
  auto stub = kiln::v1::ModelService::NewStub(*channel);
  // Before any byte goes out: is the name valid, and are these bytes stored already?
  bool stored = false;
  {
    grpc::ClientContext lctx;
    Prepare(options, &lctx);
    kiln::v1::LookupModelRequest lreq;
    lreq.set_name(name);
    lreq.set_sha256(sha);
    kiln::v1::LookupModelResponse lresp;
    grpc::Status lst = stub->LookupModel(&lctx, lreq, &lresp);
    if (!lst.ok() && lst.error_code() != grpc::StatusCode::UNIMPLEMENTED) {  // UNIMPLEMENTED: older kilnd
      return Status(static_cast<StatusCode>(lst.error_code()), Describe(lst));
    }
    stored = lresp.has_by_sha256() && lresp.by_sha256().size_bytes() == size;
    if (stored && lresp.has_by_name() && lresp.by_name().model_id() == sha) {
      std::cerr << "already stored as '" << name << "' (" << sha.substr(0, 12) << "): nothing sent\n";
      return sha;
    }
  }
  grpc::ClientContext ctx;
  Prepare(options, &ctx);
  kiln::v1::UploadModelResponse response;
  auto writer = stub->UploadModel(&ctx, &response);
  kiln::v1::UploadModelRequest req;
  req.mutable_header()->set_name(name);
  req.mutable_header()->set_size_bytes(size);
  req.mutable_header()->set_sha256(sha);
  Progress progress(size);
  bool ok = writer->Write(req);
  uint64_t sent = 0;
  // Stored bytes: the header alone names them (kiln/v1/model.proto, UploadHeader.sha256).
  while (ok && !stored && sent < size) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    size_t n = static_cast<size_t>(in.gcount());
    if (n == 0) break;
    req.set_chunk(buf.data(), n);
    ok = writer->Write(req);
    sent += n;
    progress.Update(sent);
  }
  writer->WritesDone();
  grpc::Status st = writer->Finish();
  if (!st.ok()) return Status(static_cast<StatusCode>(st.error_code()), Describe(st));
  if (stored) {
    std::cerr << "bytes already stored (" << sha.substr(0, 12) << "): named '" << name << "', nothing re-sent\n";
  }
  if (!response.replaced_model_id().empty()) {
    std::cerr << "note: name '" << name << "' now points at " << response.model().model_id()
              << "; it pointed at " << response.replaced_model_id() << " before\n";
  }
  return response.model().model_id();
}

bool LooksLikePath(const std::string& arg) {
  return arg.find('/') != std::string::npos ||
         (arg.size() >= 5 && arg.compare(arg.size() - 5, 5, ".onnx") == 0);
}

Result<std::string> ModelRefForArg(const ClientOptions& options, const std::string& arg,
                                   const std::string& name) {
  if (std::filesystem::is_regular_file(arg)) {
    auto id = UploadFile(options, arg, name);
    if (!id.ok()) return Status(id.status().code(), "upload " + arg + ": " + id.status().message());
    return id;
  }
  if (LooksLikePath(arg)) {
    std::error_code ec;
    return std::filesystem::exists(arg, ec) ? InvalidArgument("not a regular file: " + arg)
                                            : NotFound("no such file: " + arg);
  }
  return arg;
}

void AddModelCommands(CLI::App& app, ClientOptions& options, int* exit_code) {
  auto* upload = app.add_subcommand("upload", "upload an ONNX model; prints its model id");
  static std::string file, name;
  upload->add_option("FILE", file, "ONNX file")->required();
  upload->add_option("--name", name, "name to store it under (default: file stem)")->check(ModelName());
  upload->callback([&options, exit_code] { *exit_code = Upload(options, file, name); });

  static bool json = false;
  auto* models = app.add_subcommand("models", "list stored models");
  models->add_flag("--json", json, "print one JSON object instead (docs/cli-json.md kiln.models/1)");
  models->callback([&options, exit_code] { *exit_code = ListModels(options, json); });

  static std::string id;
  auto* model = app.add_subcommand("model", "show one model");
  model->add_option("ID", id, "model id, name or id prefix (8+ hex digits)")->required();
  model->add_flag("--json", json, "print one JSON object instead (docs/cli-json.md kiln.model/1)");
  model->callback([&options, exit_code] { *exit_code = GetModel(options, id, json); });

  auto* rm = app.add_subcommand("rm", "delete a model");
  rm->add_option("ID", id, "model id (all its names), name (that name) or id prefix")->required();
  rm->callback([&options, exit_code] { *exit_code = DeleteModel(options, id); });

  static std::string service;
  auto* health = app.add_subcommand("health", "check grpc.health.v1; exit 0 when SERVING");
  health->add_option("--service", service, "service name (default: the whole server)");
  health->callback([&options, exit_code] { *exit_code = Health(options, service); });
}

}  // namespace kiln::cli
