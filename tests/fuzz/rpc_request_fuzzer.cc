// libFuzzer target over every kilnd RPC's request message (kiln.v1 ModelService, CompileService,
// DeviceService, JobService): any input must give a request that the api/ functions refuse with a
// Status or accept; never a crash, hang, leak or sanitizer report. Debian 12 has no
// libprotobuf-mutator, so an input is used two ways (its first byte picks the message type, its
// second the way):
//   raw         the rest is parsed as the message's wire bytes (what a client may send);
//   structured  the rest is the entropy of a generator that fills the message by reflection —
//               valid and out-of-range enum values, edge integers and floats, KServe datatype
//               names, tensors whose raw_data matches their shape half of the time, nested and
//               repeated fields — so the deep paths are reached without a mutator.
// The request then goes where kilnd's handler sends it before any store or device work: every
// request through CheckEnumValues (api/convert.h); RunConvLayersRequest and SubmitRunRequest's
// run through PlanCacheKey, SymbolBindings, PrepareConvRun on a small plan (precision and tensor
// conversion, the memory estimate, CheckRunMemory) and, when small, a real run on the fp32
// reference backend (input checks of runtime/inputs.h); the sweep's precisions through FromProto;
// SubmitAdviseRequest's advise through AdviseSpecFromProto (api/advisor/advise_proto.h);
// CompileAi8xRequest's options through CompileAi8x on a small valid model, and inline model_bytes
// of up to 4 KiB through CompileAi8x; LookupModelRequest through its name and sha256 checks. The
// other model-service and job lookups (ids, names, page tokens) are store work and only parsed and
// re-serialized here. Rows() is the list of fuzzed messages; the ctest rpc_fuzz_covers_every_rpc
// fails when a method in proto/kiln/v1/*.proto takes a request message that is not in it.
// Built with clang (-fsanitize=fuzzer,address,undefined) and run with a fixed seed and run count
// by scripts/fuzz-rpc.sh, which .ci/run calls; the same entry point is linked into rpc_fuzz_replay (any
// compiler), which replays tests/fuzz/rpc_corpus and a fixed-seed batch of generated inputs under
// ctest in every build.
#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>
#include <google/protobuf/stubs/logging.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "api/advisor/advise_proto.h"
#include "api/compile_ai8x.h"
#include "api/convert.h"
#include "api/run_conv.h"
#include "device/backends/builtin.h"
#include "kiln/v1/compile.pb.h"
#include "kiln/v1/device.pb.h"
#include "kiln/v1/job.pb.h"
#include "kiln/v1/model.pb.h"
#include "store/model_store.h"
#include "tests/fuzz/rpc_request_fuzzer.h"
#include "tests/support/onnx_model_builder.h"

namespace {

namespace pb = google::protobuf;

// Bytes of the input as a source of choices; zeros once exhausted.
class Entropy {
 public:
  Entropy(const uint8_t* d, size_t n) : d_(d), n_(n) {}
  uint8_t Byte() { return i_ < n_ ? d_[i_++] : 0; }
  bool Bool() { return Byte() & 1; }
  uint64_t U64() {
    uint64_t v = 0;
    for (int k = 0; k < 8; ++k) v = v << 8 | Byte();
    return v;
  }
  int64_t Int() {
    switch (Byte() % 8) {
      case 0: return 0;
      case 1: return -1;
      case 2: return Byte() % 8;
      case 3: return std::numeric_limits<int32_t>::max();
      case 4: return std::numeric_limits<int64_t>::min();
      case 5: return int64_t{1} << (Byte() % 63);
      default: return static_cast<int64_t>(U64());
    }
  }
  // Up to `max` bytes; `utf8`: valid UTF-8 (proto3 `string` fields — the parser refuses anything
  // else, so no client can send it), mostly ASCII with some 2-byte sequences and controls.
  std::string Bytes(size_t max, bool utf8) {
    size_t len = Byte() % 32;
    if (Byte() % 16 == 0) len = (size_t{Byte()} << 4) % max;
    std::string s;
    for (size_t k = 0; k < len && i_ < n_; ++k) {
      const uint8_t b = Byte();
      if (!utf8) {
        s.push_back(static_cast<char>(b));
      } else if (b >= 0xf0) {
        s += "\xc3\xa9";  // é
      } else {
        s.push_back(static_cast<char>(b & 0x7f));
      }
    }
    return s;
  }

 private:
  const uint8_t* d_;
  size_t n_, i_ = 0;
};

const char* const kDatatypes[] = {"FP32", "FP16", "BF16", "FP64", "INT64", "INT32", "INT8", "UINT8", "BOOL", ""};

void Fill(pb::Message* m, Entropy& e, int depth);

void SetScalar(pb::Message* m, const pb::FieldDescriptor* f, Entropy& e, int depth) {
  const pb::Reflection* r = m->GetReflection();
  const bool rep = f->is_repeated();
  switch (f->cpp_type()) {
    case pb::FieldDescriptor::CPPTYPE_INT32: {
      const auto v = static_cast<int32_t>(e.Int());
      rep ? r->AddInt32(m, f, v) : r->SetInt32(m, f, v);
      break;
    }
    case pb::FieldDescriptor::CPPTYPE_INT64: {
      // Shapes: small dims most of the time, so that tensors can match their raw_data.
      const int64_t v = f->name() == "shape" && e.Byte() % 4 != 0 ? e.Byte() % 9 : e.Int();
      rep ? r->AddInt64(m, f, v) : r->SetInt64(m, f, v);
      break;
    }
    case pb::FieldDescriptor::CPPTYPE_UINT32: {
      const auto v = static_cast<uint32_t>(e.Int());
      rep ? r->AddUInt32(m, f, v) : r->SetUInt32(m, f, v);
      break;
    }
    case pb::FieldDescriptor::CPPTYPE_UINT64: {
      const auto v = static_cast<uint64_t>(e.Int());
      rep ? r->AddUInt64(m, f, v) : r->SetUInt64(m, f, v);
      break;
    }
    case pb::FieldDescriptor::CPPTYPE_DOUBLE:
    case pb::FieldDescriptor::CPPTYPE_FLOAT: {
      static const double kEdge[] = {0.0, 1.0, -1.0, 0.5, 1e300, -0.0, std::nan(""), INFINITY};
      const double v = e.Bool() ? kEdge[e.Byte() % 8] : static_cast<double>(e.Int()) / 1024.0;
      if (f->cpp_type() == pb::FieldDescriptor::CPPTYPE_FLOAT) {
        rep ? r->AddFloat(m, f, static_cast<float>(v)) : r->SetFloat(m, f, static_cast<float>(v));
      } else {
        rep ? r->AddDouble(m, f, v) : r->SetDouble(m, f, v);
      }
      break;
    }
    case pb::FieldDescriptor::CPPTYPE_BOOL: rep ? r->AddBool(m, f, e.Bool()) : r->SetBool(m, f, e.Bool()); break;
    case pb::FieldDescriptor::CPPTYPE_ENUM: {
      const pb::EnumDescriptor* ed = f->enum_type();
      const int v = e.Byte() % 8 != 0 ? ed->value(e.Byte() % ed->value_count())->number() : static_cast<int>(e.Int());
      rep ? r->AddEnumValue(m, f, v) : r->SetEnumValue(m, f, v);
      break;
    }
    case pb::FieldDescriptor::CPPTYPE_STRING: {
      const bool utf8 = f->type() == pb::FieldDescriptor::TYPE_STRING;
      std::string v = f->name() == "datatype" && e.Bool() ? kDatatypes[e.Byte() % 10]
                      : f->name() == "name" && e.Bool()   ? "x"  // the fixture model's input
                                                          : e.Bytes(4096, utf8);
      rep ? r->AddString(m, f, std::move(v)) : r->SetString(m, f, std::move(v));
      break;
    }
    case pb::FieldDescriptor::CPPTYPE_MESSAGE:
      if (depth < 4) Fill(rep ? r->AddMessage(m, f) : r->MutableMessage(m, f), e, depth + 1);
      break;
  }
}

void Fill(pb::Message* m, Entropy& e, int depth) {
  const pb::Descriptor* d = m->GetDescriptor();
  for (int i = 0; i < d->field_count(); ++i) {
    const pb::FieldDescriptor* f = d->field(i);
    if (!e.Bool()) continue;
    const int n = f->is_repeated() ? e.Byte() % 5 : 1;
    for (int k = 0; k < n; ++k) SetScalar(m, f, e, depth);
  }
  // Half of the tensors get raw_data of the size their shape and datatype ask for.
  if (auto* t = dynamic_cast<kiln::v1::Tensor*>(m); t != nullptr && e.Bool()) {
    int64_t count = 1;
    for (int64_t dim : t->shape()) count = dim >= 0 && dim <= 64 && count <= 4096 ? count * dim : -1;
    auto dtype = kiln::device::ParseDataType(t->datatype().empty() ? "FP32" : t->datatype());
    if (count >= 0 && count <= 4096 && dtype.ok()) {
      std::string raw(static_cast<size_t>(count) * kiln::device::DataTypeSize(*dtype), '\0');
      for (char& c : raw) c = static_cast<char>(e.Byte() % 2);  // also valid BOOL bytes
      t->set_raw_data(std::move(raw));
    }
  }
}

// A conv model with a symbolic batch, planned once, and its runner.
struct Fixture {
  std::shared_ptr<const kiln::convplan::ConvPlan> plan;
  std::string model;
  std::unique_ptr<kiln::device::Backend> reference;
  Fixture() {
    kiln::testing::OnnxModelBuilder b;
    b.Input("x", onnx::TensorProto::FLOAT, {"N", 2, 4, 4});
    b.FloatInitializer("w", {2, 2, 3, 3}, std::vector<float>(36, 0.125f));
    auto& n = b.Node("Conv", {"x", "w"}, {"y"}, "conv");
    kiln::testing::SetInts(n, "kernel_shape", {3, 3});
    kiln::testing::SetInts(n, "pads", {1, 1, 1, 1});
    b.Node("Relu", {"y"}, {"z"}, "relu");
    b.Output("z");
    model = b.Serialize();
    auto p = kiln::api::PlanModel(model, "fuzz");
    if (!p.ok()) __builtin_trap();
    plan = *p;
    kiln::device::BackendOptions o;
    o.settings = {{kiln::device::kReferenceThreadsSetting, "1"}};
    auto r = kiln::device::DefaultBackendRegistry().Create(kiln::device::kReferenceBackend, o);
    if (!r.ok()) __builtin_trap();
    reference = std::move(*r);
  }
};

const Fixture& TheFixture() {
  static const Fixture f;
  return f;
}

void Run(const kiln::v1::RunConvLayersRequest& req) {
  const Fixture& fx = TheFixture();
  (void)kiln::api::PlanCacheKey("id", req);
  (void)kiln::api::SymbolBindings(fx.plan->model->graph(), req);
  (void)kiln::api::PlanOptionsForRequest(req);
  auto run = kiln::api::PrepareConvRun(fx.plan, req);
  if (!run.ok()) return;
  (void)kiln::api::CheckRunMemory(*run, "fuzz", uint64_t{1} << 30);
  int64_t elements = 0;
  for (const auto& [name, t] : run->inputs) elements += t.num_elements();
  if (elements > 4096 || run->memory.peak_bytes > (int64_t{64} << 20)) return;
  run->options.reference = fx.reference.get();
  (void)kiln::runtime::RunConvPlan(*run->plan, run->inputs, *fx.reference, run->options);
  if (std::getenv("KILN_FUZZ_STATS")) std::fprintf(stderr, "ran\n");
}

void Compile(const kiln::v1::CompileAi8xRequest& req) {
  if (!kiln::api::CheckEnumValues(req.options(), "options").ok()) return;
  if (req.has_model_bytes() && req.model_bytes().size() <= 4096) {
    (void)kiln::api::CompileAi8x(req.model_bytes(), "fuzz", req.options());
  }
  if (req.options().overrides_size() <= 8) (void)kiln::api::CompileAi8x(TheFixture().model, "fuzz", req.options());
}

template <typename M>
void Exercise(const uint8_t* data, size_t size, bool raw, void (*handle)(const M&)) {
  M m;
  if (raw) {
    if (!m.ParseFromArray(data, static_cast<int>(size))) return;
  } else {
    Entropy e(data, size);
    Fill(&m, e, 0);
  }
  // Re-serialized, the message parses back (what a handler's logging / store might do).
  M again;
  if (!again.ParseFromString(m.SerializeAsString())) __builtin_trap();
  if (!kiln::api::CheckEnumValues(m).ok()) return;
  if (handle) handle(m);
}

void SubmitRun(const kiln::v1::SubmitRunRequest& r) {
  for (const auto& p : r.sweep()) (void)kiln::api::FromProto(p);
  Run(r.run());
}

void SubmitAdvise(const kiln::v1::SubmitAdviseRequest& r) {
  // JobManager::SubmitAdvise's checks before the store (api/jobs.cc): options, level, tensors.
  (void)kiln::api::advisor::AdviseSpecFromProto(r.advise(), {});
}

void Lookup(const kiln::v1::LookupModelRequest& r) {
  // LookupModel's checks before the in-memory index (server/model_service.cc Lookup).
  if (!r.name().empty()) (void)kiln::store::IsValidModelName(r.name());
  if (!r.sha256().empty()) (void)kiln::store::IsModelId(r.sha256());
}

using Handler = void (*)(const uint8_t*, size_t, bool);
template <typename M, void (*H)(const M&) = nullptr>
void Dispatch(const uint8_t* d, size_t n, bool raw) {
  Exercise<M>(d, n, raw, H);
}

// The input's first byte (mod 16) picks the row: rows keep their index, so that the committed
// corpus (make_rpc_seeds.py) keeps its meaning; new request messages take the next free row.
// rpc_fuzz_replay --check-coverage fails unless every method of every service in
// proto/kiln/v1/*.proto has its request message here.
struct Row {
  const pb::Descriptor* message;
  Handler handle;
};
const std::vector<Row>& Rows() {
  using namespace kiln::v1;
  static const std::vector<Row> rows = {
      {RunConvLayersRequest::descriptor(), Dispatch<RunConvLayersRequest, Run>},
      {ListDevicesRequest::descriptor(), Dispatch<ListDevicesRequest>},
      {CompileAi8xRequest::descriptor(), Dispatch<CompileAi8xRequest, Compile>},
      {UploadModelRequest::descriptor(), Dispatch<UploadModelRequest>},
      {GetModelRequest::descriptor(), Dispatch<GetModelRequest>},
      {ListModelsRequest::descriptor(), Dispatch<ListModelsRequest>},
      {DeleteModelRequest::descriptor(), Dispatch<DeleteModelRequest>},
      {ReadModelRequest::descriptor(), Dispatch<ReadModelRequest>},
      {SubmitRunRequest::descriptor(), Dispatch<SubmitRunRequest, SubmitRun>},
      {GetJobRequest::descriptor(), Dispatch<GetJobRequest>},
      {ListJobsRequest::descriptor(), Dispatch<ListJobsRequest>},
      {CancelJobRequest::descriptor(), Dispatch<CancelJobRequest>},
      {WatchJobRequest::descriptor(), Dispatch<WatchJobRequest>},
      {GetJobResultRequest::descriptor(), Dispatch<GetJobResultRequest>},
      {LookupModelRequest::descriptor(), Dispatch<LookupModelRequest, Lookup>},
      {SubmitAdviseRequest::descriptor(), Dispatch<SubmitAdviseRequest, SubmitAdvise>},
  };
  return rows;
}

}  // namespace

std::vector<std::string> KilnFuzzedRequestMessages() {
  std::vector<std::string> out;
  for (const Row& r : Rows()) out.push_back(r.message->full_name());
  return out;
}
std::vector<uint64_t> g_kiln_fuzz_row_inputs(16);

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Raw inputs with invalid UTF-8 in a `string` field fail to parse, as they should, and protobuf
  // logs each at ERROR (hundreds of lines per CI run): keep only FATAL, which aborts anyway.
  static const bool quiet = [] {
    pb::SetLogHandler([](pb::LogLevel level, const char* file, int line, const std::string& msg) {
      if (level >= pb::LOGLEVEL_FATAL) std::fprintf(stderr, "[libprotobuf FATAL %s:%d] %s\n", file, line, msg.c_str());
    });
    return true;
  }();
  (void)quiet;
  if (size < 2 || size > (1u << 20)) return 0;
  const std::vector<Row>& rows = Rows();
  size_t which = data[0] % 16;
  if (which >= rows.size()) which = 0;  // the spare rows: RunConvLayers, the deepest, weighted up
  const bool raw = data[1] & 1;
  ++g_kiln_fuzz_row_inputs[which];
  rows[which].handle(data + 2, size - 2, raw);
  return 0;
}
