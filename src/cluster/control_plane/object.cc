#include "cluster/control_plane/object.h"

#include <fmt/format.h>

#include <boost/json.hpp>
#include <chrono>
#include <cmath>
#include <ctime>

#include "cluster/control_plane/yaml_reader.h"

namespace koi::cluster {
namespace json = boost::json;

namespace {

constexpr const char* kKindNames[] = {"train", "finetune", "eval", "command"};
constexpr const char* kPhaseNames[] = {"Pending",   "Admitted",  "Running",   "Succeeded",
                                       "Failed",    "Cancelled", "Preempted", "Restarting"};

bool valid_env_name(const std::string& s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  for (char c : s) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  }
  return true;
}

// By Topology value; the names of the sim's job specs (spec.cc).
constexpr const char* kTopologyNames[] = {"none", "nvlinkDomain", "leafSwitch", "spine"};

std::optional<Topology> topology_from_name(const std::string& name) {
  for (int i = 0; i < 4; ++i) {
    if (name == kTopologyNames[i]) return static_cast<Topology>(i);
  }
  return std::nullopt;
}

// resources.gpu: 0, whole devices (1-16) or a share of one (0 < gpu < 1, in thousandths);
// resources.migSlices: slices of one MIG device.
void parse_gpus(YamlReader& res, JobResources* r) {
  if (auto gpu = res.number("gpu", 0, 16)) {
    if (*gpu > 0 && *gpu < 1) {
      const double milli = *gpu * kGpuMilli;
      if (std::abs(milli - std::round(milli)) > 1e-6) {
        res.fail(res.field("gpu"), "a share of a GPU is in thousandths (0.001 to 0.999)");
      }
      r->gpu = 1;
      r->gpu_milli = static_cast<int>(std::lround(milli));
    } else if (*gpu != std::floor(*gpu)) {
      res.fail(res.field("gpu"), "must be a whole number of GPUs, or a share of one below 1");
    } else {
      r->gpu = static_cast<int>(*gpu);
    }
  }
  if (auto slices = res.int64("migSlices", 1, 7)) {
    if (r->gpu > 1 || r->gpu_milli < kGpuMilli) res.fail(res.field("migSlices"), "takes slices of one GPU: set gpu to 1 or leave it out");
    r->gpu = 1;
    r->mig_slices = static_cast<int>(*slices);
  }
  r->gpu_type = res.str("gpuType");
  if (!r->gpu_type.empty() && r->gpu == 0) res.fail(res.field("gpuType"), "is set but resources.gpu is 0");
}

}  // namespace

void parse_job_spec(YamlReader& spec, JobSpec* s) {
  const std::string kind = spec.str("kind", "command");
  bool known_kind = false;
  for (int i = 0; i < 4; ++i) {
    if (kind == kKindNames[i]) s->kind = static_cast<JobKind>(i), known_kind = true;
  }
  if (!known_kind) spec.fail(spec.field("kind"), "must be one of train, finetune, eval, command (got '" + kind + "')");
  s->command = spec.strings("command");
  s->recipe = spec.str("recipe");
  s->args = spec.strings("args");
  if (s->kind == JobKind::kCommand && s->command.empty()) {
    spec.fail(spec.field("command"), "is required for kind command (the argv to run)");
  }
  if ((s->kind == JobKind::kTrain || s->kind == JobKind::kFinetune)) {
    if (s->recipe.empty()) spec.fail(spec.field("recipe"), "is required for kind " + kind + " (a koi train recipe path)");
    if (!s->command.empty()) spec.fail(spec.field("command"), "is not allowed for kind " + kind + "; use recipe and args");
    if (!s->recipe.empty() && s->recipe[0] != '/') spec.fail(spec.field("recipe"), "must be an absolute path");
  }
  if (s->kind == JobKind::kEval && s->command.empty() && s->args.empty()) {
    spec.fail(spec.field("args"), "kind eval needs args (for koi eval) or a command");
  }
  for (size_t i = 0; i < s->command.size(); ++i) {
    if (s->command[i].empty() && i == 0) spec.fail(spec.field("command") + "[0]", "must not be empty");
  }
  s->replicas = static_cast<int>(spec.int64("replicas", 1, 64).value_or(1));
  YamlReader res = spec.child("resources");
  parse_job_resources(res, &s->resources);
  const std::string topology = spec.str("topology", "none");
  if (auto t = topology_from_name(topology)) {
    s->topology = *t;
  } else {
    spec.fail(spec.field("topology"), "must be one of none, nvlinkDomain, leafSwitch, spine (got '" + topology + "')");
  }
  s->queue = spec.str("queue");
  s->priority = static_cast<int>(spec.int64("priority", -1000000, 1000000).value_or(0));
  s->preemptible = spec.boolean("preemptible").value_or(true);
  s->max_runtime_seconds = spec.number("maxRuntimeSeconds", 0, 1e9).value_or(0);
  YamlReader rp = spec.child("restartPolicy");
  s->restart.max_restarts = static_cast<int>(rp.int64("maxRestarts", 0, 1000).value_or(3));
  s->restart.backoff_seconds = rp.number("backoffSeconds", 0, 86400).value_or(10);
  s->restart.max_backoff_seconds = rp.number("maxBackoffSeconds", 0, 86400).value_or(600);
  if (s->restart.max_backoff_seconds < s->restart.backoff_seconds) {
    rp.fail(rp.field("maxBackoffSeconds"), "must be >= backoffSeconds");
  }
  s->restart.retry_exit_codes = rp.ints("retryExitCodes", 1, 255);
  s->restart.never_retry_exit_codes = rp.ints("neverRetryExitCodes", 1, 255);
  for (int64_t c : s->restart.retry_exit_codes) {
    for (int64_t d : s->restart.never_retry_exit_codes) {
      if (c == d) rp.fail(rp.field("neverRetryExitCodes"), fmt::format("exit code {} is also in retryExitCodes", c));
    }
  }
  s->checkpoint_dir = spec.str("checkpointDir");
  if (!s->checkpoint_dir.empty() && s->checkpoint_dir[0] != '/') {
    spec.fail(spec.field("checkpointDir"), "must be an absolute path");
  }
  s->env = spec.string_map("env");
  for (const auto& [k, v] : s->env) {
    if (!valid_env_name(k)) spec.fail(spec.field("env") + "." + k, "is not a valid environment variable name");
    if (k.starts_with("KOI_") || k == "CUDA_VISIBLE_DEVICES") {
      spec.fail(spec.field("env") + "." + k, "is set by the control plane and cannot be overridden");
    }
  }
  s->hang_timeout_seconds = spec.number("hangTimeoutSeconds", 0, 1e7).value_or(0);
  s->termination_grace_seconds = spec.number("terminationGracePeriodSeconds", 0, 3600).value_or(30);
}

namespace {

// JSON helpers that tolerate absent fields (the store's own records).
const json::value* find(const json::object& o, std::string_view k) { return o.if_contains(k); }
std::string jstr(const json::object& o, std::string_view k) {
  const json::value* v = find(o, k);
  return v && v->is_string() ? std::string(v->as_string()) : "";
}
double jnum(const json::object& o, std::string_view k, double fallback = 0) {
  const json::value* v = find(o, k);
  return v && v->is_number() ? v->to_number<double>() : fallback;
}
bool jbool(const json::object& o, std::string_view k, bool fallback) {
  const json::value* v = find(o, k);
  return v && v->is_bool() ? v->as_bool() : fallback;
}
const json::object& jobj(const json::object& o, std::string_view k) {
  static const json::object empty;
  const json::value* v = find(o, k);
  return v && v->is_object() ? v->as_object() : empty;
}
const json::array& jarr(const json::object& o, std::string_view k) {
  static const json::array empty;
  const json::value* v = find(o, k);
  return v && v->is_array() ? v->as_array() : empty;
}
json::array strings_json(const std::vector<std::string>& v) {
  json::array a;
  for (const auto& s : v) a.emplace_back(s);
  return a;
}
std::vector<std::string> strings_of(const json::array& a) {
  std::vector<std::string> out;
  for (const auto& v : a) {
    if (v.is_string()) out.emplace_back(v.as_string());
  }
  return out;
}
template <typename T>
json::array ints_json(const std::vector<T>& v) {
  json::array a;
  for (auto x : v) a.emplace_back(static_cast<int64_t>(x));
  return a;
}
template <typename T>
std::vector<T> ints_of(const json::array& a) {
  std::vector<T> out;
  for (const auto& v : a) {
    if (v.is_number()) out.push_back(static_cast<T>(v.to_number<int64_t>()));
  }
  return out;
}
// Whole numbers as integers ("cpu": 2, not 2E0); others as doubles.
json::value number(double x) {
  if (std::nearbyint(x) == x && std::fabs(x) < 9e15) return static_cast<int64_t>(x);
  return x;
}
json::object map_json(const std::map<std::string, std::string>& m) {
  json::object o;
  for (const auto& [k, v] : m) o[k] = v;
  return o;
}
std::map<std::string, std::string> map_of(const json::object& o) {
  std::map<std::string, std::string> out;
  for (const auto& [k, v] : o) {
    if (v.is_string()) out[std::string(k)] = std::string(v.as_string());
  }
  return out;
}

}  // namespace

void parse_job_resources(YamlReader& res, JobResources* r) {
  if (auto cpu = res.number("cpu", 0.001, 4096)) r->cpu_milli = static_cast<int64_t>(std::llround(*cpu * 1000));
  if (auto mem = res.int64("memoryMiB", 1, int64_t{1} << 30)) r->memory_mib = *mem;
  parse_gpus(res, r);
}

json::object job_resources_json(const JobResources& r) {
  json::object res;
  res["cpu"] = number(static_cast<double>(r.cpu_milli) / 1000.0);
  res["memoryMiB"] = r.memory_mib;
  res["gpu"] = r.gpu_milli < kGpuMilli ? json::value(r.gpu_milli / double{kGpuMilli}) : json::value(r.gpu);
  if (r.mig_slices > 0) res["migSlices"] = r.mig_slices;
  if (!r.gpu_type.empty()) res["gpuType"] = r.gpu_type;
  return res;
}

std::string_view job_kind_name(JobKind kind) { return kKindNames[static_cast<int>(kind)]; }
std::string_view phase_name(JobPhase phase) { return kPhaseNames[static_cast<int>(phase)]; }
std::optional<JobPhase> phase_from_name(std::string_view name) {
  for (int i = 0; i < 8; ++i) {
    if (name == kPhaseNames[i]) return static_cast<JobPhase>(i);
  }
  return std::nullopt;
}
bool is_terminal(JobPhase p) { return p == JobPhase::kSucceeded || p == JobPhase::kFailed || p == JobPhase::kCancelled; }

bool valid_name(std::string_view n) {
  if (n.empty() || n.size() > 63) return false;
  for (char c : n) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return false;
  }
  return n.front() != '-' && n.back() != '-';
}

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string rfc3339(double unix_seconds) {
  const std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

Result<YAML::Node> manifest_document(const std::string& text, const std::string& what) {
  KOI_ASSIGN_OR_RETURN(YAML::Node doc, parse_yaml(text, what));
  if (!doc || doc.IsNull()) return Status::invalid_argument(what + " is empty");
  if (!doc.IsMap()) return Status::invalid_argument(what + ": must be a map with apiVersion, kind, metadata, spec");
  return doc;
}

YamlReader read_manifest_header(YamlReader& top, const std::string& kind, const std::string& ns, ObjectMeta* m) {
  const std::string api = top.str("apiVersion");
  if (api != kApiVersion) top.fail("apiVersion", api.empty() ? "is required (koi/v1)" : "must be koi/v1 (got '" + api + "')");
  const std::string k = top.str("kind");
  if (k != kind) top.fail("kind", k.empty() ? "is required (" + kind + ")" : "must be " + kind + " (got '" + k + "')");
  YamlReader meta = top.child("metadata");
  m->name = meta.str("name");
  if (m->name.empty()) {
    meta.fail(meta.field("name"), "is required");
  } else if (!valid_name(m->name)) {
    meta.fail(meta.field("name"), "must be 1-63 characters of a-z, 0-9 and '-', starting and ending alphanumeric");
  }
  const std::string mns = meta.str("namespace");
  if (!mns.empty() && mns != ns) meta.fail(meta.field("namespace"), "'" + mns + "' does not match the request's namespace '" + ns + "'");
  m->ns = ns;
  m->labels = meta.string_map("labels");
  return meta;
}

Result<JobObject> parse_job_manifest(const std::string& text, const std::string& ns) {
  KOI_ASSIGN_OR_RETURN(YAML::Node doc, manifest_document(text, "job manifest"));
  YamlReader top(doc, "");
  JobObject job;
  read_manifest_header(top, "Job", ns, &job.metadata);
  if (!top.has("spec")) top.fail("spec", "is required");
  YamlReader spec = top.child("spec");
  parse_job_spec(spec, &job.spec);
  KOI_RETURN_IF_ERROR(top.finish());
  return job;
}

json::object meta_json(const ObjectMeta& m) {
  json::object meta;
  meta["name"] = m.name;
  meta["namespace"] = m.ns;
  meta["labels"] = map_json(m.labels);
  meta["resourceVersion"] = std::to_string(m.resource_version);
  meta["uid"] = m.uid;
  meta["creationTimestamp"] = m.creation_timestamp;
  meta["creationTime"] = m.creation_time;
  if (!m.deletion_timestamp.empty()) meta["deletionTimestamp"] = m.deletion_timestamp;
  return meta;
}

ObjectMeta meta_from_json(const json::object& meta) {
  ObjectMeta m;
  m.name = jstr(meta, "name");
  m.ns = jstr(meta, "namespace");
  m.labels = map_of(jobj(meta, "labels"));
  m.resource_version = std::atoll(jstr(meta, "resourceVersion").c_str());
  m.uid = jstr(meta, "uid");
  m.creation_timestamp = jstr(meta, "creationTimestamp");
  m.creation_time = jnum(meta, "creationTime");
  m.deletion_timestamp = jstr(meta, "deletionTimestamp");
  return m;
}

json::value to_json(const JobObject& j) {
  json::object meta = meta_json(j.metadata);

  const JobSpec& s = j.spec;
  json::object spec;
  spec["kind"] = job_kind_name(s.kind);
  if (!s.command.empty()) spec["command"] = strings_json(s.command);
  if (!s.recipe.empty()) spec["recipe"] = s.recipe;
  if (!s.args.empty()) spec["args"] = strings_json(s.args);
  spec["replicas"] = s.replicas;
  if (s.topology != Topology::kNone) spec["topology"] = kTopologyNames[static_cast<int>(s.topology)];
  spec["resources"] = job_resources_json(s.resources);
  spec["queue"] = s.queue;
  spec["priority"] = s.priority;
  spec["preemptible"] = s.preemptible;
  spec["maxRuntimeSeconds"] = number(s.max_runtime_seconds);
  json::object rp;
  rp["maxRestarts"] = s.restart.max_restarts;
  rp["backoffSeconds"] = number(s.restart.backoff_seconds);
  rp["maxBackoffSeconds"] = number(s.restart.max_backoff_seconds);
  rp["retryExitCodes"] = ints_json(s.restart.retry_exit_codes);
  rp["neverRetryExitCodes"] = ints_json(s.restart.never_retry_exit_codes);
  spec["restartPolicy"] = std::move(rp);
  spec["checkpointDir"] = s.checkpoint_dir;
  spec["env"] = map_json(s.env);
  spec["hangTimeoutSeconds"] = number(s.hang_timeout_seconds);
  spec["terminationGracePeriodSeconds"] = number(s.termination_grace_seconds);

  const JobStatus& t = j.status;
  json::object st;
  st["phase"] = phase_name(t.phase);
  st["reason"] = t.reason;
  st["message"] = t.message;
  json::array conds;
  for (const Condition& c : t.conditions) {
    conds.push_back(json::object{{"type", c.type},
                                 {"status", c.status},
                                 {"reason", c.reason},
                                 {"message", c.message},
                                 {"lastTransitionTime", c.last_transition_time}});
  }
  st["conditions"] = std::move(conds);
  st["restarts"] = t.restarts;
  st["attempts"] = t.attempts;
  st["infraRestarts"] = t.infra_restarts;
  if (t.last_exit_code) st["lastExitCode"] = *t.last_exit_code;
  if (t.last_signal) st["lastSignal"] = *t.last_signal;
  if (!t.log_tail.empty()) st["logTail"] = t.log_tail;
  if (t.next_attempt_time > 0) st["nextAttemptTime"] = number(t.next_attempt_time);
  if (t.start_time > 0) st["startTime"] = number(t.start_time);
  if (t.finish_time > 0) st["finishTime"] = number(t.finish_time);
  json::array reps;
  for (const ReplicaRecord& r : t.replicas) {
    reps.push_back(json::object{{"id", r.id},
                                {"dir", r.dir},
                                {"node", r.node},
                                {"gpus", ints_json(r.gpus)},
                                {"exited", r.exited},
                                {"exitCode", r.exit_code},
                                {"signal", r.signal},
                                {"lost", r.lost},
                                {"oomKilled", r.oom_killed},
                                {"peakMemoryBytes", r.peak_memory_bytes}});
    if (!r.lost_detail.empty()) reps.back().as_object()["lostDetail"] = r.lost_detail;
  }
  st["replicas"] = std::move(reps);
  if (!t.terminating.empty()) {
    st["terminating"] = t.terminating;
    st["terminatingMessage"] = t.terminating_message;
    st["killTime"] = number(t.kill_time);
    st["killed"] = t.killed;
  }
  if (!t.preempted_by.empty()) st["preemptedBy"] = t.preempted_by;

  return json::object{{"apiVersion", kApiVersion}, {"kind", "Job"}, {"metadata", std::move(meta)},
                      {"spec", std::move(spec)},   {"status", std::move(st)}};
}

Result<JobObject> job_from_json(const json::value& v) {
  if (!v.is_object()) return Status::corrupt("job record is not a JSON object");
  const json::object& o = v.as_object();
  JobObject j;
  j.metadata = meta_from_json(jobj(o, "metadata"));

  const json::object& spec = jobj(o, "spec");
  JobSpec& s = j.spec;
  const std::string kind = jstr(spec, "kind");
  for (int i = 0; i < 4; ++i) {
    if (kind == kKindNames[i]) s.kind = static_cast<JobKind>(i);
  }
  s.command = strings_of(jarr(spec, "command"));
  s.recipe = jstr(spec, "recipe");
  s.args = strings_of(jarr(spec, "args"));
  s.replicas = static_cast<int>(jnum(spec, "replicas", 1));
  const json::object& res = jobj(spec, "resources");
  s.resources.cpu_milli = static_cast<int64_t>(std::llround(jnum(res, "cpu", 1) * 1000));
  s.resources.memory_mib = static_cast<int64_t>(jnum(res, "memoryMiB", 1024));
  const double gpu = jnum(res, "gpu");
  if (gpu > 0 && gpu < 1) {
    s.resources.gpu = 1;
    s.resources.gpu_milli = static_cast<int>(std::lround(gpu * kGpuMilli));
  } else {
    s.resources.gpu = static_cast<int>(gpu);
  }
  s.resources.mig_slices = static_cast<int>(jnum(res, "migSlices"));
  s.resources.gpu_type = jstr(res, "gpuType");
  s.topology = topology_from_name(jstr(spec, "topology")).value_or(Topology::kNone);
  s.queue = jstr(spec, "queue");
  s.priority = static_cast<int>(jnum(spec, "priority"));
  s.preemptible = jbool(spec, "preemptible", true);
  s.max_runtime_seconds = jnum(spec, "maxRuntimeSeconds");
  const json::object& rp = jobj(spec, "restartPolicy");
  s.restart.max_restarts = static_cast<int>(jnum(rp, "maxRestarts", 3));
  s.restart.backoff_seconds = jnum(rp, "backoffSeconds", 10);
  s.restart.max_backoff_seconds = jnum(rp, "maxBackoffSeconds", 600);
  s.restart.retry_exit_codes = ints_of<int64_t>(jarr(rp, "retryExitCodes"));
  s.restart.never_retry_exit_codes = ints_of<int64_t>(jarr(rp, "neverRetryExitCodes"));
  s.checkpoint_dir = jstr(spec, "checkpointDir");
  s.env = map_of(jobj(spec, "env"));
  s.hang_timeout_seconds = jnum(spec, "hangTimeoutSeconds");
  s.termination_grace_seconds = jnum(spec, "terminationGracePeriodSeconds", 30);

  const json::object& st = jobj(o, "status");
  JobStatus& t = j.status;
  t.phase = phase_from_name(jstr(st, "phase")).value_or(JobPhase::kPending);
  t.reason = jstr(st, "reason");
  t.message = jstr(st, "message");
  for (const auto& c : jarr(st, "conditions")) {
    if (!c.is_object()) continue;
    const json::object& co = c.as_object();
    t.conditions.push_back({jstr(co, "type"), jstr(co, "status"), jstr(co, "reason"), jstr(co, "message"),
                            jstr(co, "lastTransitionTime")});
  }
  t.restarts = static_cast<int>(jnum(st, "restarts"));
  t.attempts = static_cast<int>(jnum(st, "attempts"));
  t.infra_restarts = static_cast<int>(jnum(st, "infraRestarts"));
  if (find(st, "lastExitCode")) t.last_exit_code = static_cast<int>(jnum(st, "lastExitCode"));
  if (find(st, "lastSignal")) t.last_signal = static_cast<int>(jnum(st, "lastSignal"));
  t.log_tail = jstr(st, "logTail");
  t.next_attempt_time = jnum(st, "nextAttemptTime");
  t.start_time = jnum(st, "startTime");
  t.finish_time = jnum(st, "finishTime");
  for (const auto& r : jarr(st, "replicas")) {
    if (!r.is_object()) continue;
    const json::object& ro = r.as_object();
    ReplicaRecord rec;
    rec.id = jstr(ro, "id");
    rec.dir = jstr(ro, "dir");
    rec.node = static_cast<int>(jnum(ro, "node"));
    rec.gpus = ints_of<int>(jarr(ro, "gpus"));
    rec.exited = jbool(ro, "exited", false);
    rec.exit_code = static_cast<int>(jnum(ro, "exitCode"));
    rec.signal = static_cast<int>(jnum(ro, "signal"));
    rec.lost = jbool(ro, "lost", false);
    rec.oom_killed = jbool(ro, "oomKilled", false);
    rec.peak_memory_bytes = static_cast<int64_t>(jnum(ro, "peakMemoryBytes"));
    rec.lost_detail = jstr(ro, "lostDetail");
    t.replicas.push_back(std::move(rec));
  }
  t.terminating = jstr(st, "terminating");
  t.terminating_message = jstr(st, "terminatingMessage");
  t.kill_time = jnum(st, "killTime");
  t.killed = jbool(st, "killed", false);
  t.preempted_by = jstr(st, "preemptedBy");
  return j;
}

json::value node_object_json(const NodeSpec& n) {
  json::object spec{{"cpu", number(static_cast<double>(n.cpu_milli) / 1000.0)}, {"memoryMiB", n.memory_mib}};
  if (n.gpu_count > 0) {
    spec["gpus"] = json::object{{"type", n.gpu_type}, {"count", n.gpu_count}, {"memoryMiB", n.gpu_memory_mib}};
  }
  json::object topology;
  if (!n.nvlink_domain.empty()) topology["nvlinkDomain"] = n.nvlink_domain;
  if (!n.leaf_switch.empty()) topology["leafSwitch"] = n.leaf_switch;
  if (!n.spine.empty()) topology["spine"] = n.spine;
  if (!topology.empty()) spec["topology"] = std::move(topology);
  // spec.unschedulable, as a cordoned Kubernetes node: the executor's word for why.
  if (!n.state.empty()) spec["unschedulable"] = n.state;
  return json::object{{"apiVersion", kApiVersion}, {"kind", "Node"},
                      {"metadata", json::object{{"name", n.name}}}, {"spec", std::move(spec)}};
}

json::value queue_object_json(const QueueSpec& q) {
  json::object quota;
  for (const auto& [res, qt] : q.quota) {
    const double scale = res == "memory" ? 1.0 : 1000.0;
    json::object o{{"nominal", number(static_cast<double>(qt.nominal) / scale)}};
    if (qt.borrowing_limit >= 0) o["borrowingLimit"] = number(static_cast<double>(qt.borrowing_limit) / scale);
    if (qt.lending_limit >= 0) o["lendingLimit"] = number(static_cast<double>(qt.lending_limit) / scale);
    quota[res] = std::move(o);
  }
  json::object spec{{"tenant", q.tenant}, {"cohort", q.cohort}, {"priority", q.priority}, {"quota", std::move(quota)}};
  return json::object{{"apiVersion", kApiVersion}, {"kind", "Queue"},
                      {"metadata", json::object{{"name", q.name}, {"namespace", q.tenant}}}, {"spec", std::move(spec)}};
}

std::string job_json_text(const JobObject& job) { return json::serialize(to_json(job)); }

Result<JobObject> job_from_text(const std::string& text) {
  json::error_code ec;
  json::value v = json::parse(text, ec);
  if (ec) return Status::corrupt("job record is not valid JSON: " + ec.message());
  return job_from_json(v);
}

}  // namespace koi::cluster
