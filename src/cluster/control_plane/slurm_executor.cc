#include "cluster/control_plane/slurm_executor.h"

#include "process/replica_wrapper.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <set>
#include <sstream>

#include "base/file.h"
#include "base/logging.h"
#include "cluster/control_plane/local_executor.h"
#include "process/process.h"

namespace koi::cluster {
namespace {

constexpr int kCommandTries = 3;
constexpr auto kInventoryMaxAge = std::chrono::seconds(1);
constexpr auto kJobsMaxAge = std::chrono::milliseconds(100);
constexpr auto kSignalDedup = std::chrono::seconds(2);

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string item;
  std::istringstream in(s);
  while (std::getline(in, item, sep)) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

// Single-quoted for bash: 'it'\''s'.
std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string shell_words(const std::vector<std::string>& argv) {
  std::string out;
  for (const std::string& a : argv) out += (out.empty() ? "" : " ") + shell_quote(a);
  return out;
}

// A node takes new work in these base states, and with none of the flags below.
bool schedulable(const std::string& state) {
  const std::vector<std::string> parts = split(upper(state), '+');
  if (parts.empty()) return false;
  static const std::set<std::string> kUp = {"IDLE", "MIXED", "ALLOCATED", "COMPLETING"};
  static const std::set<std::string> kBad = {"DRAIN", "DRAINING", "DRAINED", "NOT_RESPONDING", "FAIL", "FAILING",
                                            "MAINTENANCE", "REBOOT_REQUESTED", "REBOOT_ISSUED", "POWERED_DOWN",
                                            "POWERING_DOWN", "INVALID_REG"};
  if (!kUp.count(parts[0]) || parts[0].ends_with("*")) return false;
  for (size_t i = 1; i < parts.size(); ++i) {
    if (kBad.count(parts[i])) return false;
  }
  return true;
}

// "gpu:h100:2(S:0-1),mps:100" -> type "H100", count 2.
void parse_gres(const std::string& gres, NodeSpec* n) {
  for (const std::string& item : split(gres, ',')) {
    std::string g = item.substr(0, item.find('('));
    std::vector<std::string> f = split(g, ':');
    if (f.empty() || f[0] != "gpu") continue;
    const std::string count = f.back();
    n->gpu_count += std::atoi(count.c_str());
    if (f.size() == 3) n->gpu_type = upper(f[1]);
  }
  if (n->gpu_count > 0 && n->gpu_type.empty()) n->gpu_type = "GPU";
  n->gpu_count = std::min(n->gpu_count, kMaxGpusPerNode);
}

bool terminal(const std::string& state) {
  static const std::set<std::string> kDone = {"COMPLETED", "FAILED",    "CANCELLED", "TIMEOUT",      "NODE_FAIL",
                                             "PREEMPTED", "BOOT_FAIL", "DEADLINE",  "OUT_OF_MEMORY", "SPECIAL_EXIT",
                                             "REVOKED"};
  return kDone.count(state) > 0;
}

// A pending job whose reason means the nodes Koi placed it on cannot take it.
bool pending_on_lost_node(const std::string& reason) {
  return reason.find("ReqNodeNotAvail") != std::string::npos || reason.find("NodeDown") != std::string::npos ||
         reason.find("BadConstraints") != std::string::npos;
}

struct Id {
  std::string job;
  int task = -1;
};

Id parse_id(const std::string& id) {
  Id out;
  const size_t dot = id.find('.');
  if (dot == std::string::npos || dot == 0) return out;
  out.job = id.substr(0, dot);
  out.task = std::atoi(id.c_str() + dot + 1);
  return out;
}

std::string attempt_dir(const std::string& replica_dir) {
  return std::filesystem::path(replica_dir).parent_path().string();
}

// "; srun said: <last line>" from the attempt's batch log (srun's own errors), or "".
std::string batch_log_tail(const std::string& replica_dir) {
  auto text = read_file(path_join(attempt_dir(replica_dir), "slurm-batch.log"));
  if (!text.ok()) return "";
  std::string t = *text;
  while (!t.empty() && std::isspace(static_cast<unsigned char>(t.back()))) t.pop_back();
  if (t.empty()) return "";
  const size_t nl = t.rfind('\n');
  return "; srun said: " + (nl == std::string::npos ? t : t.substr(nl + 1));
}

}  // namespace

std::vector<std::string> expand_hostlist(const std::string& list) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < list.size()) {
    size_t end = i;
    int depth = 0;
    while (end < list.size() && (depth > 0 || list[end] != ',')) {
      depth += list[end] == '[' ? 1 : list[end] == ']' ? -1 : 0;
      ++end;
    }
    const std::string item = list.substr(i, end - i);
    const size_t open = item.find('['), close = item.find(']');
    if (open == std::string::npos || close == std::string::npos) {
      if (!item.empty()) out.push_back(item);
    } else {
      const std::string prefix = item.substr(0, open), suffix = item.substr(close + 1);
      for (const std::string& range : split(item.substr(open + 1, close - open - 1), ',')) {
        const size_t dash = range.find('-');
        const std::string lo = range.substr(0, dash), hi = dash == std::string::npos ? lo : range.substr(dash + 1);
        for (long v = std::atol(lo.c_str()); v <= std::atol(hi.c_str()); ++v) {
          out.push_back(prefix + fmt::format("{:0{}}", v, lo.size()) + suffix);
        }
      }
    }
    i = end + 1;
  }
  return out;
}

std::map<std::string, std::string> parse_slurm_record(const std::string& line) {
  std::map<std::string, std::string> out;
  // Keys are words followed by '='; a value runs to the next " Key=" (values may hold spaces).
  std::vector<std::pair<size_t, size_t>> keys;  // (start of key, position of '=')
  for (size_t i = 0; i < line.size(); ++i) {
    if (line[i] != '=') continue;
    size_t k = i;
    while (k > 0 && !std::isspace(static_cast<unsigned char>(line[k - 1]))) --k;
    if (k < i && std::isupper(static_cast<unsigned char>(line[k])) && (k == 0 || std::isspace(static_cast<unsigned char>(line[k - 1])))) {
      if (keys.empty() || k > keys.back().second) keys.push_back({k, i});
    }
  }
  for (size_t j = 0; j < keys.size(); ++j) {
    const size_t end = j + 1 < keys.size() ? keys[j + 1].first : line.size();
    std::string value = line.substr(keys[j].second + 1, end - keys[j].second - 1);
    while (!value.empty() && std::isspace(static_cast<unsigned char>(value.back()))) value.pop_back();
    out[line.substr(keys[j].first, keys[j].second - keys[j].first)] = value;
  }
  return out;
}

std::vector<NodeSpec> parse_slurm_nodes(const std::string& nodes_text, const std::string& topology_text) {
  std::map<std::string, std::string> leaf_of, parent_of;  // node -> leaf switch, switch -> parent
  std::istringstream topo(topology_text);
  for (std::string line; std::getline(topo, line);) {
    auto r = parse_slurm_record(line);
    if (!r.count("SwitchName")) continue;
    if (r["Level"] == "0") {
      for (const std::string& n : expand_hostlist(r["Nodes"])) leaf_of[n] = r["SwitchName"];
    }
    for (const std::string& s : expand_hostlist(r["Switches"])) parent_of[s] = r["SwitchName"];
  }
  std::vector<NodeSpec> out;
  std::istringstream in(nodes_text);
  for (std::string line; std::getline(in, line);) {
    auto r = parse_slurm_record(line);
    if (!r.count("NodeName")) continue;
    NodeSpec n;
    n.name = r["NodeName"];
    n.cpu_milli = std::atoll(r.count("CPUEfctv") ? r["CPUEfctv"].c_str() : r["CPUTot"].c_str()) * 1000;
    n.memory_mib = std::atoll(r["RealMemory"].c_str());
    parse_gres(r["Gres"] == "(null)" ? "" : r["Gres"], &n);
    if (leaf_of.count(n.name)) {
      n.leaf_switch = leaf_of[n.name];
      if (parent_of.count(n.leaf_switch)) n.spine = parent_of[n.leaf_switch];
    }
    if (!schedulable(r["State"])) n.state = lower(r["State"]);
    out.push_back(std::move(n));
  }
  std::sort(out.begin(), out.end(), [](const NodeSpec& a, const NodeSpec& b) { return a.name < b.name; });
  return out;
}

std::map<std::string, NodeUsage> parse_slurm_usage(const std::string& nodes_text, double now) {
  std::map<std::string, NodeUsage> out;
  std::istringstream in(nodes_text);
  for (std::string line; std::getline(in, line);) {
    auto r = parse_slurm_record(line);
    if (!r.count("NodeName") || !r.count("CPULoad")) continue;
    const std::optional<double> load = host::parse_loadavg(r["CPULoad"]);  // "N/A" while slurmd is silent
    if (!load) continue;
    NodeUsage u;
    u.time = now;
    u.source = "scontrol";
    u.load_average = load;
    u.gpu_note = "no GPU figures (Slurm reports none)";
    out[r["NodeName"]] = std::move(u);
  }
  return out;
}

Result<std::unique_ptr<SlurmExecutor>> SlurmExecutor::create(SlurmOptions options) {
  std::unique_ptr<SlurmExecutor> e(new SlurmExecutor(std::move(options)));
  auto nodes = e->read_inventory();
  if (!nodes.ok()) {
    return Status::unavailable("the Slurm executor cannot read the inventory (is slurmctld up, SLURM_CONF set?): " +
                               nodes.status().message());
  }
  if (nodes->empty()) {
    return Status::invalid_argument(fmt::format("executor.partition '{}': Slurm reports no nodes in it",
                                                e->options_.partition));
  }
  e->nodes_ = std::move(*nodes);
  e->nodes_time_ = std::chrono::steady_clock::now();
  KOI_ASSIGN_OR_RETURN(std::string config, e->run({"scontrol", "show", "config"}));
  std::istringstream in(config);
  for (std::string line; std::getline(in, line);) {
    // "JobCompLoc              = /path"
    if (line.rfind("JobCompLoc ", 0) == 0) {
      std::string v = line.substr(line.find('=') + 1);
      v.erase(0, v.find_first_not_of(' '));
      if (!v.empty() && v[0] == '/') e->jobcomp_path_ = v;
    }
  }
  return e;
}

Result<std::string> SlurmExecutor::run(const std::vector<std::string>& argv, bool retry,
                                       const std::map<std::string, std::string>& env) const {
  Status last;
  for (int attempt = 0; attempt < (retry ? kCommandTries : 1); ++attempt) {
    int seq = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      seq = ++command_seq_;
    }
    const std::string base = path_join(options_.scratch_dir, fmt::format(".slurm-{}-{}", ::getpid(), seq));
    process::LaunchOptions o;
    o.argv = argv;
    o.env = env;
    o.stdout_path = base + ".out";
    o.stderr_path = base + ".err";
    auto p = process::Process::launch(o);
    if (!p.ok()) return p.status();  // not installed: no point in retrying
    const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(options_.command_timeout_seconds * 1000));
    auto done = p->wait_for(timeout);
    auto out_text = read_file(base + ".out"), err_text = read_file(base + ".err");
    std::string out = out_text.ok() ? *out_text : "", err = err_text.ok() ? *err_text : "";
    std::error_code ec;
    std::filesystem::remove(base + ".out", ec);
    std::filesystem::remove(base + ".err", ec);
    while (!err.empty() && std::isspace(static_cast<unsigned char>(err.back()))) err.pop_back();
    if (!done.ok()) {
      last = done.status();
    } else if (!done->has_value()) {
      (void)p->kill_group();
      (void)p->wait();
      last = Status::unavailable(fmt::format("{} timed out after {:g}s", argv[0], options_.command_timeout_seconds));
    } else if (!(*done)->success()) {
      last = Status::unavailable(fmt::format("{} {}: {}", argv[0], (*done)->describe(), err));
    } else {
      return out;
    }
    log::warn("slurm: {} (try {} of {})", last.message(), attempt + 1, retry ? kCommandTries : 1);
  }
  return last;
}

Result<std::vector<NodeSpec>> SlurmExecutor::read_inventory(std::map<std::string, NodeUsage>* usage) const {
  KOI_ASSIGN_OR_RETURN(std::string nodes, run({"scontrol", "show", "node", "-o"}));
  KOI_ASSIGN_OR_RETURN(std::string topology, run({"scontrol", "show", "topology"}));
  std::string in_partition;
  std::istringstream in(nodes);
  for (std::string line; std::getline(in, line);) {
    auto r = parse_slurm_record(line);
    const std::vector<std::string> parts = split(r["Partitions"], ',');
    if (options_.partition.empty() || std::count(parts.begin(), parts.end(), options_.partition)) {
      in_partition += line + "\n";
    }
  }
  if (usage) {
    *usage = parse_slurm_usage(
        in_partition, std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count());
  }
  return parse_slurm_nodes(in_partition, topology);
}

void SlurmExecutor::add_usage(std::map<std::string, NodeUsage> samples) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [node, sample] : samples) {
    std::deque<NodeUsage>& history = usage_[node];
    history.push_back(std::move(sample));
    while (history.size() > kNodeUsageHistory) history.pop_front();
  }
}

std::map<std::string, std::vector<NodeUsage>> SlurmExecutor::usage(size_t max_samples) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<std::string, std::vector<NodeUsage>> out;
  for (const auto& [node, history] : usage_) {
    const size_t n = std::min(max_samples, history.size());
    out[node].assign(history.end() - static_cast<std::ptrdiff_t>(n), history.end());
  }
  return out;
}

std::vector<NodeSpec> SlurmExecutor::inventory() const {
  std::lock_guard<std::mutex> lock(mu_);
  return nodes_;
}

void SlurmExecutor::refresh_inventory() {
  if (std::chrono::steady_clock::now() - nodes_time_ < kInventoryMaxAge) return;
  nodes_time_ = std::chrono::steady_clock::now();
  std::map<std::string, NodeUsage> usage;
  auto fresh = read_inventory(&usage);
  if (!fresh.ok()) {
    log::warn("slurm: keeping the last inventory: {}", fresh.status().message());
    return;
  }
  add_usage(std::move(usage));
  std::lock_guard<std::mutex> lock(mu_);
  // Keep the order (replica records name nodes by index); a node Slurm no longer lists
  // stays, unschedulable, so that indices never shift.
  std::vector<NodeSpec> merged;
  for (const NodeSpec& old : nodes_) {
    auto it = std::find_if(fresh->begin(), fresh->end(), [&](const NodeSpec& n) { return n.name == old.name; });
    merged.push_back(it != fresh->end() ? *it : old);
    if (it == fresh->end()) merged.back().state = "removed";
  }
  for (const NodeSpec& n : *fresh) {
    if (std::none_of(nodes_.begin(), nodes_.end(), [&](const NodeSpec& o) { return o.name == n.name; })) {
      merged.push_back(n);
    }
  }
  nodes_ = std::move(merged);
}

Result<std::vector<ReplicaHandle>> SlurmExecutor::launch(const std::vector<ReplicaLaunch>& gang) {
  if (gang.empty()) return std::vector<ReplicaHandle>{};
  const std::string dir = attempt_dir(gang[0].dir);
  std::error_code ec;
  for (const ReplicaLaunch& r : gang) {
    if (attempt_dir(r.dir) != dir) return Status::invalid_argument("a Slurm gang's replicas share one attempt directory");
    if (r.gpus.size() != gang[0].gpus.size() || r.cpu_milli != gang[0].cpu_milli || r.memory_mib != gang[0].memory_mib) {
      return Status::invalid_argument("a Slurm gang's replicas must ask for the same resources");
    }
    // plan() would pack fractions that Slurm rounds up, leaving the job pending in Slurm.
    if (r.cpu_milli % 1000 != 0) {
      return Status::invalid_argument(fmt::format(
          "resources.cpu {:g}: Slurm allocates whole CPUs; ask for a whole number", r.cpu_milli / 1000.0));
    }
    std::filesystem::create_directories(r.dir, ec);
    if (ec) return Status::io_error(fmt::format("cannot create the replica directory {}: {}", r.dir, ec.message()));
    std::filesystem::remove(path_join(r.dir, "exit"), ec);
  }
  // A node plan() chose that Slurm now reports down would only leave the job pending.
  const std::vector<NodeSpec> nodes_now = inventory();
  for (const ReplicaLaunch& r : gang) {
    for (const NodeSpec& n : nodes_now) {
      if (n.name == r.node_name && !n.state.empty()) {
        return Status::unavailable(fmt::format("node {} is {} in Slurm", n.name, n.state));
      }
    }
  }
  std::string hostfile, tasks, nodelist;
  std::set<std::string> nodes;
  for (size_t i = 0; i < gang.size(); ++i) {
    const ReplicaLaunch& r = gang[i];
    hostfile += r.node_name + "\n";
    if (nodes.insert(r.node_name).second) nodelist += (nodelist.empty() ? "" : ",") + r.node_name;
    std::string env;
    for (const auto& [k, v] : r.env) env += " " + shell_quote(k + "=" + v);
    std::vector<std::string> wrapper = process::wrapper_command(options_.koi_binary);
    wrapper.insert(wrapper.end(), {"--exit-file", path_join(r.dir, "exit"), "--pid-file", path_join(r.dir, "pid"), "--"});
    wrapper.insert(wrapper.end(), r.argv.begin(), r.argv.end());
    tasks += fmt::format("  {}) cd {} && exec env{} {} >> {} 2>&1 ;;\n", i, shell_quote(r.dir), env, shell_words(wrapper),
                         shell_quote(path_join(r.dir, "log")));
  }
  const std::string hostfile_path = path_join(dir, "slurm-hostfile");
  const std::string task_path = path_join(dir, "slurm-task.sh"), batch_path = path_join(dir, "slurm-batch.sh");
  const int cpus = std::max<int>(1, static_cast<int>(gang[0].cpu_milli / 1000));
  const int64_t mem_per_cpu = std::max<int64_t>(1, (gang[0].memory_mib + cpus - 1) / cpus);
  const std::string mpi = gang[0].mpi ? options_.mpi : "none";
  KOI_RETURN_IF_ERROR(write_file_atomic(hostfile_path, hostfile));
  KOI_RETURN_IF_ERROR(write_file_atomic(
      task_path, "#!/bin/bash\n# One Koi replica per Slurm task, picked by the task's rank.\ncase \"$SLURM_PROCID\" in\n" +
                     tasks + "esac\necho \"koi: no replica for task $SLURM_PROCID\" >&2\nexit 127\n"));
  KOI_RETURN_IF_ERROR(write_file_atomic(
      batch_path, fmt::format("#!/bin/bash\n# Koi attempt {}: one srun step, one task per replica.\n"
                              "export SLURM_HOSTFILE={}\nexec srun --mpi={} --distribution=arbitrary --ntasks={} "
                              "--kill-on-bad-exit=0 /bin/bash {}\n",
                              dir, shell_quote(hostfile_path), mpi, gang.size(), shell_quote(task_path))));
  const std::filesystem::path p(dir);
  const std::string job_name = fmt::format("koi-{}-{}-{}", p.parent_path().parent_path().filename().string(),
                                           p.parent_path().filename().string(), p.filename().string());
  std::vector<std::string> argv = {"sbatch", "--parsable", "--job-name=" + job_name, "--nodelist=" + nodelist,
                                   fmt::format("--ntasks={}", gang.size()), "--distribution=arbitrary",
                                   fmt::format("--cpus-per-task={}", cpus), fmt::format("--mem-per-cpu={}", mem_per_cpu),
                                   "--no-requeue", "--chdir=" + dir, "--output=" + path_join(dir, "slurm-batch.log")};
  if (!gang[0].gpus.empty()) argv.push_back(fmt::format("--gpus-per-task={}", gang[0].gpus.size()));
  if (!options_.partition.empty()) argv.push_back("--partition=" + options_.partition);
  argv.push_back(batch_path);
  // sbatch reads the task layout from SLURM_HOSTFILE; a retried sbatch could submit twice.
  auto out = run(argv, false, {{"SLURM_HOSTFILE", hostfile_path}});
  if (!out.ok()) return out.status();
  std::string job = out->substr(0, out->find_first_of(";\n"));
  if (job.empty() || job.find_first_not_of("0123456789") != std::string::npos) {
    return Status::internal("sbatch --parsable printed no job id: " + *out);
  }
  std::vector<ReplicaHandle> handles;
  for (size_t i = 0; i < gang.size(); ++i) handles.push_back({fmt::format("{}.{}", job, i), gang[i].dir});
  jobs_time_ = {};  // the next status() asks squeue again
  return handles;
}

Status SlurmExecutor::refresh_jobs() {
  if (std::chrono::steady_clock::now() - jobs_time_ < kJobsMaxAge) return ok_status();
  KOI_ASSIGN_OR_RETURN(std::string out, run({"squeue", "-h", "--states=all", "-o", "%i|%T|%r|%Z|%N"}));
  std::map<std::string, JobState> jobs;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> f;
    std::string item;
    std::istringstream fields(line);
    while (std::getline(fields, item, '|')) f.push_back(item);
    if (f.size() < 4) continue;
    jobs[f[0]] = JobState{f[1], f[2], f[3], f.size() > 4 ? f[4] : "", true};
  }
  jobs_ = std::move(jobs);
  jobs_time_ = std::chrono::steady_clock::now();
  return ok_status();
}

SlurmExecutor::JobState SlurmExecutor::job_state(const std::string& job_id) {
  auto it = jobs_.find(job_id);
  if (it != jobs_.end()) return it->second;
  // Forgotten by slurmctld (MinJobAge): the job-completion log has its end.
  if (!jobcomp_path_.empty()) {
    auto text = read_file(jobcomp_path_);
    if (text.ok()) {
      std::istringstream in(*text);
      JobState found;
      for (std::string line; std::getline(in, line);) {
        if (line.rfind("JobId=" + job_id + " ", 0) != 0) continue;
        auto r = parse_slurm_record(line);
        found = JobState{r["JobState"], "", r["WorkDir"], r["NodeList"], true};
      }
      if (found.known) return found;
    }
  }
  return JobState{};
}

bool SlurmExecutor::adopt(const ReplicaHandle& replica) {
  const Id id = parse_id(replica.id);
  if (id.task < 0) return false;
  if (!refresh_jobs().ok()) return true;  // unknown is not gone: status() will tell
  const JobState j = job_state(id.job);
  return j.known && !terminal(j.state);
}

ReplicaStatus SlurmExecutor::status(const ReplicaHandle& replica) {
  const Id id = parse_id(replica.id);
  ReplicaStatus s;
  if (id.task < 0) {
    s.state = ReplicaState::kLost;
    s.detail = "not a Slurm replica id: " + replica.id;
    return s;
  }
  if (Status q = refresh_jobs(); !q.ok()) return s;  // squeue failed 3 times: still running, as far as we know
  const JobState j = job_state(id.job);
  if (j.state == "NODE_FAIL" || j.state == "BOOT_FAIL") {
    s.state = ReplicaState::kLost;
    s.detail = fmt::format("Slurm job {} ended {}: a node of the allocation failed", id.job, j.state);
    return s;
  }
  bool exited = false;
  auto record = read_file(path_join(replica.dir, "exit"));
  process::ExitRecord exit_record;
  if (record.ok() && process::parse_exit_record(*record, &exit_record)) {
    exited = true;
    s.exit_code = exit_record.code, s.signal = exit_record.signal;
    s.oom_killed = exit_record.oom_killed, s.peak_memory_bytes = exit_record.peak_memory_bytes;
  }
  if (exited && (s.exit_code != 0 || s.signal != 0) && !terminal(j.state)) {
    // A rank that failed because a peer's node died is a lost node, not a failure (when
    // Slurm has noticed by now; see docs/cluster.md for the race).
    if (std::string gone = lost_node(j); !gone.empty()) {
      s.state = ReplicaState::kLost;
      s.detail = fmt::format("replica {} ended while node {} of Slurm job {}", id.task, gone, id.job);
      return s;
    }
  }
  if (exited) {
    s.state = ReplicaState::kExited;
    process::ExitStatus e;
    e.code = s.exit_code, e.signal = s.signal;
    s.detail = e.describe();
    return s;
  }
  if (!j.known) {
    s.state = ReplicaState::kLost;
    s.detail = fmt::format("Slurm has no record of job {} and replica {} left no exit record{}", id.job, id.task,
                           batch_log_tail(replica.dir));
    return s;
  }
  if (terminal(j.state)) {
    s.state = ReplicaState::kLost;
    s.detail = fmt::format("Slurm job {} ended {} and replica {} left no exit record{}", id.job, j.state, id.task,
                           batch_log_tail(replica.dir));
    return s;
  }
  if (j.state == "PENDING" && pending_on_lost_node(j.reason)) {
    (void)signal_job(id.job, SIGKILL);
    s.state = ReplicaState::kLost;
    s.detail = fmt::format("Slurm job {} cannot start where it was placed ({})", id.job, j.reason);
    return s;
  }
  return s;  // PENDING, CONFIGURING, RUNNING, COMPLETING, SUSPENDED: still ours
}

std::optional<ReplicaHandle> SlurmExecutor::find(const std::string& dir) {
  if (!refresh_jobs().ok()) return std::nullopt;
  const std::string want = attempt_dir(dir);
  for (const auto& [job, state] : jobs_) {
    if (state.work_dir == want && !terminal(state.state)) {
      return ReplicaHandle{job + "." + std::filesystem::path(dir).filename().string(), dir};
    }
  }
  return std::nullopt;
}

std::string SlurmExecutor::lost_node(const JobState& job) {
  refresh_inventory();
  const std::vector<NodeSpec> nodes = inventory();
  for (const std::string& name : expand_hostlist(job.nodes)) {
    for (const NodeSpec& n : nodes) {
      if (n.name == name && !n.state.empty()) return name + " is " + n.state;
    }
  }
  return "";
}

Status SlurmExecutor::signal_job(const std::string& job, int sig) {
  const auto now = std::chrono::steady_clock::now();
  auto it = signalled_.find({job, sig});
  if (it != signalled_.end() && now - it->second < kSignalDedup) return ok_status();
  std::erase_if(signalled_, [&](const auto& entry) { return now - entry.second >= kSignalDedup; });
  signalled_[{job, sig}] = now;
  if (sig == SIGKILL) {
    auto killed = run({"scancel", "--signal=KILL", "--full", job});
    if (!killed.ok()) return killed.status();
    return run({"scancel", job}).status();
  }
  return run({"scancel", fmt::format("--signal={}", sig), job}).status();
}

Status SlurmExecutor::signal(const ReplicaHandle& replica, int sig) {
  const Id id = parse_id(replica.id);
  if (id.task < 0) return Status::invalid_argument("not a Slurm replica id: " + replica.id);
  return signal_job(id.job, sig);
}

Status SlurmExecutor::stop(const ReplicaHandle& replica) { return signal(replica, SIGKILL); }

Result<std::string> SlurmExecutor::logs(const ReplicaHandle& replica, int64_t offset, int64_t max_bytes) const {
  return read_replica_log(replica.dir, offset, max_bytes);
}

}  // namespace koi::cluster
