#include "cli/vectors_command.h"

#include <iostream>

#include "device/numerics/vectors.h"

namespace kiln::cli {

void AddVectorsCommand(CLI::App& app, int* exit_code) {
  static std::string dir;
  auto* cmd = app.add_subcommand(
      "vectors", "check every Tensix vector file (*.jsonl) in DIR bit for bit, in process");
  cmd->add_option("DIR", dir, "directory of vector files (tt-vectors format)")->required();
  cmd->callback([exit_code] { *exit_code = kiln::numerics::RunVectorDirectory(dir, std::cout); });
}

}  // namespace kiln::cli
