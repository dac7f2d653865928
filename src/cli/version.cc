// koi version: prints the version and the instruction-set level the kernels use.
#include "cli/command.h"
#include "kernels/isa.h"

#include <cstdio>

namespace koi::cli {
namespace {

Runner setup_version(CLI::App* app) {
  return [] {
    std::printf("koi 0.1.0\nkernels: %s\n", std::string(kernels::isa_name(kernels::detected_isa())).c_str());
    return 0;
  };
}

}  // namespace
KOI_COMMAND(version, "print the version", setup_version);
}  // namespace koi::cli
