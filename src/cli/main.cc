// koi: one binary, one subcommand per role (see docs/architecture.md).
#include <cstdio>
#include <map>
#include <tuple>

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

std::string port_error(std::string_view flag, long long port) {
  if (port >= 0 && port <= 65535) return "";
  return std::string(flag) + " must be 0-65535 (0 picks a free one); got " + std::to_string(port);
}

}  // namespace koi::cli

int main(int argc, char** argv) {
  CLI::App app{"koi: train, serve and schedule large language models"};
  app.require_subcommand(1);
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "debug, info, warn, error or off")->capture_default_str();

  auto& commands = koi::cli::command_registry();
  std::sort(commands.begin(), commands.end(), [](const auto& a, const auto& b) {
    return std::tie(a.parent, a.name) < std::tie(b.parent, b.name);  // parents ("") first
  });
  std::map<CLI::App*, koi::cli::Runner> runners;
  std::map<std::string, CLI::App*> top_level;
  for (auto& cmd : commands) {
    CLI::App* parent = &app;
    if (!cmd.parent.empty()) {
      auto it = top_level.find(cmd.parent);
      if (it == top_level.end()) {
        std::fprintf(stderr, "internal error: command '%s' has no parent '%s'\n", cmd.name.c_str(), cmd.parent.c_str());
        return 2;
      }
      parent = it->second;
    }
    CLI::App* sub = parent->add_subcommand(cmd.name, cmd.help);
    if (cmd.parent.empty()) top_level[cmd.name] = sub;
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
    for (CLI::App* child : sub->get_subcommands()) {
      if (runners[child]) return runners[child]();
    }
    if (runners[sub]) return runners[sub]();
    std::fprintf(stderr, "error: 'koi %s' needs a subcommand; see koi %s --help\n", sub->get_name().c_str(),
                 sub->get_name().c_str());
    return 1;
  }
  return 1;
}
