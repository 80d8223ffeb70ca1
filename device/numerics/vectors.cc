#include "device/numerics/vectors.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <vector>

#include "device/numerics/formats.h"
#include "device/numerics/fpu.h"
#include "device/numerics/json_lite.h"

namespace kiln::numerics {

namespace {

std::string Hex(uint64_t v, int digits) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%0*llx", digits, static_cast<unsigned long long>(v));
  return buf;
}

void Serialize(const JsonValue& v, std::string* out) {
  switch (v.kind) {
    case JsonValue::Kind::kNull: *out += "null"; break;
    case JsonValue::Kind::kBool: *out += v.boolean ? "true" : "false"; break;
    case JsonValue::Kind::kNumber: *out += v.text; break;
    case JsonValue::Kind::kString: *out += '"' + v.text + '"'; break;
    case JsonValue::Kind::kArray: {
      *out += '[';
      for (size_t i = 0; i < v.array.size(); ++i) {
        if (i) *out += ',';
        Serialize(v.array[i], out);
      }
      *out += ']';
      break;
    }
    case JsonValue::Kind::kObject: {
      *out += '{';
      bool first = true;
      for (const auto& [k, m] : v.object) {
        if (!first) *out += ',';
        first = false;
        *out += '"' + k + "\":";
        Serialize(m, out);
      }
      *out += '}';
      break;
    }
  }
}

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
  void Hex(const std::string& path, const JsonValue* expected, uint64_t got) {
    uint64_t want;
    if (!ParseHex(expected, &want)) {
      Fail("field " + path + ": missing or not a hex string");
      return;
    }
    if (want != got) {
      int digits = static_cast<int>(expected->text.size());
      Fail("field " + path + ": expected " + numerics::Hex(want, digits) + ", got " + numerics::Hex(got, digits));
    }
  }
  void Int(const std::string& path, const JsonValue* expected, int64_t got) {
    if (!expected || !expected->is_number()) {
      Fail("field " + path + ": missing or not a number");
      return;
    }
    if (static_cast<int64_t>(expected->number) != got) {
      Fail("field " + path + ": expected " + expected->text + " (0x" + numerics::Hex(static_cast<uint64_t>(expected->number), 2) +
           "), got " + std::to_string(got) + " (0x" + numerics::Hex(static_cast<uint64_t>(got), 2) + ")");
    }
  }

  static bool ParseHex(const JsonValue* v, uint64_t* out) {
    if (!v || !v->is_string() || v->text.empty() || v->text.size() > 16) return false;
    uint64_t r = 0;
    for (char c : v->text) {
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
bool HexArray(const JsonValue* v, std::array<T, N>* out) {
  if (!v || !v->is_array() || v->array.size() != N) return false;
  for (size_t i = 0; i < N; ++i) {
    uint64_t x;
    if (!LineCheck::ParseHex(&v->array[i], &x)) return false;
    (*out)[i] = static_cast<T>(x);
  }
  return true;
}

bool ParseArch(const std::string& key, Arch* arch) {
  if (key == "wh") *arch = Arch::kWormholeB0;
  else if (key == "bh") *arch = Arch::kBlackhole;
  else return false;
  return true;
}

bool ParseSrcFormat(const JsonValue* v, SrcFormat* f) {
  if (!v || !v->is_string()) return false;
  if (v->text == "bf16") *f = SrcFormat::kBf16;
  else if (v->text == "tf32") *f = SrcFormat::kTf32;
  else return false;
  return true;
}

bool ParseFidelity(std::string_view s, MathFidelity* f) {
  for (MathFidelity x : {MathFidelity::kLoFi, MathFidelity::kHiFi2, MathFidelity::kHiFi3, MathFidelity::kHiFi4}) {
    if (MathFidelityName(x) == s) {
      *f = x;
      return true;
    }
  }
  return false;
}

bool IsInfoKey(const std::string& k) { return k == "id" || k == "cat" || k == "ref_f64" || k == "exact"; }

void CheckKnownKeys(const JsonValue& obj, const std::set<std::string>& known, const std::string& prefix, LineCheck* c) {
  for (const auto& [k, v] : obj.object) {
    if (IsInfoKey(k) || known.count(k)) continue;
    c->Fail("unknown field " + prefix + k);
  }
}

// Checks a BfpGroup object {exp, codes[16], dec?[16], unpack_bf16?[16]} against `g`.
void CheckGroup(const std::string& path, const JsonValue& obj, const BfpGroup& g, BfpFormat fmt, LineCheck* c) {
  if (!obj.is_object()) {
    c->Fail("field " + path + ": not an object");
    return;
  }
  CheckKnownKeys(obj, {"exp", "codes", "dec", "unpack_bf16"}, path + ".", c);
  c->Int(path + ".exp", obj.Find("exp"), g.exp);
  const JsonValue* codes = obj.Find("codes");
  if (!codes || !codes->is_array() || codes->array.size() != 16) {
    c->Fail("field " + path + ".codes: missing or not 16 entries");
  } else {
    for (int i = 0; i < 16; ++i) c->Hex(path + ".codes[" + std::to_string(i) + "]", &codes->array[i], g.codes[i]);
  }
  if (const JsonValue* dec = obj.Find("dec")) {
    if (!dec->is_array() || dec->array.size() != 16) {
      c->Fail("field " + path + ".dec: not 16 entries");
    } else {
      for (int i = 0; i < 16; ++i)
        c->Hex(path + ".dec[" + std::to_string(i) + "]", &dec->array[i], FloatBits(DecodeBfpValue(g.exp, g.codes[i], fmt)));
    }
  }
  if (const JsonValue* up = obj.Find("unpack_bf16")) {
    if (!up->is_array() || up->array.size() != 16) {
      c->Fail("field " + path + ".unpack_bf16: not 16 entries");
    } else {
      for (int i = 0; i < 16; ++i)
        c->Hex(path + ".unpack_bf16[" + std::to_string(i) + "]", &up->array[i], UnpackBfpToBf16(g.exp, g.codes[i], fmt));
    }
  }
}

// ---- per-kind checkers; each returns the input description for failure messages ----

void CheckFp32ToBf16(const JsonValue& o, LineCheck* c) {
  uint64_t in;
  if (!LineCheck::ParseHex(o.Find("in"), &in)) return c->Fail("field in: not a hex string");
  uint32_t u = static_cast<uint32_t>(in);
  CheckKnownKeys(o, {"in", "host_rne", "host_trunc", "dev_pack", "dev_pack_e8m6", "unpack_tf32", "unpack_bf16"}, "", c);
  if (auto* v = o.Find("host_rne")) c->Hex("host_rne", v, HostFp32ToBf16(u, HostBf16Rounding::kRne));
  if (auto* v = o.Find("host_trunc")) c->Hex("host_trunc", v, HostFp32ToBf16(u, HostBf16Rounding::kTruncate));
  if (auto* v = o.Find("dev_pack")) c->Hex("dev_pack", v, PackFp32DstToBf16(u));
  if (auto* v = o.Find("dev_pack_e8m6")) c->Hex("dev_pack_e8m6", v, PackE8M6FromFp32Dst(u));
  if (auto* v = o.Find("unpack_tf32")) c->Hex("unpack_tf32", v, UnpackFp32ToTf32(u));
  if (auto* v = o.Find("unpack_bf16")) c->Hex("unpack_bf16", v, UnpackFp32ToBf16(u));
}

void CheckBfpPack(const JsonValue& o, LineCheck* c) {
  std::array<uint32_t, 16> in;
  if (!HexArray(o.Find("in"), &in)) return c->Fail("field in: not 16 hex strings");
  CheckKnownKeys(o, {"in", "bfp8_b", "bfp4_b"}, "", c);
  for (const char* fk : {"bfp8_b", "bfp4_b"}) {
    const JsonValue* f = o.Find(fk);
    if (!f) continue;
    BfpFormat fmt = std::string(fk) == "bfp8_b" ? BfpFormat::kBfp8 : BfpFormat::kBfp4;
    std::string p = fk;
    CheckKnownKeys(*f, {"host", "host_legacy", "dev_fp32dst", "dev_bf16dst"}, p + ".", c);
    if (auto* v = f->Find("host")) CheckGroup(p + ".host", *v, HostEncodeBfpGroup(in, fmt, HostBfpRounding::kCurrent), fmt, c);
    if (auto* v = f->Find("host_legacy"))
      CheckGroup(p + ".host_legacy", *v, HostEncodeBfpGroup(in, fmt, HostBfpRounding::kLegacy2025), fmt, c);
    if (auto* v = f->Find("dev_fp32dst")) CheckGroup(p + ".dev_fp32dst", *v, PackBfpFromFp32Dst(in, fmt), fmt, c);
    if (auto* v = f->Find("dev_bf16dst")) {
      std::array<uint16_t, 16> t;
      for (int i = 0; i < 16; ++i) t[i] = static_cast<uint16_t>(in[i] >> 16);
      CheckGroup(p + ".dev_bf16dst", *v, PackBfpFromBf16Dst(t, fmt), fmt, c);
    }
  }
}

void CheckUnpackBfp(const JsonValue& o, LineCheck* c) {
  const JsonValue* fmt_v = o.Find("fmt");
  BfpFormat fmt;
  if (fmt_v && fmt_v->is_string() && fmt_v->text == "bfp8_b") fmt = BfpFormat::kBfp8;
  else if (fmt_v && fmt_v->is_string() && fmt_v->text == "bfp4_b") fmt = BfpFormat::kBfp4;
  else return c->Fail("field fmt: expected bfp8_b or bfp4_b");
  uint64_t code;
  if (!LineCheck::ParseHex(o.Find("code"), &code)) return c->Fail("field code: not a hex string");
  const JsonValue* e = o.Find("exp");
  if (!e || !e->is_number()) return c->Fail("field exp: not a number");
  CheckKnownKeys(o, {"fmt", "code", "exp", "unpack_bf16"}, "", c);
  c->Hex("unpack_bf16", o.Find("unpack_bf16"),
         UnpackBfpToBf16(static_cast<uint8_t>(e->number), static_cast<uint8_t>(code), fmt));
}

bool ParseCommonFpu(const JsonValue& o, FpuConfig* cfg, LineCheck* c) {
  if (!ParseSrcFormat(o.Find("a_fmt"), &cfg->a_fmt)) return c->Fail("field a_fmt: expected bf16 or tf32"), false;
  if (!ParseSrcFormat(o.Find("b_fmt"), &cfg->b_fmt)) return c->Fail("field b_fmt: expected bf16 or tf32"), false;
  return true;
}

void CheckMvmul(const JsonValue& o, LineCheck* c) {
  FpuConfig cfg;
  if (!ParseCommonFpu(o, &cfg, c)) return;
  const JsonValue* acc = o.Find("fp32_acc");
  if (!acc || !acc->is_bool()) return c->Fail("field fp32_acc: not a bool");
  cfg.fp32_dst = acc->boolean;
  std::array<uint32_t, 16> a, b;
  if (!HexArray(o.Find("a"), &a)) return c->Fail("field a: not 16 hex strings");
  if (!HexArray(o.Find("b"), &b)) return c->Fail("field b: not 16 hex strings");
  uint64_t dst;
  if (!LineCheck::ParseHex(o.Find("dst_in"), &dst)) return c->Fail("field dst_in: not a hex string");
  CheckKnownKeys(o, {"fp32_acc", "a_fmt", "b_fmt", "a", "b", "dst_in", "wh", "bh"}, "", c);
  for (const char* ak : {"wh", "bh"}) {
    const JsonValue* r = o.Find(ak);
    if (!r) continue;
    ParseArch(ak, &cfg.arch);
    std::string p = ak;
    CheckKnownKeys(*r, {"phase", "LoFi", "HiFi2", "HiFi3", "HiFi4"}, p + ".", c);
    if (const JsonValue* ph = r->Find("phase")) {
      if (!ph->is_array() || ph->array.size() != 4) {
        c->Fail("field " + p + ".phase: not 4 entries");
      } else {
        for (int i = 0; i < 4; ++i)
          c->Hex(p + ".phase[" + std::to_string(i) + "]", &ph->array[i], MvmulPhase(a, b, static_cast<uint32_t>(dst), i, cfg));
      }
    }
    for (const auto& [k, v] : r->object) {
      MathFidelity fid;
      if (!ParseFidelity(k, &fid)) continue;
      c->Hex(p + "." + k, &v, MvmulFidelity(a, b, static_cast<uint32_t>(dst), fid, cfg));
    }
  }
}

void CheckKacc32(const JsonValue& o, LineCheck* c) {
  FpuConfig cfg;
  if (!ParseCommonFpu(o, &cfg, c)) return;
  const JsonValue* w = o.Find("w");
  if (!w || !w->is_array() || w->array.size() != 32) return c->Fail("field w: not 32 rows");
  std::array<std::array<uint32_t, 16>, 32> wr;
  for (int k = 0; k < 32; ++k)
    if (!HexArray(&w->array[k], &wr[k])) return c->Fail("field w[" + std::to_string(k) + "]: not 16 hex strings");
  std::array<uint32_t, 32> x;
  if (!HexArray(o.Find("x"), &x)) return c->Fail("field x: not 32 hex strings");
  CheckKnownKeys(o, {"a_fmt", "b_fmt", "w", "x", "wh", "bh"}, "", c);
  for (const char* ak : {"wh", "bh"}) {
    const JsonValue* r = o.Find(ak);
    if (!r) continue;
    ParseArch(ak, &cfg.arch);
    for (const auto& [key, res] : r->object) {
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
      auto check16 = [&](const char* name, auto fn) {
        const JsonValue* v = res.Find(name);
        if (!v) return;
        if (!v->is_array() || v->array.size() != 16) return c->Fail("field " + p + "." + name + ": not 16 entries");
        for (int i = 0; i < 16; ++i) c->Hex(p + "." + name + "[" + std::to_string(i) + "]", &v->array[i], fn(i));
      };
      check16("dst", [&](int i) { return uint64_t{dst[i]}; });
      check16("pack_bf16", [&](int i) { return uint64_t{pack16[i]}; });
      if (const JsonValue* v = res.Find("pack_bfp8")) CheckGroup(p + ".pack_bfp8", *v, g, BfpFormat::kBfp8, c);
      check16("bfp8_unpacked_bf16", [&](int i) { return uint64_t{UnpackBfpToBf16(g.exp, g.codes[i], BfpFormat::kBfp8)}; });
    }
  }
}

void CheckElwadd(const JsonValue& o, LineCheck* c) {
  FpuConfig cfg;
  if (!ParseCommonFpu(o, &cfg, c)) return;
  const JsonValue* acc = o.Find("fp32_acc");
  if (!acc || !acc->is_bool()) return c->Fail("field fp32_acc: not a bool");
  cfg.fp32_dst = acc->boolean;
  uint64_t a, b, dst;
  if (!LineCheck::ParseHex(o.Find("a"), &a)) return c->Fail("field a: not a hex string");
  if (!LineCheck::ParseHex(o.Find("b"), &b)) return c->Fail("field b: not a hex string");
  if (!LineCheck::ParseHex(o.Find("dst_in"), &dst)) return c->Fail("field dst_in: not a hex string");
  CheckKnownKeys(o, {"fp32_acc", "a_fmt", "b_fmt", "a", "b", "dst_in", "wh", "bh", "wh_accum", "bh_accum"}, "", c);
  for (const char* ak : {"wh", "bh"}) {
    ParseArch(ak, &cfg.arch);
    std::string k = ak;
    if (auto* v = o.Find(k))
      c->Hex(k, v, Elwadd(static_cast<uint32_t>(a), static_cast<uint32_t>(b), static_cast<uint32_t>(dst), false, cfg));
    if (auto* v = o.Find(k + "_accum"))
      c->Hex(k + "_accum", v, Elwadd(static_cast<uint32_t>(a), static_cast<uint32_t>(b), static_cast<uint32_t>(dst), true, cfg));
  }
}

void CheckL1Acc(const JsonValue& o, LineCheck* c) {
  const JsonValue* fmt = o.Find("fmt");
  uint64_t old_v, new_v;
  if (!LineCheck::ParseHex(o.Find("old"), &old_v)) return c->Fail("field old: not a hex string");
  if (!LineCheck::ParseHex(o.Find("new"), &new_v)) return c->Fail("field new: not a hex string");
  CheckKnownKeys(o, {"fmt", "old", "new", "out"}, "", c);
  if (fmt && fmt->is_string() && fmt->text == "fp32") {
    c->Hex("out", o.Find("out"), PackL1AccFp32(static_cast<uint32_t>(old_v), static_cast<uint32_t>(new_v)));
  } else if (fmt && fmt->is_string() && fmt->text == "bf16") {
    c->Hex("out", o.Find("out"), PackL1AccBf16(static_cast<uint16_t>(old_v), static_cast<uint16_t>(new_v)));
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

// Recognises a line's kind from its fields (tt-vectors/README.md).
std::string KindOf(const JsonValue& o) {
  const JsonValue* in = o.Find("in");
  if (in && in->is_string()) return "fp32_to_bf16";
  if (in && in->is_array()) return "bfp_pack";
  if (o.Find("code")) return "unpack_bfp";
  if (o.Find("w")) return "kacc32";
  const JsonValue* a = o.Find("a");
  if (a && a->is_array()) return "mvmul";
  if (a && a->is_string()) return "elwadd";
  if (o.Find("old")) return "l1acc";
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
    auto parsed = ParseJson(line);
    if (!parsed.ok()) {
      c.Fail(parsed.status().message());
    } else if (!parsed->is_object()) {
      c.Fail("not a JSON object");
    } else {
      kind = KindOf(*parsed);
      if (kind == "fp32_to_bf16") CheckFp32ToBf16(*parsed, &c);
      else if (kind == "bfp_pack") CheckBfpPack(*parsed, &c);
      else if (kind == "unpack_bfp") CheckUnpackBfp(*parsed, &c);
      else if (kind == "mvmul") CheckMvmul(*parsed, &c);
      else if (kind == "kacc32") CheckKacc32(*parsed, &c);
      else if (kind == "elwadd") CheckElwadd(*parsed, &c);
      else if (kind == "l1acc") CheckL1Acc(*parsed, &c);
      else c.Fail("unrecognised vector line (no known input fields)");
    }
    if (!c.failed()) {
      ++rep.passed;
      continue;
    }
    ++rep.failed;
    if (rep.first_failure.empty()) {
      std::string msg = "line " + std::to_string(line_no) + ": " + c.message();
      if (parsed.ok() && parsed->is_object()) {
        std::string inputs;
        for (const auto& k : InputKeys(kind)) {
          const JsonValue* v = parsed->Find(k);
          if (!v) continue;
          if (!inputs.empty()) inputs += ' ';
          inputs += k + "=";
          Serialize(*v, &inputs);
        }
        if (const JsonValue* id = parsed->Find("id")) inputs = "id=" + id->text + (inputs.empty() ? "" : " ") + inputs;
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
