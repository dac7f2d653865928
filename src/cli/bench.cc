// koi bench: the parent of the benchmark commands (`koi bench model`, `koi bench serve`, ...),
// each registered in its own file with KOI_SUBCOMMAND(bench, ...).
#include "cli/command.h"

namespace koi::cli {
namespace {

Runner setup_bench(CLI::App* app) {
  app->require_subcommand(1);
  return {};
}

}  // namespace
KOI_COMMAND(bench, "benchmarks: model speed, serving load, offline throughput, kernels", setup_bench);
}  // namespace koi::cli
