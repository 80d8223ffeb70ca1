// `kiln upload | models | model | rm | health`: the model-store and health subcommands.
#pragma once

#include <CLI/CLI.hpp>

#include "cli/client.h"

namespace kiln::cli {

/// Registers the subcommands on `app`; each sets `*exit_code` when it runs (0 = success).
void AddModelCommands(CLI::App& app, ClientOptions& options, int* exit_code);

/// The name a FILE is stored under: `name` when given, else the file's stem ("m.qat.onnx" ->
/// "m.qat"). Also the default arch of `kiln compile`, with or without a server.
std::string StoredName(const std::string& path, const std::string& name);

/// Streams the file at `path` to UploadModel under StoredName(path, name), with
/// progress on stderr. Returns the model id, or the failure as "CODE: message" in the Status.
Result<std::string> UploadFile(const ClientOptions& options, const std::string& path,
                               std::string name);

}  // namespace kiln::cli
