// The replica wrapper behind `koi cluster exec --exit-file F --pid-file P -- ARGV...` (see
// local_executor.h): writes its own id ("pid:starttime") to P, runs ARGV in this process's own group, passes the group's signals to
// it by ignoring SIGTERM, SIGINT and SIGHUP itself, waits, and writes "exit N" or
// "signal N" to F atomically. Returns the command's shell exit code (127 if it could not
// start).
#pragma once

#include <string>
#include <vector>

namespace koi::cluster {

int run_replica_wrapper(const std::string& exit_file, const std::string& pid_file, const std::vector<std::string>& argv);

}  // namespace koi::cluster
