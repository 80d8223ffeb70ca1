#include "device/numerics/vectors.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "device/numerics/formats.h"
#include "device/numerics/fpu.h"

namespace kiln::numerics {

namespace {

std::string Hex(uint64_t v, int digits) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%0*llx", digits, static_cast<unsigned long long>(v));
  return buf;
}

using Json = nlohmann::json;

// Member `key` of an object, or nullptr when absent or when `v` is not an object.
const Json* Find(const Json& v, std::string_view key) {
  if (!v.is_object()) return nullptr;
  auto it = v.find(key);
  return it == v.end() ? nullptr : &*it;
}

// The members of an object (sorted by key); no members when `v` is not an object.
const Json::object_t& Members(const Json& v) {
  static const Json::object_t kNone;
  return v.is_object() ? v.get_ref<const Json::object_t&>() : kNone;
}

const std::string& Str(const Json& v) { return v.get_ref<const std::string&>(); }

// Lines nested deeper than this are malformed (keeps the failure-message dump shallow).
constexpr int kMaxDepth = 64;

bool TooDeep(const Json& v, int depth) {
  if (depth > kMaxDepth) return true;
  if (v.is_structured()) {
    for (const Json& m : v)
      if (TooDeep(m, depth + 1)) return true;
  }
  return false;
}

// Parses one line; on a malformed one returns a discarded value and sets `*error`. Never throws.
Json ParseLine(const std::string& line, std::string* error) {
  // nlohmann skips a leading UTF-8 byte order mark; a vector line must not start with one.
  if (line.starts_with("\xEF\xBB\xBF")) {
    *error = "JSON: unexpected byte order mark";
    return Json(Json::value_t::discarded);
  }
  try {
    Json j = Json::parse(line);
    if (TooDeep(j, 0)) {
      *error = "JSON: nesting too deep";
      return Json(Json::value_t::discarded);
    }
    return j;
  } catch (const Json::exception& e) {
    // what() is "[json.exception.parse_error.101] parse error at line 1, column 21: ..."
    std::string_view what = e.what();
    if (size_t p = what.find("] "); p != std::string_view::npos) what.remove_prefix(p + 2);
    *error = "JSON: " + std::string(what);
    return Json(Json::value_t::discarded);
  }
}

// A number as a double, whatever nlohmann stored (int64, uint64 or double): the value the checks
// have always compared (for integers beyond 2^53 this rounds exactly like strtod of the text).
double Number(const Json& v) { return v.get<double>(); }

// Collects the outcome of one line: the first mismatch is kept with its field path.
class LineCheck {
 public:
  bool failed() const { return failed_; }
  const std::string& message() const { return message_; }

  void Fail(const std::string& msg) {
    if (!failed_) message_ = msg;
    failed_ = true;
  }
  // Compares a hex field with `got`; digits of the expected string decide the printed width.
  void Hex(const std::string& path, const Json* expected, uint64_t got) {
    uint64_t want;
    if (!ParseHex(expected, &want)) {
      Fail("field " + path + ": missing or not a hex string");
      return;
    }
    if (want != got) {
      int digits = static_cast<int>(Str(*expected).size());
      Fail("field " + path + ": expected " + numerics::Hex(want, digits) + ", got " + numerics::Hex(got, digits));
    }
  }
  void Int(const std::string& path, const Json* expected, int64_t got) {
    if (!expected || !expected->is_number()) {
      Fail("field " + path + ": missing or not a number");
      return;
    }
    if (static_cast<int64_t>(Number(*expected)) != got) {
      Fail("field " + path + ": expected " + expected->dump() + " (0x" + numerics::Hex(static_cast<uint64_t>(Number(*expected)), 2) +
           "), got " + std::to_string(got) + " (0x" + numerics::Hex(static_cast<uint64_t>(got), 2) + ")");
    }
  }

  static bool ParseHex(const Json* v, uint64_t* out) {
    if (!v || !v->is_string()) return false;
    const std::string& s = Str(*v);
    if (s.empty() || s.size() > 16) return false;
    uint64_t r = 0;
    for (char c : s) {
      int d;
      if (c >= '0' && c <= '9') d = c - '0';
      else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
      else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
      else return false;
      r = (r << 4) | static_cast<uint64_t>(d);
    }
    *out = r;
    return true;
  }

 private:
  bool failed_ = false;
  std::string message_;
};

// Reads an array of exactly n hex strings.
template <typename T, size_t N>
bool HexArray(const Json* v, std::array<T, N>* out) {
  if (!v || !v->is_array() || v->size() != N) return false;
  for (size_t i = 0; i < N; ++i) {
    uint64_t x;
    if (!LineCheck::ParseHex(&(*v)[i], &x)) return false;
    (*out)[i] = static_cast<T>(x);
  }
  return true;
}

// The per-arch results of a line are keyed "wh" / "bh".
constexpr std::pair<const char*, Arch> kArchKeys[] = {{"wh", Arch::kWormholeB0}, {"bh", Arch::kBlackhole}};

bool ParseSrcFormat(const Json* v, SrcFormat* f) {
  if (!v || !v->is_string()) return false;
  if (Str(*v) == "bf16") *f = SrcFormat::kBf16;
  else if (Str(*v) == "tf32") *f = SrcFormat::kTf32;
  else return false;
  return true;
}

// A fidelity key: exactly the canonical name ("LoFi" ... "HiFi4"), case included.
bool ParseFidelity(std::string_view s, MathFidelity* f) {
  auto parsed = ParseMathFidelity(s);
  if (!parsed.ok() || MathFidelityName(*parsed) != s) return false;
  *f = *parsed;
  return true;
}

bool IsInfoKey(const std::string& k) { return k == "id" || k == "cat" || k == "ref_f64" || k == "exact"; }

void CheckKnownKeys(const Json& obj, const std::set<std::string>& known, const std::string& prefix, LineCheck* c) {
  for (const auto& [k, v] : Members(obj)) {
    if (IsInfoKey(k) || known.count(k)) continue;
    c->Fail("unknown field " + prefix + k);
  }
}

// Checks a BfpGroup object {exp, codes[16], dec?[16], unpack_bf16?[16]} against `g`.
void CheckGroup(const std::string& path, const Json& obj, const BfpGroup& g, BfpFormat fmt, LineCheck* c) {
  if (!obj.is_object()) {
    c->Fail("field " + path + ": not an object");
    return;
  }
  CheckKnownKeys(obj, {"exp", "codes", "dec", "unpack_bf16"}, path + ".", c);
  c->Int(path + ".exp", Find(obj, "exp"), g.exp);
  const Json* codes = Find(obj, "codes");
  if (!codes || !codes->is_array() || codes->size() != 16) {
    c->Fail("field " + path + ".codes: missing or not 16 entries");
  } else {
    for (int i = 0; i < 16; ++i) c->Hex(path + ".codes[" + std::to_string(i) + "]", &(*codes)[i], g.codes[i]);
  }
  if (const Json* dec = Find(obj, "dec")) {
    if (!dec->is_array() || dec->size() != 16) {
      c->Fail("field " + path + ".dec: not 16 entries");
    } else {
      for (int i = 0; i < 16; ++i)
        c->Hex(path + ".dec[" + std::to_string(i) + "]", &(*dec)[i], FloatBits(DecodeBfpValue(g.exp, g.codes[i], fmt)));
    }
  }
  if (const Json* up = Find(obj, "unpack_bf16")) {
    if (!up->is_array() || up->size() != 16) {
      c->Fail("field " + path + ".unpack_bf16: not 16 entries");
    } else {
      for (int i = 0; i < 16; ++i)
        c->Hex(path + ".unpack_bf16[" + std::to_string(i) + "]", &(*up)[i], UnpackBfpToBf16(g.exp, g.codes[i], fmt));
    }
  }
}

// ---- per-kind checkers; each returns the input description for failure messages ----

void CheckFp32ToBf16(const Json& o, LineCheck* c) {
  uint64_t in;
  if (!LineCheck::ParseHex(Find(o, "in"), &in)) return c->Fail("field in: not a hex string");
  uint32_t u = static_cast<uint32_t>(in);
  CheckKnownKeys(o, {"in", "host_rne", "host_trunc", "dev_pack", "dev_pack_e8m6", "unpack_tf32", "unpack_bf16"}, "", c);
  if (auto* v = Find(o, "host_rne")) c->Hex("host_rne", v, HostFp32ToBf16(u, HostBf16Rounding::kRne));
  if (auto* v = Find(o, "host_trunc")) c->Hex("host_trunc", v, HostFp32ToBf16(u, HostBf16Rounding::kTruncate));
  if (auto* v = Find(o, "dev_pack")) c->Hex("dev_pack", v, PackFp32DstToBf16(u));
  if (auto* v = Find(o, "dev_pack_e8m6")) c->Hex("dev_pack_e8m6", v, PackE8M6FromFp32Dst(u));
  if (auto* v = Find(o, "unpack_tf32")) c->Hex("unpack_tf32", v, UnpackFp32ToTf32(u));
  if (auto* v = Find(o, "unpack_bf16")) c->Hex("unpack_bf16", v, UnpackFp32ToBf16(u));
}

void CheckBfpPack(const Json& o, LineCheck* c) {
  std::array<uint32_t, 16> in;
  if (!HexArray(Find(o, "in"), &in)) return c->Fail("field in: not 16 hex strings");
  CheckKnownKeys(o, {"in", "bfp8_b", "bfp4_b"}, "", c);
  for (const char* fk : {"bfp8_b", "bfp4_b"}) {
    const Json* f = Find(o, fk);
    if (!f) continue;
    BfpFormat fmt = std::string(fk) == "bfp8_b" ? BfpFormat::kBfp8 : BfpFormat::kBfp4;
    std::string p = fk;
    CheckKnownKeys(*f, {"host", "host_legacy", "dev_fp32dst", "dev_bf16dst"}, p + ".", c);
    if (auto* v = Find(*f, "host")) CheckGroup(p + ".host", *v, HostEncodeBfpGroup(in, fmt, HostBfpRounding::kCurrent), fmt, c);
    if (auto* v = Find(*f, "host_legacy"))
      CheckGroup(p + ".host_legacy", *v, HostEncodeBfpGroup(in, fmt, HostBfpRounding::kLegacy2025), fmt, c);
    if (auto* v = Find(*f, "dev_fp32dst")) CheckGroup(p + ".dev_fp32dst", *v, PackBfpFromFp32Dst(in, fmt), fmt, c);
    if (auto* v = Find(*f, "dev_bf16dst")) {
      std::array<uint16_t, 16> t;
      for (int i = 0; i < 16; ++i) t[i] = static_cast<uint16_t>(in[i] >> 16);
      CheckGroup(p + ".dev_bf16dst", *v, PackBfpFromBf16Dst(t, fmt), fmt, c);
    }
  }
}

void CheckUnpackBfp(const Json& o, LineCheck* c) {
  const Json* fmt_v = Find(o, "fmt");
  BfpFormat fmt;
  if (fmt_v && fmt_v->is_string() && Str(*fmt_v) == "bfp8_b") fmt = BfpFormat::kBfp8;
  else if (fmt_v && fmt_v->is_string() && Str(*fmt_v) == "bfp4_b") fmt = BfpFormat::kBfp4;
  else return c->Fail("field fmt: expected bfp8_b or bfp4_b");
  uint64_t code;
  if (!LineCheck::ParseHex(Find(o, "code"), &code)) return c->Fail("field code: not a hex string");
  const Json* e = Find(o, "exp");
  if (!e || !e->is_number()) return c->Fail("field exp: not a number");
  CheckKnownKeys(o, {"fmt", "code", "exp", "unpack_bf16"}, "", c);
  c->Hex("unpack_bf16", Find(o, "unpack_bf16"),
         UnpackBfpToBf16(static_cast<uint8_t>(Number(*e)), static_cast<uint8_t>(code), fmt));
}

bool ParseCommonFpu(const Json& o, FpuConfig* cfg, LineCheck* c) {
  if (!ParseSrcFormat(Find(o, "a_fmt"), &cfg->a_fmt)) return c->Fail("field a_fmt: expected bf16 or tf32"), false;
  if (!ParseSrcFormat(Find(o, "b_fmt"), &cfg->b_fmt)) return c->Fail("field b_fmt: expected bf16 or tf32"), false;
  return true;
}

void CheckMvmul(const Json& o, LineCheck* c) {
  FpuConfig cfg;
  if (!ParseCommonFpu(o, &cfg, c)) return;
  const Json* acc = Find(o, "fp32_acc");
  if (!acc || !acc->is_boolean()) return c->Fail("field fp32_acc: not a bool");
  cfg.fp32_dst = acc->get<bool>();
  std::array<uint32_t, 16> a, b;
  if (!HexArray(Find(o, "a"), &a)) return c->Fail("field a: not 16 hex strings");
  if (!HexArray(Find(o, "b"), &b)) return c->Fail("field b: not 16 hex strings");
  uint64_t dst;
  if (!LineCheck::ParseHex(Find(o, "dst_in"), &dst)) return c->Fail("field dst_in: not a hex string");
  CheckKnownKeys(o, {"fp32_acc", "a_fmt", "b_fmt", "a", "b", "dst_in", "wh", "bh"}, "", c);
  for (const auto& [ak, arch] : kArchKeys) {
    const Json* r = Find(o, ak);
    if (!r) continue;
    cfg.arch = arch;
    std::string p = ak;
    CheckKnownKeys(*r, {"phase", "LoFi", "HiFi2", "HiFi3", "HiFi4"}, p + ".", c);
    if (const Json* ph = Find(*r, "phase")) {
      if (!ph->is_array() || ph->size() != 4) {
        c->Fail("field " + p + ".phase: not 4 entries");
      } else {
        for (int i = 0; i < 4; ++i)
          c->Hex(p + ".phase[" + std::to_string(i) + "]", &(*ph)[i], MvmulPhase(a, b, static_cast<uint32_t>(dst), i, cfg));
      }
    }
    for (const auto& [k, v] : Members(*r)) {
      MathFidelity fid;
      if (!ParseFidelity(k, &fid)) continue;
      c->Hex(p + "." + k, &v, MvmulFidelity(a, b, static_cast<uint32_t>(dst), fid, cfg));
    }
  }
}

void CheckKacc32(const Json& o, LineCheck* c) {
  FpuConfig cfg;
  if (!ParseCommonFpu(o, &cfg, c)) return;
  const Json* w = Find(o, "w");
  if (!w || !w->is_array() || w->size() != 32) return c->Fail("field w: not 32 rows");
  std::array<std::array<uint32_t, 16>, 32> wr;
  for (int k = 0; k < 32; ++k)
    if (!HexArray(&(*w)[k], &wr[k])) return c->Fail("field w[" + std::to_string(k) + "]: not 16 hex strings");
  std::array<uint32_t, 32> x;
  if (!HexArray(Find(o, "x"), &x)) return c->Fail("field x: not 32 hex strings");
  CheckKnownKeys(o, {"a_fmt", "b_fmt", "w", "x", "wh", "bh"}, "", c);
  for (const auto& [ak, arch] : kArchKeys) {
    const Json* r = Find(o, ak);
    if (!r) continue;
    cfg.arch = arch;
    for (const auto& [key, res] : Members(*r)) {
      std::string p = std::string(ak) + "." + key;
      MathFidelity fid;
      bool fp32;
      if (key.rfind("fp32_", 0) == 0) fp32 = true;
      else if (key.rfind("bf16_", 0) == 0) fp32 = false;
      else {
        c->Fail("unknown field " + p);
        continue;
      }
      if (!ParseFidelity(std::string_view(key).substr(5), &fid)) {
        c->Fail("unknown field " + p);
        continue;
      }
      cfg.fp32_dst = fp32;
      std::array<uint32_t, 16> dst;
      for (int col = 0; col < 16; ++col) {
        std::array<uint32_t, 16> a0, a1, b0, b1;
        for (int k = 0; k < 16; ++k) {
          a0[k] = wr[k][col];
          a1[k] = wr[16 + k][col];
          b0[k] = x[k];
          b1[k] = x[16 + k];
        }
        uint32_t d = 0;
        for (int ph = 0; ph < NumPhases(fid); ++ph) {
          d = MvmulPhase(a0, b0, d, ph, cfg);
          d = MvmulPhase(a1, b1, d, ph, cfg);
        }
        dst[col] = d;
      }
      std::array<uint16_t, 16> pack16;
      BfpGroup g;
      if (fp32) {
        for (int i = 0; i < 16; ++i) pack16[i] = PackFp32DstToBf16(dst[i]);
        g = PackBfpFromFp32Dst(dst, BfpFormat::kBfp8);
      } else {
        std::array<uint16_t, 16> t;
        for (int i = 0; i < 16; ++i) t[i] = static_cast<uint16_t>(dst[i] >> 16);
        for (int i = 0; i < 16; ++i) pack16[i] = PackBf16DstToBf16(t[i]);
        g = PackBfpFromBf16Dst(t, BfpFormat::kBfp8);
      }
      CheckKnownKeys(res, {"dst", "pack_bf16", "pack_bfp8", "bfp8_unpacked_bf16"}, p + ".", c);
      auto check16 = [&, &res = res](const char* name, auto fn) {
        const Json* v = Find(res, name);
        if (!v) return;
        if (!v->is_array() || v->size() != 16) return c->Fail("field " + p + "." + name + ": not 16 entries");
        for (int i = 0; i < 16; ++i) c->Hex(p + "." + name + "[" + std::to_string(i) + "]", &(*v)[i], fn(i));
      };
      check16("dst", [&](int i) { return uint64_t{dst[i]}; });
      check16("pack_bf16", [&](int i) { return uint64_t{pack16[i]}; });
      if (const Json* v = Find(res, "pack_bfp8")) CheckGroup(p + ".pack_bfp8", *v, g, BfpFormat::kBfp8, c);
      check16("bfp8_unpacked_bf16", [&](int i) { return uint64_t{UnpackBfpToBf16(g.exp, g.codes[i], BfpFormat::kBfp8)}; });
    }
  }
}

void CheckElwadd(const Json& o, LineCheck* c) {
  FpuConfig cfg;
  if (!ParseCommonFpu(o, &cfg, c)) return;
  const Json* acc = Find(o, "fp32_acc");
  if (!acc || !acc->is_boolean()) return c->Fail("field fp32_acc: not a bool");
  cfg.fp32_dst = acc->get<bool>();
  uint64_t a, b, dst;
  if (!LineCheck::ParseHex(Find(o, "a"), &a)) return c->Fail("field a: not a hex string");
  if (!LineCheck::ParseHex(Find(o, "b"), &b)) return c->Fail("field b: not a hex string");
  if (!LineCheck::ParseHex(Find(o, "dst_in"), &dst)) return c->Fail("field dst_in: not a hex string");
  CheckKnownKeys(o, {"fp32_acc", "a_fmt", "b_fmt", "a", "b", "dst_in", "wh", "bh", "wh_accum", "bh_accum"}, "", c);
  for (const auto& [ak, arch] : kArchKeys) {
    cfg.arch = arch;
    std::string k = ak;
    if (auto* v = Find(o, k))
      c->Hex(k, v, Elwadd(static_cast<uint32_t>(a), static_cast<uint32_t>(b), static_cast<uint32_t>(dst), false, cfg));
    if (auto* v = Find(o, k + "_accum"))
      c->Hex(k + "_accum", v, Elwadd(static_cast<uint32_t>(a), static_cast<uint32_t>(b), static_cast<uint32_t>(dst), true, cfg));
  }
}

void CheckL1Acc(const Json& o, LineCheck* c) {
  const Json* fmt = Find(o, "fmt");
  uint64_t old_v, new_v;
  if (!LineCheck::ParseHex(Find(o, "old"), &old_v)) return c->Fail("field old: not a hex string");
  if (!LineCheck::ParseHex(Find(o, "new"), &new_v)) return c->Fail("field new: not a hex string");
  CheckKnownKeys(o, {"fmt", "old", "new", "out"}, "", c);
  if (fmt && fmt->is_string() && Str(*fmt) == "fp32") {
    c->Hex("out", Find(o, "out"), PackL1AccFp32(static_cast<uint32_t>(old_v), static_cast<uint32_t>(new_v)));
  } else if (fmt && fmt->is_string() && Str(*fmt) == "bf16") {
    c->Hex("out", Find(o, "out"), PackL1AccBf16(static_cast<uint16_t>(old_v), static_cast<uint16_t>(new_v)));
  } else {
    c->Fail("field fmt: expected fp32 or bf16");
  }
}

// Input fields of each kind, for the hex dump of a failing case.
const std::vector<std::string>& InputKeys(const std::string& kind) {
  static const std::vector<std::string> kBf16 = {"in"}, kBfp = {"in"}, kUnpack = {"fmt", "exp", "code"},
                                        kMv = {"fp32_acc", "a_fmt", "b_fmt", "a", "b", "dst_in"},
                                        kK = {"a_fmt", "b_fmt", "w", "x"},
                                        kEl = {"fp32_acc", "a_fmt", "b_fmt", "a", "b", "dst_in"},
                                        kL1 = {"fmt", "old", "new"}, kNone = {};
  if (kind == "fp32_to_bf16") return kBf16;
  if (kind == "bfp_pack") return kBfp;
  if (kind == "unpack_bfp") return kUnpack;
  if (kind == "mvmul") return kMv;
  if (kind == "kacc32") return kK;
  if (kind == "elwadd") return kEl;
  if (kind == "l1acc") return kL1;
  return kNone;
}

// Recognises a line's kind from its fields (tests/data/tt-vectors/README.md).
std::string KindOf(const Json& o) {
  const Json* in = Find(o, "in");
  if (in && in->is_string()) return "fp32_to_bf16";
  if (in && in->is_array()) return "bfp_pack";
  if (Find(o, "code")) return "unpack_bfp";
  if (Find(o, "w")) return "kacc32";
  const Json* a = Find(o, "a");
  if (a && a->is_array()) return "mvmul";
  if (a && a->is_string()) return "elwadd";
  if (Find(o, "old")) return "l1acc";
  return "";
}

}  // namespace

Result<VectorFileReport> CheckVectorFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("cannot open vector file " + path);
  VectorFileReport rep;
  rep.file = std::filesystem::path(path).filename().string();
  std::string line;
  size_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;  // blank lines are not cases
    LineCheck c;
    std::string kind;
    std::string parse_error;
    const Json parsed = ParseLine(line, &parse_error);
    if (parsed.is_discarded()) {
      c.Fail(parse_error);
    } else if (!parsed.is_object()) {
      c.Fail("not a JSON object");
    } else {
      kind = KindOf(parsed);
      if (kind == "fp32_to_bf16") CheckFp32ToBf16(parsed, &c);
      else if (kind == "bfp_pack") CheckBfpPack(parsed, &c);
      else if (kind == "unpack_bfp") CheckUnpackBfp(parsed, &c);
      else if (kind == "mvmul") CheckMvmul(parsed, &c);
      else if (kind == "kacc32") CheckKacc32(parsed, &c);
      else if (kind == "elwadd") CheckElwadd(parsed, &c);
      else if (kind == "l1acc") CheckL1Acc(parsed, &c);
      else c.Fail("unrecognised vector line (no known input fields)");
    }
    if (!c.failed()) {
      ++rep.passed;
      continue;
    }
    ++rep.failed;
    if (rep.first_failure.empty()) {
      std::string msg = "line " + std::to_string(line_no) + ": " + c.message();
      if (parsed.is_object()) {
        std::string inputs;
        for (const auto& k : InputKeys(kind)) {
          const Json* v = Find(parsed, k);
          if (!v) continue;
          if (!inputs.empty()) inputs += ' ';
          inputs += k + "=" + v->dump();
        }
        if (const Json* id = Find(parsed, "id")) {
          std::string id_text = id->is_string() ? Str(*id) : id->is_number() ? id->dump() : "";
          inputs = "id=" + id_text + (inputs.empty() ? "" : " ") + inputs;
        }
        if (!inputs.empty()) msg += "; input: " + inputs;
      }
      rep.first_failure = msg;
    }
  }
  return rep;
}

int RunVectorDirectory(const std::string& dir, std::ostream& out) {
  std::error_code ec;
  std::vector<std::filesystem::path> files;
  std::filesystem::directory_iterator it(dir, ec);
  if (ec) {
    out << dir << ": cannot read directory: " << ec.message() << "\n";
    return 1;
  }
  for (const auto& entry : it) {
    if (entry.path().extension() == ".jsonl" && entry.is_regular_file(ec)) files.push_back(entry.path());
  }
  if (files.empty()) {
    out << dir << ": no *.jsonl vector files\n";
    return 1;
  }
  std::sort(files.begin(), files.end());
  int rc = 0;
  for (const auto& f : files) {
    auto rep = CheckVectorFile(f.string());
    if (!rep.ok()) {
      out << f.filename().string() << ": " << rep.status().message() << "\n";
      rc = 1;
      continue;
    }
    out << rep->file << ": " << rep->passed << " passed, " << rep->failed << " failed\n";
    if (rep->failed > 0) {
      out << "  first failure: " << rep->first_failure << "\n";
      rc = 1;
    }
  }
  return rc;
}

}  // namespace kiln::numerics
