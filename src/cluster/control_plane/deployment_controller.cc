#include "cluster/control_plane/deployment_controller.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <boost/json.hpp>
#include <cmath>

#include "base/logging.h"
#include "cluster/control_plane/autoscale.h"
#include "cluster/control_plane/deployment_status.h"
#include "cluster/control_plane/job_submit.h"
#include "cluster/control_plane/rollout.h"

namespace koi::cluster {
namespace json = boost::json;

namespace {

constexpr double kMinDrainSeconds = 1.0;     // requests the gateway picked just before deregistering
constexpr double kMetricWindowSeconds = 3.0;  // the autoscaler's average
constexpr double kTrafficIntervalSeconds = 1.0;  // one TrafficPoint per deployment this often

const json::object& jobj(const json::object& o, std::string_view k) {
  static const json::object empty;
  const json::value* v = o.if_contains(k);
  return v && v->is_object() ? v->as_object() : empty;
}
std::string jstr(const json::object& o, std::string_view k) {
  const json::value* v = o.if_contains(k);
  return v && v->is_string() ? std::string(v->as_string()) : "";
}

// A port free on this machine now (the kernel's pick); the replica binds it moments later.
Result<int> free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return Status::io_error("socket() failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  ::close(fd);
  if (!ok) return Status::io_error("could not pick a free port for a replica");
  return static_cast<int>(ntohs(addr.sin_port));
}

void set_condition(std::vector<Condition>& conds, const std::string& type, bool on, const std::string& reason,
                   const std::string& message, double now) {
  const std::string status = on ? "True" : "False";
  for (Condition& c : conds) {
    if (c.type != type) continue;
    if (c.status != status) c.last_transition_time = rfc3339(now);
    c.status = status, c.reason = reason, c.message = message;
    return;
  }
  conds.push_back({type, status, reason, message, rfc3339(now)});
}

constexpr double kQuietWriteSeconds = 5.0;

// The status without the autoscaler's running measure (what changes every round).
std::string quiet_json(json::object status) {
  if (json::value* a = status.if_contains("autoscale"); a && a->is_object()) a->as_object().erase("message");
  return json::serialize(status);
}

// The weight a version should have now: the rollout's split, else all to the live version.
double intended_weight(const DeploymentStatus& st, int version) {
  if (st.rollout && version == st.rollout->to) return st.rollout->weight;
  if (st.rollout && version == st.rollout->from) return 100.0 - st.rollout->weight;
  return version == st.version ? 100.0 : 0.0;
}

}  // namespace

struct DeploymentController::Work {
  Work(StoredObject& o, DeploymentSpec s, DeploymentStatus t, Memory& m, double n)
      : obj(o), spec(std::move(s)), st(std::move(t)), mem(m), now(n), deleting(!o.metadata.deletion_timestamp.empty()) {}
  StoredObject& obj;
  DeploymentSpec spec;
  DeploymentStatus st;
  Memory& mem;
  double now = 0;
  bool deleting = false;
  std::map<std::string, const JobObject*> jobs;  // this deployment's active jobs by name
  std::vector<Event> events;
  std::string resolve_error;
  std::optional<ModelVersion> resolved;

  void event(const std::string& reason, const std::string& message, const std::string& type = "Normal") {
    Event e;
    e.kind = kDeploymentKind, e.ns = obj.metadata.ns, e.name = obj.metadata.name, e.time = now;
    e.type = type, e.reason = reason, e.message = message;
    events.push_back(std::move(e));
  }
  int count(int version, bool ready_only) const {
    int n = 0;
    for (const ServeReplica& r : st.replicas) n += r.version == version && !r.draining && (!ready_only || (r.ready && r.registered));
    return n;
  }
  int draining() const {
    int n = 0;
    for (const ServeReplica& r : st.replicas) n += r.draining;
    return n;
  }
};

DeploymentController::DeploymentController(StateStore& store, Reconciler& reconciler, TrafficHistory& traffic,
                                           GatewayLink gateway, std::string koi_binary)
    : store_(store),
      reconciler_(reconciler),
      traffic_(traffic),
      gateway_(std::move(gateway)),
      koi_binary_(std::move(koi_binary)) {}

Status DeploymentController::reconcile(double now) {
  KOI_ASSIGN_OR_RETURN(std::vector<StoredObject> deployments, store_.list(kDeploymentKind, ""));
  if (deployments.empty()) return ok_status();
  KOI_ASSIGN_OR_RETURN(std::vector<JobObject> jobs, store_.list_jobs("", true));
  for (StoredObject& d : deployments) {
    if (Status s = reconcile_one(d, jobs, now); !s.ok()) {
      log::warn("deployment {}/{}: {}", d.metadata.ns, d.metadata.name, s.message());
    }
  }
  return ok_status();
}

Status DeploymentController::reconcile_one(StoredObject& obj, const std::vector<JobObject>& jobs, double now) {
  auto spec = deployment_spec_from_json(jobj(obj.body, "spec"));
  if (!spec.ok()) return spec.status();
  Work w(obj, *spec, deployment_status_from_json(jobj(obj.body, "status")), memory_[obj.metadata.uid], now);
  for (const JobObject& j : jobs) {
    auto it = j.metadata.labels.find("deployment");
    if (j.metadata.ns == obj.metadata.ns && it != j.metadata.labels.end() && it->second == obj.metadata.name) {
      w.jobs[j.metadata.name] = &j;
    }
  }
  const json::object before = deployment_status_json(w.st);
  if (!gateway_.configured()) {
    w.st.phase = "Failed", w.st.reason = "NoGateway";
    w.st.message = "the control plane has no gateway: add gateway: {adminUrl, adminKey} to its config";
  } else {
    observe(w);
    record_traffic(w);
    drain(w);
    if (w.deleting) {
      for (size_t i = 0; i < w.st.replicas.size(); ++i) {
        if (!w.st.replicas[i].draining) retire(w, i, "the deployment is being deleted");
      }
      if (w.st.replicas.empty() && w.jobs.empty()) {
        Event e;
        e.kind = kDeploymentKind, e.ns = obj.metadata.ns, e.name = obj.metadata.name, e.time = now;
        e.reason = "Deleted", e.message = "every replica drained and stopped";
        memory_.erase(obj.metadata.uid);
        traffic_.forget(obj.metadata.ns, obj.metadata.name);
        return store_.remove(obj, obj.metadata.resource_version, {e});
      }
    } else {
      auto resolved = resolve_model_ref(store_, obj.metadata.ns, w.spec.ref);
      if (resolved.ok()) {
        w.resolved = *resolved;
      } else {
        w.resolve_error = "spec.model " + w.spec.model + ": " + resolved.status().message();
      }
      if (Status s = roll(w); !s.ok()) w.resolve_error = s.message();
      if (Status s = scale(w); !s.ok()) w.resolve_error = s.message();
    }
    finish_status(w);
  }
  obj.body["status"] = deployment_status_json(w.st);
  // The autoscaler's measure changes every round under load; alone it is written at most
  // every kQuietWriteSeconds, so a steady deployment does not flood the store's change log.
  if (w.events.empty() && quiet_json(obj.body["status"].as_object()) == quiet_json(before) &&
      (json::serialize(obj.body["status"]) == json::serialize(before) || now - w.mem.last_write < kQuietWriteSeconds)) {
    return ok_status();
  }
  obj.phase = w.st.phase;
  Status s = store_.update(&obj, w.events);
  if (s.code() == StatusCode::kFailedPrecondition) return ok_status();  // the API wrote it meanwhile: next round
  if (s.ok()) w.mem.last_write = now;
  return s;
}

// Each replica's job, readiness and metrics; adoption of labelled jobs the status lacks.
void DeploymentController::observe(Work& w) {
  for (const auto& [name, job] : w.jobs) {
    const bool known = std::any_of(w.st.replicas.begin(), w.st.replicas.end(), [&](const ServeReplica& r) { return r.job == name; });
    if (known) continue;
    ServeReplica r;
    r.job = name;
    auto label = [&](const char* k) {
      auto it = job->metadata.labels.find(k);
      return it == job->metadata.labels.end() ? 0 : std::atoi(it->second.c_str());
    };
    r.version = label("version"), r.port = label("port");
    if (r.version <= 0 || r.port <= 0) continue;
    r.draining = !job->metadata.deletion_timestamp.empty();
    r.cancelled = r.draining;
    const size_t dash = name.rfind('-');
    if (dash != std::string::npos) w.st.next_replica = std::max(w.st.next_replica, std::atoi(name.c_str() + dash + 1) + 1);
    w.st.replicas.push_back(r);
    w.event("ReplicaAdopted", "replica " + name + " (" + version_name(r.version) + ") found running and adopted");
  }
  std::vector<ServeReplica> kept;
  for (ServeReplica& r : w.st.replicas) {
    auto it = w.jobs.find(r.job);
    if (it == w.jobs.end()) {
      // The job ended (or is gone): why decides what the rollout makes of it.
      auto job = store_.get_job(w.obj.metadata.ns, r.job);
      const bool failed = job.ok() && *job && (*job)->status.phase == JobPhase::kFailed;
      if (r.registered) (void)gateway_.remove_replica(w.spec.route, version_name(r.version), r.url());
      if (failed && !r.draining) {
        const std::string detail = (*job)->status.message.empty() ? (*job)->status.reason : (*job)->status.message;
        w.event("ReplicaFailed", fmt::format("replica {} ({}) failed: {}", r.job, version_name(r.version), detail), "Warning");
        if (w.st.rollout && r.version == w.st.rollout->to) {
          w.st.rollout->reason = "ReplicaFailed";
          w.st.rollout->message = fmt::format("replica {} failed: {}", r.job, detail);
        }
      } else {
        w.event("ReplicaStopped", fmt::format("replica {} ({}) stopped", r.job, version_name(r.version)));
      }
      w.mem.samples.erase(r.job);
      w.mem.window_base.erase(r.job);
      continue;
    }
    const JobObject& job = *it->second;
    const bool running = job.status.phase == JobPhase::kRunning && job.status.terminating.empty();
    r.waiting = running ? "" : fmt::format("{}: {}", job.status.reason.empty() ? std::string(phase_name(job.status.phase)) : job.status.reason,
                                           job.status.message);
    const bool was_ready = r.ready;
    r.ready = running && serve_ready(r.url());
    if (r.ready && !was_ready) w.event("ReplicaReady", fmt::format("replica {} ({}) answers at {}", r.job, version_name(r.version), r.url()));
    if (r.ready && !r.draining && !r.registered) {
      if (Status s = gateway_.add_replica(w.spec.route, version_name(r.version), r.url()); s.ok()) {
        r.registered = true;
        if (!w.st.weights.count(r.version)) {
          // A version new to the gateway gets its weight said outright (the gateway's own
          // default depends on what else the route holds).
          const double weight = intended_weight(w.st, r.version);
          if (gateway_.set_weights(w.spec.route, {{version_name(r.version), weight}}).ok()) w.st.weights[r.version] = weight;
        }
        w.event("ReplicaRegistered", fmt::format("{} added to route {} as {}", r.url(), w.spec.route, version_name(r.version)));
      } else {
        w.event("GatewayError", s.message(), "Warning");
      }
    }
    if (!r.ready && r.registered && !r.draining) {
      if (gateway_.remove_replica(w.spec.route, version_name(r.version), r.url()).ok()) r.registered = false;
    }
    if (r.ready) {
      if (auto sample = scrape_serve(r.url()); sample.ok()) {
        auto& q = w.mem.samples[r.job];
        q.emplace_back(w.now, *sample);
        while (!q.empty() && q.front().first < w.now - 2 * kMetricWindowSeconds) q.pop_front();
      }
    }
    // A new replica of a rollout that crashed once, or does not come up in time, fails the rollout.
    if (w.st.rollout && r.version == w.st.rollout->to && job.status.restarts + job.status.infra_restarts > 0 &&
        w.st.rollout->reason != "ReplicaFailed") {
      w.st.rollout->reason = "ReplicaFailed";
      w.st.rollout->message = fmt::format("replica {} restarted ({}{})", r.job, job.status.reason,
                                          job.status.message.empty() ? "" : ": " + job.status.message);
    }
    if (w.st.rollout && r.version == w.st.rollout->to && running && !r.ready && job.status.start_time > 0 &&
        w.now - job.status.start_time > w.spec.rollout.ready_timeout_seconds) {
      w.st.rollout->reason = "ReplicaFailed";
      w.st.rollout->message = fmt::format("replica {} not ready {:.0f} s after it started (readyTimeoutSeconds {})", r.job,
                                          w.now - job.status.start_time, w.spec.rollout.ready_timeout_seconds);
    }
    kept.push_back(r);
  }
  w.st.replicas = std::move(kept);
}

// One TrafficPoint a second from the scrapes observe() made: each ready replica's counters
// since the last point. A replica new since then (or restarted: its counters went back)
// counts from its next point on.
void DeploymentController::record_traffic(Work& w) {
  if (w.now - w.mem.traffic_since < kTrafficIntervalSeconds) return;
  std::vector<ServeSample> deltas;
  std::map<std::string, ServeSample> base;
  for (const ServeReplica& r : w.st.replicas) {
    auto q = w.mem.samples.find(r.job);
    if (!r.ready || q == w.mem.samples.end() || q->second.empty()) continue;
    const ServeSample& latest = q->second.back().second;
    auto before = w.mem.traffic_base.find(r.job);
    if (before != w.mem.traffic_base.end() && before->second.finished <= latest.finished &&
        before->second.errors <= latest.errors) {
      deltas.push_back(sample_delta(before->second, latest));
    }
    base[r.job] = latest;
  }
  if (w.mem.traffic_since > 0) {
    traffic_.record(w.obj.metadata.ns, w.obj.metadata.name, traffic_point(deltas, w.now - w.mem.traffic_since, w.now));
  }
  w.mem.traffic_base = std::move(base);
  w.mem.traffic_since = w.now;
}

// Retiring replicas: off the gateway at once; their job is cancelled once idle.
void DeploymentController::drain(Work& w) {
  for (ServeReplica& r : w.st.replicas) {
    if (!r.draining || r.cancelled) continue;
    if (r.registered) {
      if (!gateway_.remove_replica(w.spec.route, version_name(r.version), r.url()).ok()) continue;
      r.registered = false;
    }
    bool idle = !r.ready;
    if (r.ready && w.now - r.drain_since >= kMinDrainSeconds) {
      auto q = w.mem.samples.find(r.job);
      idle = q != w.mem.samples.end() && !q->second.empty() && q->second.back().first == w.now &&
             q->second.back().second.running + q->second.back().second.waiting == 0;
    }
    if (!idle && w.now - r.drain_since < w.spec.rollout.drain_timeout_seconds) continue;
    auto it = w.jobs.find(r.job);
    if (it != w.jobs.end()) {
      JobObject job = *it->second;
      if (!cancel_job(store_, &job, "deployment " + w.obj.metadata.name).ok()) continue;
      reconciler_.wake();
    }
    r.cancelled = true;
    w.event("ReplicaDrained", fmt::format("replica {} ({}) {}; stopping it", r.job, version_name(r.version),
                                          idle ? "has no request in flight" : "still busy after drainTimeoutSeconds"));
  }
}

void DeploymentController::retire(Work& w, size_t index, const std::string& why) {
  ServeReplica& r = w.st.replicas[index];
  if (r.draining) return;
  r.draining = true;
  r.drain_since = w.now;
  w.event("ReplicaRetiring", fmt::format("replica {} ({}): {}", r.job, version_name(r.version), why));
}

Status DeploymentController::start_replica(Work& w, int version, const std::string& artifact) {
  KOI_ASSIGN_OR_RETURN(int port, free_port());
  JobObject job;
  const std::string prefix = w.obj.metadata.name.substr(0, 40);
  job.metadata.ns = w.obj.metadata.ns;
  job.metadata.labels = {{"deployment", w.obj.metadata.name}, {"version", std::to_string(version)},
                         {"port", std::to_string(port)}};
  JobSpec& s = job.spec;
  s.kind = JobKind::kCommand;
  s.command = {koi_binary_, "serve", "--model", artifact, "--host", "127.0.0.1", "--port", std::to_string(port),
               "--served-model-name", w.spec.route};
  const std::vector<std::string> serve_args = replica_serve_args(w.spec);
  s.command.insert(s.command.end(), serve_args.begin(), serve_args.end());
  s.resources = w.spec.resources;
  s.queue = w.spec.queue;
  s.priority = w.spec.priority;
  s.preemptible = false;  // a preempted replica would cut its streams; serving waits for quota instead
  s.restart.max_restarts = 3;
  s.restart.backoff_seconds = 1;
  s.restart.max_backoff_seconds = 30;
  s.termination_grace_seconds = w.spec.rollout.drain_timeout_seconds + 5;
  auto cluster = reconciler_.cluster();
  for (int attempt = 0;; ++attempt) {
    job.metadata.name = fmt::format("{}-{}-{}", prefix, version_name(version), w.st.next_replica++);
    Status s = submit_job(store_, *cluster, &job, "deployment " + w.obj.metadata.name);
    if (s.ok()) break;
    // A name left by an ended replica whose record was lost: take the next one.
    if (s.code() != StatusCode::kAlreadyExists || attempt >= 100) return s;
  }
  reconciler_.wake();
  ServeReplica r;
  r.job = job.metadata.name, r.version = version, r.port = port;
  r.waiting = "Submitted: waiting for the scheduler";
  w.st.replicas.push_back(r);
  w.event("ReplicaStarted", fmt::format("replica {} of {} ({}) submitted on port {}", r.job, w.spec.model, version_name(version), port));
  return ok_status();
}

Status DeploymentController::set_weights(Work& w, const std::map<int, double>& weights) {
  // A version left without replicas has nothing to route to: it is forgotten, so a gateway
  // that restarted without it (admin_api_test.cc) is never sent a weight for it.
  for (auto it = w.st.weights.begin(); it != w.st.weights.end();) {
    const int v = it->first;
    const bool has = std::any_of(w.st.replicas.begin(), w.st.replicas.end(), [&](const ServeReplica& r) { return r.version == v; });
    const bool rolling = w.st.rollout && (v == w.st.rollout->from || v == w.st.rollout->to);
    it = has || rolling ? std::next(it) : w.st.weights.erase(it);
  }
  std::map<std::string, double> named;
  bool changed = false;
  for (const auto& [v, x] : weights) {
    auto it = w.st.weights.find(v);
    if (it == w.st.weights.end()) continue;  // only versions the gateway has seen
    named[version_name(v)] = x;
    changed |= it->second != x;
  }
  if (!changed) return ok_status();
  KOI_RETURN_IF_ERROR(gateway_.set_weights(w.spec.route, named));
  for (const auto& [v, x] : weights) {
    if (w.st.weights.count(v)) w.st.weights[v] = x;
  }
  return ok_status();
}

// The new version's SLO window: its replicas' counters since the window opened, and the
// gateway's count of its failed attempts.
SloWindow DeploymentController::slo_window(Work& w, int version) {
  SloWindow win;
  win.since = w.mem.window_since;
  double replica_requests = 0, replica_errors = 0;
  std::map<double, double> ttft;
  for (const ServeReplica& r : w.st.replicas) {
    if (r.version != version) continue;
    auto q = w.mem.samples.find(r.job);
    if (q == w.mem.samples.end() || q->second.empty()) continue;
    const ServeSample& latest = q->second.back().second;
    auto [base, fresh] = w.mem.window_base.emplace(r.job, latest);
    const ServeSample d = sample_delta(base->second, latest);
    replica_requests += d.finished + d.errors;
    replica_errors += d.errors;
    win.ttft_count += static_cast<int64_t>(d.ttft_count);
    for (const auto& [le, n] : d.ttft_buckets) ttft[le] += n;
  }
  win.ttft_p99_ms = histogram_quantile(ttft, 0.99) * 1000.0;
  int64_t gw_requests = 0, gw_errors = 0;
  if (auto stats = gateway_.stats(w.spec.route); stats.ok()) {
    const GatewayVersionStats now = (*stats)[version_name(version)];
    if (!w.mem.gateway_base_set) w.mem.gateway_base = now, w.mem.gateway_base_set = true;
    gw_requests = now.requests - w.mem.gateway_base.requests;
    gw_errors = now.errors - w.mem.gateway_base.errors;
  }
  // A 5xx is counted by both; the larger count of each is the window's.
  win.requests = std::max(static_cast<int64_t>(replica_requests), gw_requests);
  win.errors = std::max(static_cast<int64_t>(replica_errors), gw_errors);
  return win;
}

Status DeploymentController::roll(Work& w) {
  DeploymentStatus& st = w.st;
  if (!w.resolved && !st.rollback_requested && !st.rollout) return ok_status();
  if (st.version == 0 && w.resolved) {  // the first version: no rollout, just scale up
    st.version = w.resolved->version;
    st.artifact = w.resolved->artifact.path;
    w.event("VersionSelected", fmt::format("serving {} as {} ({})", w.spec.model, version_name(st.version), st.artifact));
    return ok_status();
  }
  auto begin = [&](int to, const std::string& artifact, std::vector<int> steps, const std::string& cause) {
    RolloutState r;
    r.from = st.version, r.to = to, r.to_artifact = artifact, r.steps = std::move(steps);
    r.started = w.now, r.cause = cause;
    st.rollout = r;
    w.mem.window_base.clear();
    w.mem.gateway_base_set = false;
    w.mem.window_since = w.now;
    w.event("RolloutStarted", fmt::format("{} -> {} ({}), steps {}", version_name(r.from), version_name(to), cause,
                                          json::serialize(json::value_from(r.steps))));
  };
  if (st.rollback_requested) {
    st.rollback_requested = false;
    if (st.rollout) {
      st.rollout->reason = "RollbackRequested";
      st.rollout->message = "rollback requested";
    } else if (st.previous > 0) {
      if (!st.was_rolled_back(st.version)) st.rolled_back.push_back(st.version);
      begin(st.previous, st.previous_artifact, {100}, "RollbackRequested");
      return ok_status();
    }
  }
  if (!st.rollout) {
    if (w.resolved && w.resolved->version != st.version && !st.was_rolled_back(w.resolved->version)) {
      begin(w.resolved->version, w.resolved->artifact.path, w.spec.rollout.canary_steps,
            w.spec.ref.alias.empty() ? "SpecChanged" : "AliasMoved (" + w.spec.ref.alias + ")");
    }
    return ok_status();
  }
  RolloutState& ro = *st.rollout;
  // The spec moved on mid-rollout: abandon this one as a rollback, the next round starts anew.
  const bool superseded = w.resolved && w.resolved->version != ro.to && ro.cause != "RollbackRequested";
  RolloutView v;
  v.desired = std::max(1, st.desired);
  v.steps = ro.steps, v.step = ro.step, v.weight = ro.weight, v.weight_since = ro.weight_since;
  v.step_seconds = ro.cause == "RollbackRequested" ? 0 : w.spec.rollout.step_seconds;
  v.now = w.now;
  v.new_replicas = w.count(ro.to, false), v.new_ready = w.count(ro.to, true);
  v.old_replicas = w.count(ro.from, false), v.draining = w.draining();
  std::string failure_reason;
  if (ro.reason == "ReplicaFailed" || ro.reason == "RollbackRequested") v.new_failure = ro.message, failure_reason = ro.reason;
  if (superseded) v.new_failure = "spec.model now names " + version_name(w.resolved->version), failure_reason = "Superseded";
  const SloWindow win = slo_window(w, ro.to);
  SloPolicy slo = w.spec.slo;
  if (ro.cause == "RollbackRequested") slo.min_requests = 0;  // going back to the known version: no evidence needed
  v.slo = judge_slo(slo, win);
  RolloutDecision d = decide_rollout(v);
  if (d.action == RolloutAction::kRollback && !failure_reason.empty()) d.reason = failure_reason;
  ro.reason = d.reason, ro.message = d.message;
  switch (d.action) {
    case RolloutAction::kWait: return ok_status();
    case RolloutAction::kStartReplica: return start_replica(w, ro.to, ro.to_artifact);
    case RolloutAction::kRetireOld: {
      // The old replica least useful first: not ready, then the newest.
      int pick = -1;
      for (size_t i = 0; i < st.replicas.size(); ++i) {
        const ServeReplica& r = st.replicas[i];
        if (r.version != ro.from || r.draining) continue;
        if (pick < 0 || !r.ready || st.replicas[pick].ready) pick = static_cast<int>(i);
      }
      if (pick >= 0) retire(w, pick, fmt::format("replaced by {} (rollout step {})", version_name(ro.to), ro.step + 1));
      return ok_status();
    }
    case RolloutAction::kSetWeight: {
      KOI_RETURN_IF_ERROR(set_weights(w, {{ro.from, 100.0 - d.weight}, {ro.to, static_cast<double>(d.weight)}}));
      ro.weight = d.weight, ro.weight_since = w.now;
      w.mem.window_base.clear();
      w.mem.gateway_base_set = false;
      w.mem.window_since = w.now;
      (void)slo_window(w, ro.to);  // the window's baseline: the counters now
      w.event("CanaryStep", fmt::format("{} takes {}% of route {} (step {} of {})", version_name(ro.to), d.weight, w.spec.route,
                                        ro.step + 1, ro.steps.size()));
      return ok_status();
    }
    case RolloutAction::kNextStep:
      ++ro.step;
      return ok_status();
    case RolloutAction::kComplete: {
      KOI_RETURN_IF_ERROR(set_weights(w, {{ro.from, 0.0}, {ro.to, 100.0}}));
      for (size_t i = 0; i < st.replicas.size(); ++i) {
        if (st.replicas[i].version == ro.from) retire(w, i, fmt::format("{} is live", version_name(ro.to)));
      }
      w.event("RolloutComplete", fmt::format("{} serves route {}; {} retired", version_name(ro.to), w.spec.route, version_name(ro.from)));
      st.previous = st.version, st.previous_artifact = st.artifact;
      st.version = ro.to, st.artifact = ro.to_artifact;
      st.rollout.reset();
      return ok_status();
    }
    case RolloutAction::kRollback: {
      KOI_RETURN_IF_ERROR(set_weights(w, {{ro.from, 100.0}, {ro.to, 0.0}}));
      for (size_t i = 0; i < st.replicas.size(); ++i) {
        if (st.replicas[i].version == ro.to) retire(w, i, "rolled back");
      }
      const std::string slo_name = d.reason == "SloBreached" ? v.slo.slo : "";
      st.last_rollback = json::object{{"fromVersion", ro.to},
                                      {"toVersion", ro.from},
                                      {"reason", d.reason},
                                      {"slo", slo_name},
                                      {"message", d.message},
                                      {"since", rfc3339(win.since > 0 ? win.since : w.now)},
                                      {"sinceTime", win.since > 0 ? win.since : w.now},
                                      {"time", rfc3339(w.now)},
                                      {"requests", win.requests},
                                      {"errors", win.errors}};
      if (!superseded && ro.cause != "RollbackRequested" && !st.was_rolled_back(ro.to)) st.rolled_back.push_back(ro.to);
      w.event("RolledBack",
              fmt::format("{} -> {}: {}{}", version_name(ro.to), version_name(ro.from), slo_name.empty() ? "" : slo_name + " broken: ",
                          d.message),
              "Warning");
      st.rollout.reset();
      return ok_status();
    }
  }
  return ok_status();
}

// The autoscaler's measure over the live version's ready replicas.
std::optional<double> DeploymentController::scale_metric(Work& w) {
  double sum = 0;
  int n = 0;
  std::map<double, double> ttft;
  for (const ServeReplica& r : w.st.replicas) {
    if (r.version != w.st.version || r.draining || !r.ready) continue;
    auto q = w.mem.samples.find(r.job);
    if (q == w.mem.samples.end() || q->second.empty()) continue;
    const auto& samples = q->second;
    double replica_sum = 0;
    int replica_n = 0;
    const ServeSample* first = nullptr;
    for (const auto& [t, s] : samples) {
      if (t < w.now - kMetricWindowSeconds) continue;
      if (!first) first = &s;
      replica_sum += w.spec.autoscale.metric == AutoscaleMetric::kKvCacheUsage ? s.kv_usage : s.waiting;
      ++replica_n;
    }
    if (replica_n == 0) continue;
    if (w.spec.autoscale.metric == AutoscaleMetric::kTtftMs) {
      const ServeSample d = sample_delta(*first, samples.back().second);
      for (const auto& [le, c] : d.ttft_buckets) ttft[le] += c;
    }
    sum += replica_sum / replica_n;
    ++n;
  }
  if (n == 0) return std::nullopt;
  if (w.spec.autoscale.metric == AutoscaleMetric::kTtftMs) return histogram_quantile(ttft, 0.99) * 1000.0;
  return sum / n;
}

Status DeploymentController::scale(Work& w) {
  DeploymentStatus& st = w.st;
  if (st.version == 0) return ok_status();
  ScaleView v;
  v.policy = w.spec.autoscale;
  v.min_replicas = w.spec.min_replicas, v.max_replicas = w.spec.max_replicas;
  v.desired = st.desired > 0 ? st.desired : w.spec.min_replicas;
  v.ready = w.count(st.version, true);
  v.metric = scale_metric(w);
  v.now = w.now, v.down_since = st.down_since, v.down_max = st.down_max;
  // During a rollout the count holds: the rollout replaces replicas one for one.
  const ScaleDecision d = st.rollout ? ScaleDecision{v.desired, 0, 0, "RolloutInProgress", fmt::format("held at {} during the rollout", v.desired)} : decide_scale(v);
  if (d.desired != v.desired) {
    w.event(d.desired > v.desired ? "ScaledUp" : "ScaledDown", d.message);
  }
  st.desired = d.desired, st.down_since = d.down_since, st.down_max = d.down_max;
  st.scale_reason = d.reason, st.scale_message = d.message;
  if (st.rollout) return ok_status();
  // Replicas of versions that are not live (after a rollback) go.
  for (size_t i = 0; i < st.replicas.size(); ++i) {
    if (st.replicas[i].version != st.version) retire(w, i, version_name(st.replicas[i].version) + " is not the live version");
  }
  KOI_RETURN_IF_ERROR(set_weights(w, [&] {
    std::map<int, double> m;
    for (const auto& [ver, x] : st.weights) m[ver] = ver == st.version ? 100.0 : 0.0;
    return m;
  }()));
  const int have = w.count(st.version, false);
  if (have < st.desired) {
    // One replica waiting for the scheduler at a time: the rest would wait behind it.
    for (const ServeReplica& r : st.replicas) {
      if (r.version == st.version && !r.draining && !r.waiting.empty()) return ok_status();
    }
    return start_replica(w, st.version, st.artifact);
  }
  for (int extra = have - st.desired; extra > 0; --extra) {
    int pick = -1;
    for (size_t i = 0; i < st.replicas.size(); ++i) {
      const ServeReplica& r = st.replicas[i];
      if (r.version != st.version || r.draining) continue;
      if (pick < 0 || !r.ready || st.replicas[pick].ready) pick = static_cast<int>(i);
    }
    if (pick >= 0) retire(w, pick, fmt::format("scaled down to {}", st.desired));
  }
  return ok_status();
}

void DeploymentController::finish_status(Work& w) {
  DeploymentStatus& st = w.st;
  const int ready = w.count(st.version, true);
  std::string waits;
  for (const ServeReplica& r : st.replicas) {
    if (!r.draining && !r.waiting.empty()) waits += fmt::format("; replica {} waits: {}", r.job, r.waiting);
  }
  const bool rolled_back = w.resolved && w.resolved->version != st.version && st.was_rolled_back(w.resolved->version);
  if (w.deleting) {
    st.phase = "Progressing", st.reason = "Deleting";
    st.message = fmt::format("draining {} replica(s) before the deployment goes", st.replicas.size());
  } else if (st.rollout) {
    const RolloutState& r = *st.rollout;
    st.phase = r.cause == "RollbackRequested" ? "RollingBack" : "Progressing";
    st.reason = r.reason.empty() ? "RollingOut" : r.reason;
    st.message = fmt::format("{} -> {}, step {} of {} at {}%{}{}", version_name(r.from), version_name(r.to), r.step + 1, r.steps.size(),
                             r.weight, r.message.empty() ? "" : ": " + r.message, waits);
  } else if (st.version == 0) {
    st.phase = "Failed", st.reason = "ModelNotFound", st.message = w.resolve_error;
  } else if (rolled_back && w.draining() > 0) {
    st.phase = "RollingBack", st.reason = "RolledBack";
    st.message = fmt::format("back on {}; stopping the replicas of {}", version_name(st.version), version_name(w.resolved->version));
  } else if (ready >= st.desired && st.desired > 0) {
    st.phase = rolled_back ? "Degraded" : "Available";
    st.reason = rolled_back ? "RolledBack" : "Ready";
    st.message = rolled_back ? fmt::format("{} was rolled back ({}); serving {}: move the alias, or apply the deployment "
                                           "again to retry it", version_name(w.resolved->version),
                                           jstr(st.last_rollback, "message"), version_name(st.version))
                             : fmt::format("{} ready replica(s) of {} on route {}", ready, version_name(st.version), w.spec.route);
  } else {
    const bool ever = std::any_of(st.conditions.begin(), st.conditions.end(),
                                  [](const Condition& c) { return c.type == "Available" && c.status == "True"; });
    st.phase = ever || ready > 0 ? "Degraded" : "Progressing";
    st.reason = "ReplicasNotReady";
    st.message = fmt::format("{} of {} replica(s) ready{}", ready, st.desired, waits);
  }
  if (!w.resolve_error.empty() && st.version != 0) st.message += "; " + w.resolve_error;
  set_condition(st.conditions, "Available", ready > 0 && ready >= st.desired, st.reason,
                fmt::format("{} of {} ready", ready, st.desired), w.now);
  set_condition(st.conditions, "Progressing", st.rollout.has_value(), st.rollout ? st.rollout->cause : "Stable",
                st.rollout ? st.message : "", w.now);
  // The diagnosis (docs/cluster.md#diagnoses): the version the deployment should serve failed
  // and was rolled back; which SLO or replica failure, since when.
  const std::string slo = jstr(st.last_rollback, "slo");
  set_condition(st.conditions, "VersionFailing", rolled_back, rolled_back ? jstr(st.last_rollback, "reason") : "None",
                rolled_back ? fmt::format("{} failed ({}{}) since {}: {}; serving {}", version_name(w.resolved->version),
                                          jstr(st.last_rollback, "reason"), slo.empty() ? "" : ": " + slo + " broken",
                                          jstr(st.last_rollback, "since"), jstr(st.last_rollback, "message"),
                                          version_name(st.version))
                            : "",
                w.now);
}

}  // namespace koi::cluster
