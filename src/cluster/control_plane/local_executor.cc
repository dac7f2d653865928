#include "cluster/control_plane/local_executor.h"

#include <fmt/format.h>
#include <signal.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/file.h"
#include "process/mpirun.h"
#include "process/replica_wrapper.h"

namespace koi::cluster {
namespace {

struct Id {
  int pid = -1;
  int64_t start = -1;
};

Id parse_id(const std::string& id) {
  Id out;
  if (std::sscanf(id.c_str(), "%d:%ld", &out.pid, &out.start) != 2) out.pid = -1;
  return out;
}

std::string exit_path(const std::string& dir) { return path_join(dir, "exit"); }

ReplicaStatus from_exit_record(const std::string& dir, bool* found) {
  ReplicaStatus s;
  auto text = read_file(exit_path(dir));
  process::ExitRecord record;
  *found = text.ok() && process::parse_exit_record(*text, &record);
  if (*found) {
    s.state = ReplicaState::kExited;
    s.exit_code = record.code, s.signal = record.signal;
    s.oom_killed = record.oom_killed;
    s.peak_memory_bytes = record.peak_memory_bytes;
    process::ExitStatus e;
    e.code = s.exit_code, e.signal = s.signal;
    s.detail = e.describe();
  }
  return s;
}

}  // namespace

LocalExecutor::LocalExecutor(std::string koi_binary, std::vector<NodeSpec> nodes)
    : koi_binary_(std::move(koi_binary)),
      nodes_(std::move(nodes)),
      sampler_(kNodeUsageIntervalSeconds, kNodeUsageHistory) {}

std::map<std::string, std::vector<NodeUsage>> LocalExecutor::usage(size_t max_samples) const {
  const std::vector<NodeUsage> host = sampler_.samples(max_samples);
  std::map<std::string, std::vector<NodeUsage>> out;
  for (const NodeSpec& n : nodes_) out[n.name] = host;
  return out;
}

LocalExecutor::~LocalExecutor() = default;

Result<ReplicaHandle> LocalExecutor::launch_one(const ReplicaLaunch& r) {
  std::error_code ec;
  std::filesystem::create_directories(r.dir, ec);
  if (ec) return Status::io_error(fmt::format("cannot create the replica directory {}: {}", r.dir, ec.message()));
  std::filesystem::remove(exit_path(r.dir), ec);
  std::filesystem::remove(path_join(r.dir, "pid"), ec);
  process::LaunchOptions o;
  o.argv = process::wrapper_command(koi_binary_);
  o.argv.insert(o.argv.end(), {"--exit-file", exit_path(r.dir), "--pid-file", path_join(r.dir, "pid")});
  if (r.memory_mib > 0) o.argv.insert(o.argv.end(), {"--memory-mib", std::to_string(r.memory_mib)});
  if (r.cpu_milli > 0) o.argv.insert(o.argv.end(), {"--cpu-milli", std::to_string(r.cpu_milli)});
  o.argv.push_back("--");
  o.argv.insert(o.argv.end(), r.argv.begin(), r.argv.end());
  o.env = r.env;
  std::string devices;
  for (int g : r.gpus) devices += (devices.empty() ? "" : ",") + std::to_string(g);
  o.env["CUDA_VISIBLE_DEVICES"] = devices;
  o.cwd = r.dir;
  o.stdout_path = o.stderr_path = path_join(r.dir, "log");
  KOI_ASSIGN_OR_RETURN(process::Process p, process::Process::launch(o));
  const int64_t start = process::process_start_time(p.pid());
  ReplicaHandle h{fmt::format("{}:{}", p.pid(), start), r.dir};
  children_[h.id] = std::make_unique<process::Process>(std::move(p));
  return h;
}

Result<std::vector<ReplicaHandle>> LocalExecutor::launch_mpi(const std::vector<ReplicaLaunch>& gang) {
  ReplicaLaunch all = gang[0];
  all.argv = process::mpirun_prefix(static_cast<int>(gang.size()));
  all.argv.insert(all.argv.end(), gang[0].argv.begin(), gang[0].argv.end());
  all.env.erase("KOI_REPLICA");  // each rank knows its own from mpirun (OMPI_COMM_WORLD_RANK)
  for (size_t i = 1; i < gang.size(); ++i) {
    all.gpus.insert(all.gpus.end(), gang[i].gpus.begin(), gang[i].gpus.end());
    all.memory_mib += gang[i].memory_mib;
    all.cpu_milli += gang[i].cpu_milli;
  }
  KOI_ASSIGN_OR_RETURN(ReplicaHandle h, launch_one(all));
  return std::vector<ReplicaHandle>(gang.size(), h);
}

Result<std::vector<ReplicaHandle>> LocalExecutor::launch(const std::vector<ReplicaLaunch>& gang) {
  if (gang.size() > 1 && gang[0].mpi) return launch_mpi(gang);
  std::vector<ReplicaHandle> out;
  for (const ReplicaLaunch& r : gang) {
    auto h = launch_one(r);
    if (!h.ok()) {
      for (const ReplicaHandle& started : out) {
        (void)stop(started);
        children_.erase(started.id);  // the destructor reaps it
      }
      return h.status();
    }
    out.push_back(*h);
  }
  return out;
}

bool LocalExecutor::adopt(const ReplicaHandle& replica) {
  if (children_.count(replica.id)) return true;
  const Id id = parse_id(replica.id);
  return id.pid > 0 && process::process_start_time(id.pid) == id.start;
}

ReplicaStatus LocalExecutor::status(const ReplicaHandle& replica) {
  bool found = false;
  auto it = children_.find(replica.id);
  if (it != children_.end()) {
    auto r = it->second->wait_for(std::chrono::milliseconds(0));
    if (r.ok() && !r->has_value()) return ReplicaStatus{};
    ReplicaStatus s = from_exit_record(replica.dir, &found);
    if (!found && r.ok()) {  // the wrapper itself was killed (SIGKILL to the group)
      const process::ExitStatus& e = **r;
      s.state = ReplicaState::kExited;
      s.exit_code = e.code, s.signal = e.signal, s.detail = e.describe();
    } else if (!found) {
      s.state = ReplicaState::kLost;
      s.detail = r.status().message();
    }
    children_.erase(it);
    return s;
  }
  const Id id = parse_id(replica.id);
  if (id.pid > 0 && process::process_start_time(id.pid) == id.start) return ReplicaStatus{};
  ReplicaStatus s = from_exit_record(replica.dir, &found);
  if (!found) {
    s.state = ReplicaState::kLost;
    s.detail = "the replica's process is gone and left no exit record (killed with its wrapper, or its node lost)";
  }
  return s;
}

std::optional<ReplicaHandle> LocalExecutor::find(const std::string& dir) {
  auto text = read_file(path_join(dir, "pid"));
  if (!text.ok()) return std::nullopt;
  std::string id = *text;
  while (!id.empty() && std::isspace(static_cast<unsigned char>(id.back()))) id.pop_back();
  const Id parsed = parse_id(id);
  if (parsed.pid <= 0 || process::process_start_time(parsed.pid) != parsed.start) return std::nullopt;
  return ReplicaHandle{id, dir};
}

Status LocalExecutor::signal(const ReplicaHandle& replica, int sig) {
  const Id id = parse_id(replica.id);
  if (id.pid <= 0) return Status::invalid_argument("not a local replica id: " + replica.id);
  if (!children_.count(replica.id) && process::process_start_time(id.pid) != id.start) return ok_status();  // gone already
  if (::killpg(id.pid, sig) != 0 && errno != ESRCH) {
    return Status::io_error(fmt::format("cannot signal replica {}: {}", replica.id, std::strerror(errno)));
  }
  return ok_status();
}

std::vector<process::StoppedProcess> LocalExecutor::stopped(const ReplicaHandle& replica) const {
  const Id id = parse_id(replica.id);
  if (id.pid <= 0 || process::process_start_time(id.pid) != id.start) return {};  // gone: nothing stopped
  return process::stopped_processes(id.pid);
}

Result<std::string> read_replica_log(const std::string& dir, int64_t offset, int64_t max_bytes) {
  const std::string path = path_join(dir, "log");
  std::ifstream f(path, std::ios::binary);
  if (!f) return std::string();
  f.seekg(0, std::ios::end);
  const int64_t size = f.tellg();
  if (offset < 0) offset = std::max<int64_t>(0, size + offset);  // negative: the last bytes
  if (offset >= size) return std::string();
  const int64_t n = std::min(max_bytes, size - offset);
  std::string out(static_cast<size_t>(n), '\0');
  f.seekg(offset);
  f.read(out.data(), n);
  out.resize(static_cast<size_t>(f.gcount()));
  return out;
}

Result<std::string> LocalExecutor::logs(const ReplicaHandle& replica, int64_t offset, int64_t max_bytes) const {
  return read_replica_log(replica.dir, offset, max_bytes);
}

void LocalExecutor::detach() {
  // Leave the replicas running for the next control plane to adopt: a Process destroyed
  // while its child runs would kill the child's group.
  for (auto& [id, p] : children_) (void)p.release();
  children_.clear();
}

}  // namespace koi::cluster
