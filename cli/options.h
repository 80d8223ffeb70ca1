// Option checks the kiln subcommands share (CLI11 validators), so that one kind of value is
// refused with one message everywhere.
#pragma once

#include <CLI/CLI.hpp>

#include <cerrno>
#include <cstdlib>
#include <sstream>
#include <string>

namespace kiln::cli {

/// A whole number 0 .. 2^64 − 1 in decimal. CLI11 converts an unsigned option with strtoull, which
/// takes "-1" as 2^64 − 1 and clamps values past the top; this refuses both instead.
inline CLI::Validator Uint64Decimal() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos) {
          return "expected a whole number >= 0, got '" + s + "'";
        }
        errno = 0;
        (void)std::strtoull(s.c_str(), nullptr, 10);
        if (errno == ERANGE) return "'" + s + "' is over 18446744073709551615";
        return {};
      },
      "UINT");
}

/// A number >= `min` (CLI11's NonNegativeNumber and PositiveNumber print their range as
/// "0.000000 to 1797...": this names the bound). The value's own type is checked by its conversion.
inline CLI::Validator AtLeast(double min, const std::string& what = "a number") {
  return CLI::Validator(
      [min, what](std::string& s) -> std::string {
        char* end = nullptr;
        errno = 0;
        const double v = std::strtod(s.c_str(), &end);
        if (end == s.c_str() || *end != '\0' || errno == ERANGE || !(v >= min)) {
          std::ostringstream bound;
          bound << min;
          return "expected " + what + " >= " + bound.str() + ", got '" + s + "'";
        }
        return {};
      },
      "");
}

}  // namespace kiln::cli
