#include "device/numerics/json_lite.h"

#include <cstdlib>

namespace kiln::numerics {

const JsonValue* JsonValue::Find(std::string_view key) const {
  if (kind != Kind::kObject) return nullptr;
  auto it = object.find(key);
  return it == object.end() ? nullptr : &it->second;
}

namespace {

class Parser {
 public:
  explicit Parser(std::string_view s) : s_(s) {}

  Status Document(JsonValue* out) {
    SkipWs();
    KILN_RETURN_IF_ERROR(Value(out, 0));
    SkipWs();
    if (pos_ != s_.size()) return Error("trailing characters");
    return Status::Ok();
  }

 private:
  static constexpr int kMaxDepth = 64;

  Status Error(const std::string& what) const {
    return InvalidArgument("JSON: " + what + " at byte " + std::to_string(pos_));
  }
  void SkipWs() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) ++pos_;
  }
  bool Consume(std::string_view lit) {
    if (s_.substr(pos_, lit.size()) == lit) {
      pos_ += lit.size();
      return true;
    }
    return false;
  }

  Status Value(JsonValue* out, int depth) {
    if (depth > kMaxDepth) return Error("nesting too deep");
    if (pos_ >= s_.size()) return Error("unexpected end");
    char c = s_[pos_];
    if (c == '{') return Object(out, depth);
    if (c == '[') return Array(out, depth);
    if (c == '"') {
      out->kind = JsonValue::Kind::kString;
      return String(&out->text);
    }
    if (Consume("true")) {
      out->kind = JsonValue::Kind::kBool;
      out->boolean = true;
      return Status::Ok();
    }
    if (Consume("false")) {
      out->kind = JsonValue::Kind::kBool;
      out->boolean = false;
      return Status::Ok();
    }
    if (Consume("null")) {
      out->kind = JsonValue::Kind::kNull;
      return Status::Ok();
    }
    if (c == '-' || (c >= '0' && c <= '9')) return Number(out);
    return Error(std::string("unexpected character '") + c + "'");
  }

  Status Number(JsonValue* out) {
    size_t start = pos_;
    if (s_[pos_] == '-') ++pos_;
    auto digits = [&] {
      size_t b = pos_;
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
      return pos_ > b;
    };
    if (!digits()) return Error("bad number");
    if (pos_ < s_.size() && s_[pos_] == '.') {
      ++pos_;
      if (!digits()) return Error("bad number");
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
      if (!digits()) return Error("bad number");
    }
    out->kind = JsonValue::Kind::kNumber;
    out->text = std::string(s_.substr(start, pos_ - start));
    out->number = std::strtod(out->text.c_str(), nullptr);
    return Status::Ok();
  }

  static void AppendUtf8(std::string* s, uint32_t cp) {
    if (cp < 0x80) {
      s->push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      s->push_back(static_cast<char>(0xC0 | (cp >> 6)));
      s->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      s->push_back(static_cast<char>(0xE0 | (cp >> 12)));
      s->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      s->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      s->push_back(static_cast<char>(0xF0 | (cp >> 18)));
      s->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      s->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      s->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }

  Status Hex4(uint32_t* v) {
    if (pos_ + 4 > s_.size()) return Error("bad \\u escape");
    *v = 0;
    for (int i = 0; i < 4; ++i) {
      char c = s_[pos_++];
      uint32_t d;
      if (c >= '0' && c <= '9') d = c - '0';
      else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
      else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
      else return Error("bad \\u escape");
      *v = (*v << 4) | d;
    }
    return Status::Ok();
  }

  Status String(std::string* out) {
    ++pos_;  // opening quote
    out->clear();
    while (true) {
      if (pos_ >= s_.size()) return Error("unterminated string");
      char c = s_[pos_++];
      if (c == '"') return Status::Ok();
      if (static_cast<unsigned char>(c) < 0x20) return Error("control character in string");
      if (c != '\\') {
        out->push_back(c);
        continue;
      }
      if (pos_ >= s_.size()) return Error("unterminated escape");
      char e = s_[pos_++];
      switch (e) {
        case '"': out->push_back('"'); break;
        case '\\': out->push_back('\\'); break;
        case '/': out->push_back('/'); break;
        case 'b': out->push_back('\b'); break;
        case 'f': out->push_back('\f'); break;
        case 'n': out->push_back('\n'); break;
        case 'r': out->push_back('\r'); break;
        case 't': out->push_back('\t'); break;
        case 'u': {
          uint32_t cp;
          KILN_RETURN_IF_ERROR(Hex4(&cp));
          if (cp >= 0xD800 && cp < 0xDC00 && Consume("\\u")) {
            uint32_t lo;
            KILN_RETURN_IF_ERROR(Hex4(&lo));
            if (lo < 0xDC00 || lo >= 0xE000) return Error("bad surrogate pair");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          AppendUtf8(out, cp);
          break;
        }
        default: return Error("bad escape");
      }
    }
  }

  Status Array(JsonValue* out, int depth) {
    ++pos_;
    out->kind = JsonValue::Kind::kArray;
    SkipWs();
    if (pos_ < s_.size() && s_[pos_] == ']') {
      ++pos_;
      return Status::Ok();
    }
    while (true) {
      SkipWs();
      out->array.emplace_back();
      KILN_RETURN_IF_ERROR(Value(&out->array.back(), depth + 1));
      SkipWs();
      if (pos_ >= s_.size()) return Error("unterminated array");
      if (s_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (s_[pos_] == ']') {
        ++pos_;
        return Status::Ok();
      }
      return Error("expected ',' or ']'");
    }
  }

  Status Object(JsonValue* out, int depth) {
    ++pos_;
    out->kind = JsonValue::Kind::kObject;
    SkipWs();
    if (pos_ < s_.size() && s_[pos_] == '}') {
      ++pos_;
      return Status::Ok();
    }
    while (true) {
      SkipWs();
      if (pos_ >= s_.size() || s_[pos_] != '"') return Error("expected a member name");
      std::string key;
      KILN_RETURN_IF_ERROR(String(&key));
      SkipWs();
      if (pos_ >= s_.size() || s_[pos_] != ':') return Error("expected ':'");
      ++pos_;
      SkipWs();
      JsonValue v;
      KILN_RETURN_IF_ERROR(Value(&v, depth + 1));
      out->object[std::move(key)] = std::move(v);
      SkipWs();
      if (pos_ >= s_.size()) return Error("unterminated object");
      if (s_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (s_[pos_] == '}') {
        ++pos_;
        return Status::Ok();
      }
      return Error("expected ',' or '}'");
    }
  }

  std::string_view s_;
  size_t pos_ = 0;
};

}  // namespace

Result<JsonValue> ParseJson(std::string_view text) {
  JsonValue v;
  Parser p(text);
  Status st = p.Document(&v);
  if (!st.ok()) return st;
  return v;
}

}  // namespace kiln::numerics
