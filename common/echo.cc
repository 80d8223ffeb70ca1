#include "common/echo.h"

#include <algorithm>
#include <cstdio>

namespace kiln {

std::string EscapeForEcho(std::string_view text, size_t max_bytes) {
  const std::string tail = "...[" + std::to_string(text.size()) + " bytes]";
  const size_t budget = std::max(max_bytes, tail.size() + 4);
  std::string out;
  size_t cut = 0;  // longest piece-aligned prefix that leaves room for the tail
  size_t i = 0;
  for (; i < text.size() && out.size() <= budget; ++i) {
    if (out.size() + tail.size() <= budget) cut = out.size();
    const unsigned char c = static_cast<unsigned char>(text[i]);
    char esc[8];
    if (c == '\n') {
      std::snprintf(esc, sizeof(esc), "\\n");
    } else if (c == '\r') {
      std::snprintf(esc, sizeof(esc), "\\r");
    } else if (c == '\t') {
      std::snprintf(esc, sizeof(esc), "\\t");
    } else if (c == '\\') {
      std::snprintf(esc, sizeof(esc), "\\\\");
    } else if (c < 0x20 || c > 0x7e) {
      std::snprintf(esc, sizeof(esc), "\\x%02x", c);
    } else {
      esc[0] = static_cast<char>(c);
      esc[1] = '\0';
    }
    out += esc;
  }
  if (i == text.size() && out.size() <= budget) return out;  // all of it fits
  if (out.size() + tail.size() <= budget) cut = out.size();
  out.resize(cut);
  return out + tail;
}

}  // namespace kiln
