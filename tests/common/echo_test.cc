#include "common/echo.h"

#include <gtest/gtest.h>

namespace kiln {
namespace {

TEST(EscapeForEcho, PrintableAsciiPasses) { EXPECT_EQ(EscapeForEcho("model-1 v2.onnx"), "model-1 v2.onnx"); }

TEST(EscapeForEcho, ControlBytesAndNonAsciiAreEscaped) {
  EXPECT_EQ(EscapeForEcho("a\nb\r\tc\\d"), "a\\nb\\r\\tc\\\\d");
  EXPECT_EQ(EscapeForEcho(std::string("\x1b[2J\xff\x00z", 7)), "\\x1b[2J\\xff\\x00z");
  EXPECT_EQ(EscapeForEcho("\xc3\xa9"), "\\xc3\\xa9");
}

TEST(EscapeForEcho, LongTextIsCutAndSaysHowLong) {
  const std::string out = EscapeForEcho(std::string(16u << 20, 'A'), 256);
  EXPECT_LE(out.size(), 256u);
  EXPECT_EQ(out.rfind("...[16777216 bytes]"), out.size() - 19);
  // Exactly at the cap: nothing is cut.
  EXPECT_EQ(EscapeForEcho(std::string(256, 'B'), 256), std::string(256, 'B'));
  // Never inside an escape.
  const std::string esc = EscapeForEcho(std::string(400, '\n'), 64);
  EXPECT_LE(esc.size(), 64u);
  EXPECT_EQ(esc.substr(0, esc.find("...")).size() % 2, 0u);
}

}  // namespace

// Terminal display: an ONNX node name with ANSI and OSC sequences, a newline and a C1 control
// (U+009B, the 8-bit CSI) is shown with them escaped; UTF-8 text passes unchanged.
TEST(EscapeControls, ControlCharactersAreEscapedAndUtf8Passes) {
  EXPECT_EQ(EscapeControls("\x1b[31mred\x1b[2J\x1b]0;pwned\x07\nfake\r\x7f"),
            "\\x1b[31mred\\x1b[2J\\x1b]0;pwned\\x07\\nfake\\r\\x7f");
  EXPECT_EQ(EscapeControls("a\xc2\x9b" "31m"), "a\\u009b31m");
  EXPECT_EQ(EscapeControls("conv/卷积 ü"), "conv/卷积 ü");
  EXPECT_EQ(EscapeControls("\xc2\xa0nbsp"), "\xc2\xa0nbsp");  // U+00A0 is not a control
  EXPECT_EQ(EscapeControls("a\x9b" "31m"), "a\\x9b31m");        // a lone 8-bit CSI (invalid UTF-8)
}

TEST(FindControlCharacter, FindsWhatATableCannotShowAsText) {
  EXPECT_EQ(FindControlCharacter("caf\xc3\xa9 \xe2\x80\x94 ok"), std::string_view::npos);  // é, an em dash
  EXPECT_EQ(FindControlCharacter("ab\x1b[31m"), 2u);
  EXPECT_EQ(FindControlCharacter("a\x7f"), 1u);
  EXPECT_EQ(FindControlCharacter("a\xc2\x9b" "2J"), 1u);         // C1 CSI
  EXPECT_EQ(FindControlCharacter("a\xc2\xa0"), std::string_view::npos);  // U+00A0
  EXPECT_EQ(FindControlCharacter("a\xe2\x80\xa8"), 1u);         // U+2028
  EXPECT_EQ(FindControlCharacter("ab\xe2\x80\xae" "cba"), 2u);  // U+202E
  EXPECT_EQ(FindControlCharacter("a\xe2\x81\xa9"), 1u);         // U+2069
  EXPECT_EQ(FindControlCharacter("a\xe2\x81\xa5"), std::string_view::npos);  // U+2065: not one
}

}  // namespace kiln
