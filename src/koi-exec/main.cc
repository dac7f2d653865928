// koi-exec: the replica wrapper the cluster's executors start for every replica
// (process/replica_wrapper.h), as a binary of the process module alone: it loads a handful of
// libraries instead of koi's ninety, so a job's launch costs about a millisecond of CPU, not
// tens. The same code runs as `koi cluster exec` where koi-exec is not installed.
//
//   koi-exec --exit-file F [--pid-file P] [--memory-mib M] [--cpu-milli C] -- ARGV...
//   koi-exec join --group G -- ARGV...     (internal: enter limit group G, then exec ARGV)
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "process/replica_wrapper.h"

namespace {

int usage(const std::string& problem) {
  std::fprintf(stderr,
               "koi-exec: %s\n"
               "usage: koi-exec --exit-file F [--pid-file P] [--memory-mib M] [--cpu-milli C] -- ARGV...\n"
               "       koi-exec join --group G -- ARGV...\n",
               problem.c_str());
  return 2;
}

bool parse_count(const char* text, int64_t* out) {
  char* end = nullptr;
  const long long v = std::strtoll(text, &end, 10);
  if (end == text || *end != '\0' || v < 0) return false;
  *out = v;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  const bool join = !args.empty() && args[0] == "join";
  koi::process::WrapperOptions o;
  std::string group;
  size_t i = join ? 1 : 0;
  for (; i < args.size() && args[i] != "--"; ++i) {
    const std::string& flag = args[i];
    if (i + 1 >= args.size()) return usage(flag + " needs a value");
    const std::string& value = args[++i];
    if (join && flag == "--group") {
      group = value;
    } else if (!join && flag == "--exit-file") {
      o.exit_file = value;
    } else if (!join && flag == "--pid-file") {
      o.pid_file = value;
    } else if (!join && flag == "--memory-mib") {
      if (!parse_count(value.c_str(), &o.memory_mib)) return usage("--memory-mib must be a whole number >= 0, got " + value);
    } else if (!join && flag == "--cpu-milli") {
      if (!parse_count(value.c_str(), &o.cpu_milli)) return usage("--cpu-milli must be a whole number >= 0, got " + value);
    } else {
      return usage("unknown flag " + flag);
    }
  }
  if (i >= args.size() || i + 1 == args.size()) return usage("no command after --");
  std::vector<std::string> command(args.begin() + static_cast<std::ptrdiff_t>(i) + 1, args.end());
  if (join) {
    if (group.empty()) return usage("join needs --group");
    return koi::process::run_join(group, command);
  }
  if (o.exit_file.empty()) return usage("--exit-file is required");
  o.argv = std::move(command);
  std::error_code ec;
  o.join_command = {std::filesystem::read_symlink("/proc/self/exe", ec).string(), "join"};
  return koi::process::run_replica_wrapper(o);
}
