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

/// Stores the file at `path` under StoredName(path, name) and returns its model id, or the
/// failure as "CODE: message" in the Status. Asks LookupModel first (the name is checked, and
/// bytes already stored by sha256 are not sent again: a header-only UploadModel names them, or
/// nothing is sent when the name already points at them); otherwise streams the bytes with
/// progress on stderr. A kilnd without LookupModel gets the whole upload.
Result<std::string> UploadFile(const ClientOptions& options, const std::string& path,
                               std::string name);

/// True when a MODEL argument reads as a file path rather than a stored model's id, name or id
/// prefix: it holds a '/' or ends in ".onnx" (a model name may not contain '/').
bool LooksLikePath(const std::string& arg);

/// The model reference for a MODEL argument of `kiln compile` / `kiln run`: a file is stored
/// (UploadFile) and its id returned; an argument that LooksLikePath but is no file is NOT_FOUND
/// "no such file: ARG"; anything else is returned as it is (the server resolves ids, names and
/// id prefixes: api/models.h ResolveModelRef).
Result<std::string> ModelRefForArg(const ClientOptions& options, const std::string& arg,
                                   const std::string& name);

}  // namespace kiln::cli
