// kiln: the Kiln command-line client.
#include <CLI/CLI.hpp>
#include <cstdlib>
#include <iostream>

#include "cli/client.h"
#include "cli/compile_command.h"
#include "cli/model_commands.h"
#include "cli/run_command.h"
#include "cli/vectors_command.h"

int main(int argc, char** argv) {
  CLI::App app{"kiln: client for the Kiln model-compilation server"};
  app.require_subcommand(1);
  kiln::cli::ClientOptions options;
  if (const char* v = std::getenv("KILN_SERVER")) options.server = v;
  if (const char* v = std::getenv("KILN_TOKEN")) options.token = v;
  if (const char* v = std::getenv("KILN_TLS_CA")) options.tls_ca = v;
  app.add_option("--server", options.server, "kilnd address host:port (env KILN_SERVER)");
  app.add_option("--token", options.token, "bearer token (env KILN_TOKEN)");
  app.add_option("--tls-ca", options.tls_ca, "PEM CA certificate; enables TLS (env KILN_TLS_CA)");
  app.add_option("--timeout", options.timeout_seconds, "per-call deadline in seconds (0 = none)");
  app.add_option("--max-message-bytes", options.max_message_bytes,
                 "largest gRPC message sent or received (default 256 MiB)")
      ->check(CLI::Range(4 << 20, 2047 << 20));
  int exit_code = 0;
  kiln::cli::AddModelCommands(app, options, &exit_code);
  kiln::cli::AddVectorsCommand(app, &exit_code);
  kiln::cli::AddCompileCommand(app, options, &exit_code);
  kiln::cli::AddRunCommands(app, options, &exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version print and succeed; any other command-line error is exit status 2.
    return app.exit(e) == 0 ? 0 : 2;
  }
  return exit_code;
}
