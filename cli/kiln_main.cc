// kiln: the Kiln command-line client.
#include <CLI/CLI.hpp>
#include <cstdlib>
#include <iostream>

#include "api/version.h"
#include "cli/advise_command.h"
#include "cli/client.h"
#include "cli/compile_command.h"
#include "cli/model_commands.h"
#include "cli/options.h"
#include "cli/run_command.h"
#include "cli/vectors_command.h"

int main(int argc, char** argv) {
  CLI::App app{"kiln: client for the Kiln model-compilation server"};
  app.require_subcommand(1);
  // The connection options below may also follow the subcommand (`kiln models --server H:P`):
  // a subcommand hands the options it does not know to this app (inherited by every subcommand).
  app.fallthrough();
  app.set_version_flag("--version", std::string("kiln ") + kiln::api::KilnVersion());
  kiln::cli::ClientOptions options;
  if (const char* v = std::getenv("KILN_SERVER")) options.server = v;
  if (const char* v = std::getenv("KILN_TLS_CA")) options.tls_ca = v;
  if (const char* v = std::getenv("KILN_TLS_CLIENT_CERT")) options.tls_cert = v;
  if (const char* v = std::getenv("KILN_TLS_CLIENT_KEY")) options.tls_key = v;
  std::string token_flag, token_file;
  app.add_option("--server", options.server, "kilnd address host:port (env KILN_SERVER)")->capture_default_str();
  auto* token_opt = app.add_option(
      "--token", token_flag, "bearer token (env KILN_TOKEN); visible to every user in `ps`: prefer --token-file");
  app.add_option("--token-file", token_file,
                 "file holding the bearer token, surrounding whitespace ignored (env KILN_TOKEN_FILE)")
      ->excludes(token_opt);
  app.add_option("--tls-ca", options.tls_ca, "PEM CA certificate; enables TLS (env KILN_TLS_CA)");
  app.add_option("--tls-cert", options.tls_cert,
                 "PEM client certificate chain for mutual TLS (kilnd --tls-client-ca); with --tls-key and "
                 "--tls-ca (env KILN_TLS_CLIENT_CERT)");
  app.add_option("--tls-key", options.tls_key, "PEM private key of --tls-cert (env KILN_TLS_CLIENT_KEY)");
  app.add_option("--timeout", options.timeout_seconds,
                 "per-call deadline in seconds (0 = none); a job's watch (run, watch, advise) waits for the "
                 "job however long it runs: Ctrl-C stops it")
      ->check(kiln::cli::Between(0, 1e6))  // seconds; the deadline is made in ms (cli/client.cc Prepare)
      ->capture_default_str();
  app.add_option("--max-message-bytes", options.max_message_bytes, "largest gRPC message sent or received")
      ->check(CLI::Range(4 << 20, 2047 << 20))
      ->capture_default_str();
  // Runs after parsing, before the subcommand's callback: the token comes from --token,
  // --token-file, KILN_TOKEN, KILN_TOKEN_FILE, the first one given (cli/client.h ResolveToken).
  app.parse_complete_callback([&] {
    auto token = kiln::cli::ResolveToken(token_flag, token_file);
    if (!token.ok()) throw CLI::ValidationError("--token-file", token.status().message());
    options.token = *token;
  });
  int exit_code = 0;
  kiln::cli::AddModelCommands(app, options, &exit_code);
  kiln::cli::AddVectorsCommand(app, &exit_code);
  kiln::cli::AddCompileCommand(app, options, &exit_code);
  kiln::cli::AddRunCommands(app, options, &exit_code);
  kiln::cli::AddAdviseCommand(app, options, &exit_code);
  // CLI11 reports a mistyped command (`kiln list`) as "A subcommand is required": name it and
  // the commands instead. The first word that is neither an option nor a global option's value
  // is the command.
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") break;
    if (!arg.empty() && arg[0] == '-') {
      if (arg.find('=') == std::string::npos && app.get_option_no_throw(arg) != nullptr &&
          app.get_option_no_throw(arg)->get_items_expected_max() > 0) {
        ++i;  // its value
      }
      continue;
    }
    std::string commands;
    bool known = false;
    for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
      known = known || sub->check_name(arg);
      commands += (commands.empty() ? "" : ", ") + sub->get_name();
    }
    if (!known) {
      std::cerr << "kiln: unknown command '" << arg << "' (commands: " << commands << "; kiln --help)\n";
      return 2;
    }
    break;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version print and succeed; any other command-line error is exit status 2.
    return app.exit(e) == 0 ? 0 : 2;
  }
  return exit_code;
}
