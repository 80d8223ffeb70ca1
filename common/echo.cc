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

std::string EscapeControls(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  int pending = 0;  // continuation bytes the current UTF-8 sequence still needs
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    char esc[8];
    if (c >= 0x80 && c <= 0xbf) {  // a continuation byte: kept inside a sequence, escaped alone
      if (pending > 0) {
        --pending;
        out += static_cast<char>(c);
      } else {
        std::snprintf(esc, sizeof(esc), "\\x%02x", c);
        out += esc;
      }
      continue;
    }
    pending = 0;
    if (c == '\n' || c == '\r' || c == '\t') {
      out += c == '\n' ? "\\n" : c == '\r' ? "\\r" : "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      std::snprintf(esc, sizeof(esc), "\\x%02x", c);
      out += esc;
    } else if (c == 0xc2 && i + 1 < text.size() && static_cast<unsigned char>(text[i + 1]) >= 0x80 &&
               static_cast<unsigned char>(text[i + 1]) <= 0x9f) {
      std::snprintf(esc, sizeof(esc), "\\u%04x", static_cast<unsigned char>(text[++i]));
      out += esc;
    } else {
      if (c >= 0xc0) pending = c >= 0xf0 ? 3 : c >= 0xe0 ? 2 : 1;
      out += static_cast<char>(c);
    }
  }
  return out;
}

size_t FindControlCharacter(std::string_view text) {
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    const auto next = [&](size_t n) { return i + n < text.size() ? static_cast<unsigned char>(text[i + n]) : 0; };
    const bool c1 = c == 0xc2 && next(1) >= 0x80 && next(1) <= 0x9f;
    const bool format = c == 0xe2 && ((next(1) == 0x80 && next(2) >= 0xa8 && next(2) <= 0xae) ||
                                      (next(1) == 0x81 && next(2) >= 0xa6 && next(2) <= 0xa9));
    if (c < 0x20 || c == 0x7f || c1 || format) return i;
  }
  return std::string_view::npos;
}

}  // namespace kiln
