#include "process/mpirun.h"

#include <unistd.h>

namespace koi::process {

std::vector<std::string> mpirun_prefix(int nproc) {
  std::vector<std::string> cmd = {"mpirun", "--oversubscribe", "--bind-to", "none"};
  if (::geteuid() == 0) cmd.push_back("--allow-run-as-root");
  cmd.insert(cmd.end(), {"-np", std::to_string(nproc)});
  return cmd;
}

}  // namespace koi::process
