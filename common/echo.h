// Client-supplied text (model names, ids, error messages that quote them) on its way into a log
// line, a grpc-message or a proto3 string: printable ASCII passes, everything else is escaped so
// that a newline cannot forge a log line and invalid UTF-8 cannot break a proto; the result is
// capped so that a 16 MiB id cannot make a 16 MiB log line or an unreadable reply.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace kiln {

/// `text` with \n \r \t \\ written as C escapes and every other byte outside 0x20..0x7e as \xNN,
/// cut to at most `max_bytes` bytes of output (never inside an escape); a cut result ends with
/// "...[N bytes]" naming the input's full size. Output length <= max(max_bytes, 40).
std::string EscapeForEcho(std::string_view text, size_t max_bytes = 256);

/// Model-supplied text on its way to a terminal (the CLI's tables and progress lines): the C0
/// control bytes and DEL written as \xNN (\n, \r, \t as C escapes) and the C1 controls
/// U+0080..U+009F (UTF-8 C2 80..C2 9F) as \u00NN, and a byte 80..BF outside a UTF-8 sequence (an
/// 8-bit C1 control on some terminals) as \xNN, so that an ONNX name cannot clear the screen, set
/// the window title or forge a line; everything else, UTF-8 included, passes unchanged.
std::string EscapeControls(std::string_view text);

/// For text that is refused rather than escaped (api/jobs.h ValidateLabels): the offset of the
/// first character that is not plain text in a table or a terminal — a C0 control, DEL, a C1
/// control (U+0080..U+009F), a line or paragraph separator (U+2028, U+2029), a bidi override or
/// isolate (U+202A..U+202E, U+2066..U+2069: text shown in another order than it is stored) —
/// or std::string_view::npos. `text` is UTF-8 (checked by the caller).
size_t FindControlCharacter(std::string_view text);

}  // namespace kiln
