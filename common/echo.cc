#include "common/echo.h"

#include <algorithm>
#include <cstdio>

namespace kiln {

std::string EscapeForEcho(std::string_view text, size_t max_bytes) {
  const std::string tail = "...[" + std::to_string(text.size()) + " bytes]";
  const size_t budget = std::max(max_bytes, tail.size() + 4);
  std::string out;
  out.reserve(std::min(text.size(), budget));
  for (size_t i = 0; i < text.size(); ++i) {
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
    const std::string_view piece(esc);
    // Room for this piece, and for the tail if anything is still to come after it.
    const bool last = i + 1 == text.size();
    if (out.size() + piece.size() + (last ? 0 : tail.size()) > budget) {
      if (last && out.size() + piece.size() <= budget) {
        out += piece;
        return out;
      }
      return out + tail;
    }
    out += piece;
  }
  return out;
}

}  // namespace kiln
