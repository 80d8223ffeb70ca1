// A small JSON reader for the golden-vector files (JSON Lines, see tests/data/tt-vectors/README.md).
// It parses one document (object, array, string, number, true/false/null) into a tree of JsonValue.
// Strings support the standard escapes (\uXXXX is decoded to UTF-8, surrogate pairs included).
// Numbers are kept as their source text and as a double. Errors come back as a kiln::Status
// (INVALID_ARGUMENT with the byte offset); nothing throws.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace kiln::numerics {

/// One JSON value. Objects keep their members in a std::map (key order is not needed here).
struct JsonValue {
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject };
  Kind kind = Kind::kNull;
  bool boolean = false;
  double number = 0.0;
  std::string text;  // string contents, or the number's source text
  std::vector<JsonValue> array;
  std::map<std::string, JsonValue, std::less<>> object;

  bool is_object() const { return kind == Kind::kObject; }
  bool is_array() const { return kind == Kind::kArray; }
  bool is_string() const { return kind == Kind::kString; }
  bool is_number() const { return kind == Kind::kNumber; }
  bool is_bool() const { return kind == Kind::kBool; }
  /// Member `key` of an object, or nullptr when absent or when this is not an object.
  const JsonValue* Find(std::string_view key) const;
};

/// Parses exactly one JSON document from `text` (surrounding whitespace allowed).
Result<JsonValue> ParseJson(std::string_view text);

}  // namespace kiln::numerics
