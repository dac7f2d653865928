#include "process/proc_stat.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace koi::process {
namespace {

std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The rank a launcher gave the process, from its environment; -1 without one.
int rank_of(int pid) {
  const std::string env = read_all("/proc/" + std::to_string(pid) + "/environ");
  for (const char* key : {"OMPI_COMM_WORLD_RANK=", "PMI_RANK=", "SLURM_PROCID="}) {
    size_t at = 0;
    const std::string k = key;
    while ((at = env.find(k, at)) != std::string::npos) {
      if (at == 0 || env[at - 1] == '\0') return std::atoi(env.c_str() + at + k.size());
      at += k.size();
    }
  }
  return -1;
}

}  // namespace

std::vector<StoppedProcess> stopped_processes(int pgid) {
  std::vector<StoppedProcess> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || !std::all_of(name.begin(), name.end(), ::isdigit)) continue;
    // /proc/PID/stat: "pid (comm) state ppid pgrp ..."; comm may hold spaces and parentheses.
    const std::string stat = read_all("/proc/" + name + "/stat");
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 1));
    char state = 0;
    int ppid = 0, pgrp = 0;
    if (!(rest >> state >> ppid >> pgrp) || pgrp != pgid || (state != 'T' && state != 't')) continue;
    StoppedProcess p;
    p.pid = std::atoi(name.c_str());
    p.rank = rank_of(p.pid);
    const size_t open = stat.find('(');
    p.command = open == std::string::npos ? "" : stat.substr(open + 1, close - open - 1);
    out.push_back(std::move(p));
  }
  std::sort(out.begin(), out.end(), [](const StoppedProcess& a, const StoppedProcess& b) { return a.pid < b.pid; });
  return out;
}

std::string describe(const StoppedProcess& p) {
  if (p.rank >= 0) return "rank " + std::to_string(p.rank) + " (pid " + std::to_string(p.pid) + ", " + p.command + ")";
  return "pid " + std::to_string(p.pid) + " (" + p.command + ")";
}

}  // namespace koi::process
