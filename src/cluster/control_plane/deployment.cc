#include "cluster/control_plane/deployment.h"

#include <fmt/format.h>

#include <boost/json.hpp>
#include <cmath>

#include "cluster/control_plane/job_submit.h"
#include "cluster/control_plane/yaml_reader.h"

namespace koi::cluster {
namespace json = boost::json;

namespace {

constexpr const char* kMetricNames[] = {"waitingRequests", "kvCacheUsage", "ttftMs"};
// Flags the controller sets itself on every replica.
constexpr const char* kOwnFlags[] = {"--model", "-m", "--port", "--host", "--served-model-name", "--lora"};

void parse_rollout(YamlReader r, RolloutPolicy* p) {
  if (r.has("canarySteps")) {
    p->canary_steps.clear();
    for (int64_t s : r.ints("canarySteps", 1, 100)) p->canary_steps.push_back(static_cast<int>(s));
    if (r.ok() && p->canary_steps.empty()) r.fail(r.field("canarySteps"), "needs at least one step (percent; the last 100)");
  }
  for (size_t i = 1; r.ok() && i < p->canary_steps.size(); ++i) {
    if (p->canary_steps[i] <= p->canary_steps[i - 1]) {
      r.fail(fmt::format("{}[{}]", r.field("canarySteps"), i), "steps must increase");
    }
  }
  if (r.ok() && p->canary_steps.back() != 100) {
    r.fail(fmt::format("{}[{}]", r.field("canarySteps"), p->canary_steps.size() - 1), "the last step must be 100");
  }
  p->step_seconds = r.number("stepSeconds", 0, 86400).value_or(p->step_seconds);
  p->ready_timeout_seconds = r.number("readyTimeoutSeconds", 1, 86400).value_or(p->ready_timeout_seconds);
  p->drain_timeout_seconds = r.number("drainTimeoutSeconds", 0, 3600).value_or(p->drain_timeout_seconds);
}

void parse_slo(YamlReader r, SloPolicy* s) {
  s->max_error_rate = r.number("maxErrorRate", 0, 1).value_or(s->max_error_rate);
  s->p99_ttft_ms = r.number("p99TtftMs", 0, 1e7).value_or(s->p99_ttft_ms);
  s->min_requests = static_cast<int>(r.int64("minRequests", 0, 1000000).value_or(s->min_requests));
}

void parse_autoscale(YamlReader r, AutoscalePolicy* a) {
  a->enabled = true;
  const std::string metric = r.str("metric");
  bool known = false;
  for (int i = 0; i < 3; ++i) {
    if (metric == kMetricNames[i]) a->metric = static_cast<AutoscaleMetric>(i), known = true;
  }
  if (!known) {
    r.fail(r.field("metric"), metric.empty() ? "is required: waitingRequests, kvCacheUsage or ttftMs"
                                             : "must be waitingRequests, kvCacheUsage or ttftMs (got '" + metric + "')");
  }
  if (!r.has("target")) r.fail(r.field("target"), "is required (the metric's value per replica to aim at)");
  a->target = r.number("target", 1e-6, 1e9).value_or(1);
  if (a->metric == AutoscaleMetric::kKvCacheUsage && a->target > 1) {
    r.fail(r.field("target"), "kvCacheUsage is a fraction: the target must be in (0, 1]");
  }
  a->scale_down_delay_seconds = r.number("scaleDownDelaySeconds", 0, 86400).value_or(a->scale_down_delay_seconds);
}

void parse_spec(YamlReader& spec, const std::string& name, DeploymentSpec* s) {
  s->model = spec.str("model");
  if (!spec.has("model")) {
    spec.fail(spec.field("model"), "is required (MODEL@ALIAS, MODEL@VERSION or MODEL)");
  } else if (spec.ok()) {
    auto ref = parse_model_ref(s->model, spec.field("model"));
    if (!ref.ok()) spec.fail(spec.field("model"), ref.status().message().substr(spec.field("model").size() + 2));
    if (ref.ok()) s->ref = *ref;
  }
  s->route = spec.str("route", name);
  if (!valid_name(s->route)) spec.fail(spec.field("route"), "must be 1-63 characters of a-z, 0-9 and '-' (the gateway's model name)");
  YamlReader rep = spec.child("replicas");
  s->min_replicas = static_cast<int>(rep.int64("min", 0, 64).value_or(1));
  s->max_replicas = static_cast<int>(rep.int64("max", 1, 64).value_or(std::max(1, s->min_replicas)));
  if (rep.ok() && s->max_replicas < s->min_replicas) rep.fail(rep.field("max"), "must be >= replicas.min");
  YamlReader res = spec.child("resources");
  parse_job_resources(res, &s->resources);
  s->queue = spec.str("queue");
  s->priority = static_cast<int>(spec.int64("priority", -1000000, 1000000).value_or(0));
  s->serve_args = spec.strings("serveArgs");
  for (size_t i = 0; i < s->serve_args.size(); ++i) {
    const std::string& a = s->serve_args[i];
    for (const char* own : kOwnFlags) {
      if (a == own || a.starts_with(std::string(own) + "=")) {
        spec.fail(fmt::format("{}[{}]", spec.field("serveArgs"), i),
                  fmt::format("{} is set by the control plane (spec.model, the replica's port, spec.route, "
                              "spec.adapters)",
                              own));
      }
    }
  }
  s->adapters = spec.string_map("adapters");
  for (const auto& [adapter, dir] : s->adapters) {
    const std::string field = spec.field("adapters") + "." + adapter;
    if (!valid_name(adapter) || adapter == s->route) {
      spec.fail(field, "adapter names are 1-63 characters of a-z, 0-9 and '-', other than spec.route (the "
                       "model name requests give)");
    } else if (!dir.starts_with("/")) {
      spec.fail(field, "must be an absolute path to a PEFT adapter directory (replicas run in their own work "
                       "directories)");
    }
  }
  parse_rollout(spec.child("rollout"), &s->rollout);
  parse_slo(spec.child("slo"), &s->slo);
  if (spec.has("autoscale")) parse_autoscale(spec.child("autoscale"), &s->autoscale);
  if (spec.ok() && s->autoscale.enabled && s->min_replicas < 1) {
    rep.fail(rep.field("min"), "must be >= 1 with autoscale (the metrics come from running replicas)");
  }
}

// Whole numbers as integers ("stepSeconds": 30, not 3E1).
json::value num(double x) {
  if (std::nearbyint(x) == x && std::fabs(x) < 9e15) return static_cast<int64_t>(x);
  return x;
}

json::array ints_json(const std::vector<int>& v) {
  json::array a;
  for (int x : v) a.emplace_back(x);
  return a;
}

Status write_deployment(StateStore& store, const DeploymentObject& d, const std::string& by, bool* created) {
  const std::string& ns = d.metadata.ns;
  Event e;
  e.kind = kDeploymentKind, e.ns = ns, e.name = d.metadata.name, e.time = wall_seconds();
  KOI_ASSIGN_OR_RETURN(std::optional<StoredObject> old, store.get(kDeploymentKind, ns, d.metadata.name));
  if (created) *created = !old;
  if (!old) {
    StoredObject obj;
    obj.kind = kDeploymentKind;
    obj.metadata = d.metadata;
    obj.body["spec"] = d.spec_json;
    obj.body["status"] = json::object{{"phase", "Progressing"}, {"message", "waiting for the controller"}};
    obj.phase = "Progressing";
    e.reason = "Created";
    e.message = fmt::format("model {}, route {}, replicas {}-{}, by {}", d.spec.model, d.spec.route, d.spec.min_replicas,
                            d.spec.max_replicas, by);
    return store.create(&obj, {e});
  }
  if (!old->metadata.deletion_timestamp.empty()) {
    return Status::failed_precondition("deployment " + d.metadata.name + " is being deleted; apply it again once it is gone");
  }
  const std::string before = json::serialize(old->body["spec"]);
  old->metadata.labels = d.metadata.labels;
  old->body["spec"] = d.spec_json;
  // A changed spec is a new intent: versions rolled back from may be rolled out again.
  if (json::value* st = old->body.if_contains("status"); st && st->is_object() && before != json::serialize(d.spec_json)) {
    st->as_object().erase("rolledBackFrom");
  }
  e.reason = "Applied";
  e.message = before == json::serialize(d.spec_json) ? "applied unchanged by " + by
                                                     : fmt::format("spec changed by {} (model {})", by, d.spec.model);
  return store.update(&*old, {e});
}

}  // namespace

std::string_view autoscale_metric_name(AutoscaleMetric m) { return kMetricNames[static_cast<int>(m)]; }

std::vector<std::string> replica_serve_args(const DeploymentSpec& spec) {
  std::vector<std::string> args = spec.serve_args;
  for (const auto& [adapter, dir] : spec.adapters) {
    args.push_back("--lora");
    args.push_back(adapter + "=" + dir);
  }
  return args;
}

json::object deployment_spec_json(const DeploymentSpec& s) {
  json::array args;
  for (const std::string& a : s.serve_args) args.emplace_back(a);
  json::object spec{{"model", s.model},
                    {"route", s.route},
                    {"replicas", json::object{{"min", s.min_replicas}, {"max", s.max_replicas}}},
                    {"resources", job_resources_json(s.resources)},
                    {"queue", s.queue},
                    {"priority", s.priority},
                    {"serveArgs", std::move(args)},
                    {"rollout", json::object{{"canarySteps", ints_json(s.rollout.canary_steps)},
                                             {"stepSeconds", num(s.rollout.step_seconds)},
                                             {"readyTimeoutSeconds", num(s.rollout.ready_timeout_seconds)},
                                             {"drainTimeoutSeconds", num(s.rollout.drain_timeout_seconds)}}},
                    {"slo", json::object{{"maxErrorRate", num(s.slo.max_error_rate)},
                                         {"p99TtftMs", num(s.slo.p99_ttft_ms)},
                                         {"minRequests", s.slo.min_requests}}}};
  if (!s.adapters.empty()) {
    json::object adapters;
    for (const auto& [adapter, dir] : s.adapters) adapters[adapter] = dir;
    spec["adapters"] = std::move(adapters);
  }
  if (s.autoscale.enabled) {
    spec["autoscale"] = json::object{{"metric", autoscale_metric_name(s.autoscale.metric)},
                                     {"target", num(s.autoscale.target)},
                                     {"scaleDownDelaySeconds", num(s.autoscale.scale_down_delay_seconds)}};
  }
  return spec;
}

Result<DeploymentObject> parse_deployment_manifest(const std::string& text, const std::string& ns) {
  KOI_ASSIGN_OR_RETURN(YAML::Node doc, manifest_document(text, "deployment manifest"));
  YamlReader top(doc, "");
  DeploymentObject d;
  YamlReader meta = read_manifest_header(top, kDeploymentKind, ns, &d.metadata);
  (void)meta.str("resourceVersion");  // informational: apply replaces whatever is stored
  if (!top.has("spec")) top.fail("spec", "is required");
  YamlReader spec = top.child("spec");
  parse_spec(spec, d.metadata.name, &d.spec);
  (void)top.child("status");  // a `get -o yaml` fed back: the status is the controller's, ignored
  KOI_RETURN_IF_ERROR(top.finish());
  d.spec_json = deployment_spec_json(d.spec);
  return d;
}

Result<DeploymentSpec> deployment_spec_from_json(const json::object& spec) {
  const std::string text = json::serialize(json::object{
      {"apiVersion", kApiVersion}, {"kind", kDeploymentKind}, {"metadata", json::object{{"name", "stored"}}}, {"spec", spec}});
  KOI_ASSIGN_OR_RETURN(DeploymentObject d, parse_deployment_manifest(text, ""));
  return d.spec;
}

Status apply_deployment(StateStore& store, const Cluster& cluster, const std::string& ns, const std::string& manifest_text,
                        const std::string& by, bool* created) {
  KOI_ASSIGN_OR_RETURN(DeploymentObject d, parse_deployment_manifest(manifest_text, ns));
  // The replicas' queue and GPU type are checked now, as a job's would be at submit.
  JobObject probe;
  probe.metadata.ns = ns;
  probe.spec.queue = d.spec.queue;
  probe.spec.resources = d.spec.resources;
  KOI_RETURN_IF_ERROR(check_job_for_cluster(cluster, &probe));
  d.spec.queue = probe.spec.queue;
  d.spec_json["queue"] = d.spec.queue;
  // The controller writes the status often: a conflict with it is retried on a fresh read.
  constexpr int kAttempts = 10;
  for (int attempt = 1;; ++attempt) {
    Status s = write_deployment(store, d, by, created);
    if (s.code() != StatusCode::kFailedPrecondition || attempt == kAttempts) return s;
  }
}

}  // namespace koi::cluster
