// Checker for the golden-vector files of docs/specs/tt-numerics.md §10 / tests/data/tt-vectors/README.md.
// Each *.jsonl file holds one case per line; the kind of a line is recognised from its fields
// (fp32_to_bf16, bfp_pack, unpack_bfp, mvmul, kacc32, elwadd, l1acc), so files may be renamed.
// A line passes when every result field it carries (both `wh` and `bh` where given) equals the
// emulator's bit pattern; informational fields (`id`, `cat`, `ref_f64`, `exact`) are ignored.
// An unknown result field, a malformed line or an unrecognised line counts as a failed line.
#pragma once

#include <cstddef>
#include <ostream>
#include <string>

#include "common/status.h"

namespace kiln::numerics {

/// Outcome of checking one vector file.
struct VectorFileReport {
  std::string file;        ///< file name (no directory)
  size_t passed = 0;       ///< lines whose fields all match
  size_t failed = 0;       ///< lines with at least one mismatch (or unparsable)
  std::string first_failure;  ///< "line L: field F: expected X, got Y; input: ..." (hex), empty if none
};

/// Checks one JSON-Lines vector file. Errors: NOT_FOUND if it cannot be opened.
Result<VectorFileReport> CheckVectorFile(const std::string& path);

/// `kiln vectors DIR`: checks every *.jsonl file in `dir` (sorted by name) and prints, per file,
/// `FILE: N passed, M failed`, followed (when M > 0) by one indented line with the first failing
/// case in hex. Returns 0 when every line of every file passed, 1 otherwise (including: `dir`
/// unreadable, or no *.jsonl file in it; the reason is printed).
int RunVectorDirectory(const std::string& dir, std::ostream& out);

}  // namespace kiln::numerics
