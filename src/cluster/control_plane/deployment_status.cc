#include "cluster/control_plane/deployment_status.h"

#include <algorithm>
#include <boost/json.hpp>
#include <cmath>

namespace koi::cluster {
namespace json = boost::json;

namespace {

// Whole numbers as integers (a weight of 90, not 9E1).
json::value num(double x) {
  if (std::nearbyint(x) == x && std::fabs(x) < 9e15) return static_cast<int64_t>(x);
  return x;
}

// JSON readers that tolerate absent fields (the controller's own records).
std::string jstr(const json::object& o, std::string_view k) {
  const json::value* v = o.if_contains(k);
  return v && v->is_string() ? std::string(v->as_string()) : "";
}
double jnum(const json::object& o, std::string_view k) {
  const json::value* v = o.if_contains(k);
  return v && v->is_number() ? v->to_number<double>() : 0;
}
int jint(const json::object& o, std::string_view k) { return static_cast<int>(jnum(o, k)); }
bool jbool(const json::object& o, std::string_view k) {
  const json::value* v = o.if_contains(k);
  return v && v->is_bool() && v->as_bool();
}
const json::object& jobj(const json::object& o, std::string_view k) {
  static const json::object empty;
  const json::value* v = o.if_contains(k);
  return v && v->is_object() ? v->as_object() : empty;
}
const json::array& jarr(const json::object& o, std::string_view k) {
  static const json::array empty;
  const json::value* v = o.if_contains(k);
  return v && v->is_array() ? v->as_array() : empty;
}


}  // namespace

bool DeploymentStatus::was_rolled_back(int v) const {
  return std::find(rolled_back.begin(), rolled_back.end(), v) != rolled_back.end();
}

std::string version_name(int version) { return "v" + std::to_string(version); }

DeploymentStatus deployment_status_from_json(const json::object& s) {
  DeploymentStatus d;
  d.phase = jstr(s, "phase");
  d.reason = jstr(s, "reason");
  d.message = jstr(s, "message");
  d.version = jint(s, "version");
  d.artifact = jstr(s, "artifact");
  d.previous = jint(s, "previousVersion");
  d.previous_artifact = jstr(s, "previousArtifact");
  if (const json::object& r = jobj(s, "rollout"); !r.empty()) {
    RolloutState rs;
    rs.from = jint(r, "fromVersion"), rs.to = jint(r, "toVersion");
    rs.to_artifact = jstr(r, "toArtifact");
    for (const json::value& x : jarr(r, "steps")) {
      if (x.is_number()) rs.steps.push_back(x.to_number<int>());
    }
    rs.step = jint(r, "step"), rs.weight = jint(r, "weight");
    rs.weight_since = jnum(r, "weightSince"), rs.started = jnum(r, "startTime");
    rs.cause = jstr(r, "cause"), rs.reason = jstr(r, "reason"), rs.message = jstr(r, "message");
    if (!rs.steps.empty()) d.rollout = rs;
  }
  for (const json::value& x : jarr(s, "rolledBackFrom")) {
    if (x.is_number()) d.rolled_back.push_back(x.to_number<int>());
  }
  d.last_rollback = jobj(s, "lastRollback");
  for (const json::value& x : jarr(s, "replicas")) {
    if (!x.is_object()) continue;
    const json::object& o = x.as_object();
    ServeReplica r;
    r.job = jstr(o, "job"), r.version = jint(o, "version"), r.port = jint(o, "port");
    r.ready = jbool(o, "ready"), r.registered = jbool(o, "registered"), r.draining = jbool(o, "draining");
    r.cancelled = jbool(o, "cancelled"), r.drain_since = jnum(o, "drainSince"), r.waiting = jstr(o, "waiting");
    d.replicas.push_back(r);
  }
  d.desired = jint(s, "desiredReplicas");
  const json::object& as = jobj(s, "autoscale");
  d.down_since = jnum(as, "downSince"), d.down_max = jint(as, "downMax");
  d.scale_reason = jstr(as, "reason"), d.scale_message = jstr(as, "message");
  for (const auto& [k, v] : jobj(s, "weights")) {
    if (v.is_number() && k.size() > 1) d.weights[std::atoi(std::string(k).c_str() + 1)] = v.to_number<double>();
  }
  d.rollback_requested = jbool(s, "rollbackRequested");
  d.next_replica = std::max(1, jint(s, "nextReplica"));
  for (const json::value& c : jarr(s, "conditions")) {
    if (!c.is_object()) continue;
    const json::object& co = c.as_object();
    d.conditions.push_back({jstr(co, "type"), jstr(co, "status"), jstr(co, "reason"), jstr(co, "message"),
                            jstr(co, "lastTransitionTime")});
  }
  return d;
}

json::object deployment_status_json(const DeploymentStatus& d) {
  json::object s{{"phase", d.phase}, {"reason", d.reason}, {"message", d.message},
                 {"version", d.version}, {"artifact", d.artifact},
                 {"previousVersion", d.previous}, {"previousArtifact", d.previous_artifact},
                 {"desiredReplicas", d.desired}, {"nextReplica", d.next_replica}};
  if (d.rollout) {
    const RolloutState& r = *d.rollout;
    json::array steps;
    for (int x : r.steps) steps.emplace_back(x);
    s["rollout"] = json::object{{"fromVersion", r.from}, {"toVersion", r.to}, {"toArtifact", r.to_artifact},
                                {"steps", std::move(steps)}, {"step", r.step}, {"weight", r.weight},
                                {"weightSince", r.weight_since}, {"startTime", r.started}, {"cause", r.cause},
                                {"reason", r.reason}, {"message", r.message}};
  }
  if (!d.rolled_back.empty()) {
    json::array a;
    for (int v : d.rolled_back) a.emplace_back(v);
    s["rolledBackFrom"] = std::move(a);
  }
  if (!d.last_rollback.empty()) s["lastRollback"] = d.last_rollback;
  if (d.rollback_requested) s["rollbackRequested"] = true;
  json::object weights;
  for (const auto& [v, w] : d.weights) weights[version_name(v)] = num(w);
  s["weights"] = std::move(weights);
  // The replicas, and the same grouped by version with each version's weight.
  json::array reps;
  std::map<int, json::object> versions;
  for (const ServeReplica& r : d.replicas) {
    json::object o{{"job", r.job}, {"version", r.version}, {"port", r.port}, {"url", r.url()},
                   {"ready", r.ready}, {"registered", r.registered}, {"draining", r.draining}};
    if (r.cancelled) o["cancelled"] = true;
    if (r.drain_since > 0) o["drainSince"] = r.drain_since;
    if (!r.waiting.empty()) o["waiting"] = r.waiting;
    reps.push_back(std::move(o));
    json::object& v = versions[r.version];
    v["version"] = r.version;
    v["replicas"] = jint(v, "replicas") + (r.draining ? 0 : 1);
    v["ready"] = jint(v, "ready") + (r.ready && !r.draining ? 1 : 0);
  }
  for (const auto& [ver, w] : d.weights) versions[ver]["version"] = ver;
  json::array vs;
  for (auto& [ver, v] : versions) {
    auto w = d.weights.find(ver);
    v["weight"] = num(w == d.weights.end() ? 0.0 : w->second);
    if (!v.contains("replicas")) v["replicas"] = 0, v["ready"] = 0;
    vs.push_back(std::move(v));
  }
  s["replicas"] = std::move(reps);
  s["versions"] = std::move(vs);
  s["autoscale"] = json::object{{"downSince", d.down_since}, {"downMax", d.down_max}, {"reason", d.scale_reason},
                                {"message", d.scale_message}};
  json::array conds;
  for (const Condition& c : d.conditions) {
    conds.push_back(json::object{{"type", c.type}, {"status", c.status}, {"reason", c.reason}, {"message", c.message},
                                 {"lastTransitionTime", c.last_transition_time}});
  }
  s["conditions"] = std::move(conds);
  return s;
}

}  // namespace koi::cluster
