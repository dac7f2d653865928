// The subcommand registry of the `koi` binary. Each subcommand lives in one file under
// src/cli and registers itself with KOI_COMMAND: a setup function that declares its flags on
// the CLI11 sub-app and returns the function that runs it (returning the process exit code).
// Registration happens during static initialisation; main() reads the registry once.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace koi::cli {

using Runner = std::function<int()>;
using Setup = std::function<Runner(CLI::App*)>;

struct Command {
  std::string parent;  // "" for a top-level command, else the parent's name ("bench")
  std::string name;
  std::string help;
  Setup setup;  // a parent of nested commands may return an empty Runner
};

std::vector<Command>& command_registry();

struct CommandRegistrar {
  CommandRegistrar(std::string parent, std::string name, std::string help, Setup setup) {
    command_registry().push_back({std::move(parent), std::move(name), std::move(help), std::move(setup)});
  }
};

// Prints "error: <message>" (and an optional hint) to stderr; returns the exit code 1.
int fail(const std::string& message);

// A TCP port flag's value must be 0-65535 (0 picks a free one): "" when it is, else the
// one-line error naming the flag ("--port must be 0-65535 (0 picks a free one); got 70000").
std::string port_error(std::string_view flag, long long port);

}  // namespace koi::cli

#define KOI_COMMAND(name, help, setup) \
  static ::koi::cli::CommandRegistrar koi_command_registrar_##name("", #name, help, setup)

// A child of a parent command: KOI_SUBCOMMAND(bench, model, ...) is `koi bench model`.
#define KOI_SUBCOMMAND(parent, name, help, setup) \
  static ::koi::cli::CommandRegistrar koi_command_registrar_##parent##_##name(#parent, #name, help, setup)
