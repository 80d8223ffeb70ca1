// `kiln vectors DIR`: checks Tensix golden-vector files in process (no server); see
// device/numerics/vectors.h for the file format and the output.
#pragma once

#include <CLI/CLI.hpp>

namespace kiln::cli {

/// Registers `vectors`; sets `*exit_code` to 1 on any mismatch, 0 when every line passed.
void AddVectorsCommand(CLI::App& app, int* exit_code);

}  // namespace kiln::cli
