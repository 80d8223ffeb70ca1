// Option checks the kiln subcommands share (CLI11 validators), so that one kind of value is
// refused with one message everywhere.
#pragma once

#include <CLI/CLI.hpp>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <sstream>
#include <string>

namespace kiln::cli {

/// A whole number 0 .. 2^64 − 1 in decimal, without leading zeros. CLI11 converts an unsigned
/// option with strtoull in base 0, which takes "-1" as 2^64 − 1, clamps values past the top and
/// reads "010" as octal 8; this refuses all three instead.
inline CLI::Validator Uint64Decimal() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos || (s.size() > 1 && s[0] == '0')) {
          return "expected a whole number >= 0 in decimal, got '" + s + "'";
        }
        errno = 0;
        (void)std::strtoull(s.c_str(), nullptr, 10);
        if (errno == ERANGE) return "'" + s + "' is over 18446744073709551615";
        return {};
      },
      "");
}

/// A finite number in [min, max] (CLI11's NonNegativeNumber, PositiveNumber and Range print their
/// bounds as "0.000000 to 1797...": this names them as given). The value's own type is checked
/// by its conversion after this.
inline CLI::Validator Between(double min, double max, const std::string& what = "a number") {
  return CLI::Validator(
      [min, max, what](std::string& s) -> std::string {
        char* end = nullptr;
        errno = 0;
        const double v = std::strtod(s.c_str(), &end);
        if (end == s.c_str() || *end != '\0' || !std::isfinite(v) || !(v >= min && v <= max)) {
          std::ostringstream want;
          want << "expected " << what;
          if (max == std::numeric_limits<double>::max()) {
            want << " >= " << min;
          } else {
            want << " from " << min << " to " << max;
          }
          return want.str() + ", got '" + s + "'";
        }
        return {};
      },
      "");
}

/// A finite number >= `min`.
inline CLI::Validator AtLeast(double min, const std::string& what = "a number") {
  return Between(min, std::numeric_limits<double>::max(), what);
}

/// A model name given on the command line: not empty (an empty --name used to fall back to the
/// file stem without a word). The server checks the rest (store::CheckModelName).
inline CLI::Validator ModelName() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        return s.empty() ? "an empty name; leave --name out to store the file under its stem" : "";
      },
      "");
}

}  // namespace kiln::cli
