// koi: one binary, one subcommand per role (see docs/architecture.md).
#include <cstdio>
#include <map>

#include "base/logging.h"
#include "cli/command.h"

namespace koi::cli {

std::vector<Command>& command_registry() {
  static std::vector<Command> commands;
  return commands;
}

int fail(const std::string& message) {
  std::fprintf(stderr, "error: %s\n", message.c_str());
  return 1;
}

}  // namespace koi::cli

int main(int argc, char** argv) {
  CLI::App app{"koi: train, serve and schedule large language models"};
  app.require_subcommand(1);
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "debug, info, warn, error or off")->capture_default_str();

  auto& commands = koi::cli::command_registry();
  std::sort(commands.begin(), commands.end(),
            [](const auto& a, const auto& b) { return a.name < b.name; });
  std::map<CLI::App*, koi::cli::Runner> runners;
  for (auto& cmd : commands) {
    CLI::App* sub = app.add_subcommand(cmd.name, cmd.help);
    runners[sub] = cmd.setup(sub);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  koi::log::Level level;
  if (!koi::log::parse_level(log_level, &level)) {
    return koi::cli::fail("--log-level must be one of debug, info, warn, error, off; got '" +
                          log_level + "'");
  }
  koi::log::set_level(level);
  for (CLI::App* sub : app.get_subcommands()) {
    // A subcommand with its own nested subcommands resolves them in its runner.
    return runners[sub]();
  }
  return 1;
}
