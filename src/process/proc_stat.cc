#include "process/proc_stat.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
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

std::vector<StoppedProcess> stopped_processes(int root) {
  struct Entry {
    int pid = 0, ppid = 0;
    char state = 0;
    std::string command;
  };
  std::vector<Entry> all;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || !std::all_of(name.begin(), name.end(), ::isdigit)) continue;
    // /proc/PID/stat: "pid (comm) state ppid ..."; comm may hold spaces and parentheses.
    const std::string stat = read_all("/proc/" + name + "/stat");
    const size_t open = stat.find('('), close = stat.rfind(')');
    if (open == std::string::npos || close == std::string::npos || close < open) continue;
    Entry e;
    std::istringstream rest(stat.substr(close + 1));
    if (!(rest >> e.state >> e.ppid)) continue;
    e.pid = std::atoi(name.c_str());
    e.command = stat.substr(open + 1, close - open - 1);
    all.push_back(std::move(e));
  }
  std::set<int> tree = {root};  // grown to a fixed point: a child may be listed before its parent
  for (bool grew = true; grew;) {
    grew = false;
    for (const Entry& e : all) grew = (tree.count(e.ppid) && tree.insert(e.pid).second) || grew;
  }
  std::vector<StoppedProcess> out;
  for (const Entry& e : all) {
    if (!tree.count(e.pid) || (e.state != 'T' && e.state != 't')) continue;
    out.push_back({e.pid, rank_of(e.pid), e.command});
  }
  std::sort(out.begin(), out.end(), [](const StoppedProcess& a, const StoppedProcess& b) { return a.pid < b.pid; });
  return out;
}

std::string describe(const StoppedProcess& p) {
  if (p.rank >= 0) return "rank " + std::to_string(p.rank) + " (pid " + std::to_string(p.pid) + ", " + p.command + ")";
  return "pid " + std::to_string(p.pid) + " (" + p.command + ")";
}

}  // namespace koi::process
