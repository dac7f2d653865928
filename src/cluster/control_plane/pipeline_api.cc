#include "cluster/control_plane/pipeline_api.h"

#include <fmt/format.h>

#include <boost/beast/http/verb.hpp>
#include <boost/json.hpp>
#include <charconv>

#include "cluster/control_plane/job_submit.h"

namespace koi::cluster {
namespace json = boost::json;
namespace http = boost::beast::http;

namespace {

Status not_found(const std::string& name, const std::string& ns) {
  return Status::not_found(fmt::format("pipeline {} not found in namespace {}", name, ns));
}

// Each job step against the cluster as submit_job() will check it: "spec.steps[0].job.queue: ...".
Status check_job_steps(const Cluster& cluster, const PipelineObject& p) {
  for (size_t i = 0; i < p.spec.steps.size(); ++i) {
    if (p.spec.steps[i].kind != StepKind::kJob) continue;
    JobObject job;
    job.metadata.ns = p.metadata.ns;
    job.spec = p.spec.steps[i].job;
    Status s = check_job_for_cluster(cluster, &job);
    if (s.ok()) continue;
    std::string message = s.message();
    if (message.starts_with("spec.")) message = fmt::format("spec.steps[{}].job.{}", i, message.substr(5));
    return Status::invalid_argument(message);
  }
  return ok_status();
}

Reply submit(StateStore& store, Reconciler& reconciler, const PipelineContext& ctx, const ResourceRequest& r) {
  auto p = parse_pipeline_manifest(r.body, r.ns, ctx);
  if (!p.ok()) return error_reply(p.status());
  if (Status s = check_job_steps(*reconciler.cluster(), *p); !s.ok()) return error_reply(s);
  StoredObject o = to_stored(*p);
  Event e;
  e.kind = "Pipeline", e.ns = r.ns, e.name = p->metadata.name, e.time = wall_seconds(), e.reason = "Submitted";
  e.message = fmt::format("{} steps, submitted by {}", p->spec.steps.size(), r.who.name);
  if (Status s = store.create(&o, {e}); !s.ok()) {
    if (s.code() == StatusCode::kAlreadyExists) {
      return error_reply(Status::already_exists(fmt::format(
          "pipeline {} already exists in namespace {}; pick another name", p->metadata.name, r.ns)));
    }
    return error_reply(s);
  }
  reconciler.wake();
  return json_reply(o.to_json(), 201);
}

Reply cancel(StateStore& store, Reconciler& reconciler, const ResourceRequest& r, StoredObject& o) {
  int64_t expected = 0;
  if (auto it = r.query.find("resourceVersion"); it != r.query.end() && !it->second.empty()) {
    auto [end, ec] = std::from_chars(it->second.data(), it->second.data() + it->second.size(), expected);
    if (ec != std::errc() || end != it->second.data() + it->second.size() || expected < 1) {
      return error_reply(Status::invalid_argument("resourceVersion: '" + it->second + "' must be a positive integer"));
    }
  }
  if (expected != 0 && expected != o.metadata.resource_version) {
    return error_reply(Status::failed_precondition(fmt::format(
        "conflict: pipeline {} is at resourceVersion {}, the request names {}; read it again and retry", o.metadata.name,
        o.metadata.resource_version, expected)));
  }
  if (o.phase == "Succeeded" || o.phase == "Failed" || o.phase == "Cancelled" || !o.metadata.deletion_timestamp.empty()) {
    return json_reply(o.to_json());
  }
  o.metadata.deletion_timestamp = rfc3339(wall_seconds());
  Event e;
  e.kind = "Pipeline", e.ns = r.ns, e.name = o.metadata.name, e.time = wall_seconds(), e.reason = "CancelRequested";
  e.message = "cancel requested by " + r.who.name;
  if (Status s = store.update(&o, {e}); !s.ok()) return error_reply(s);
  reconciler.wake();
  return json_reply(o.to_json(), 202);
}

}  // namespace

ResourceHandler pipelines_resource(StateStore& store, Reconciler& reconciler, PipelineContext ctx) {
  return [&store, &reconciler, ctx](const ResourceRequest& r) -> Reply {
    if (r.path.empty()) {
      if (r.method == http::verb::post && !r.ns.empty()) return submit(store, reconciler, ctx, r);
      if (r.method != http::verb::get) return {405, status_json(405, "MethodNotAllowed", "pipelines: use GET or POST")};
      auto all = store.list("Pipeline", r.ns);
      if (!all.ok()) return error_reply(all.status());
      json::array items;
      for (const StoredObject& o : *all) items.push_back(o.to_json());
      return json_reply(json::object{{"apiVersion", kApiVersion}, {"kind", "PipelineList"}, {"items", std::move(items)}});
    }
    if (r.path.size() > 2 || (r.path.size() == 2 && r.path[1] != "events")) {
      return error_reply(Status::not_found("no route pipelines/" + r.path[0] + "/...: use pipelines/NAME[/events]"));
    }
    auto found = store.get("Pipeline", r.ns, r.path[0]);
    if (!found.ok()) return error_reply(found.status());
    if (!*found) return error_reply(not_found(r.path[0], r.ns));
    if (r.path.size() == 2) {
      if (r.method != http::verb::get) return {405, status_json(405, "MethodNotAllowed", "pipeline events: use GET")};
      auto events = store.events("Pipeline", r.ns, r.path[0]);
      if (!events.ok()) return error_reply(events.status());
      json::array items;
      for (const Event& e : *events) items.push_back(json::parse(event_json(e)));
      return json_reply(json::object{{"apiVersion", kApiVersion}, {"kind", "EventList"}, {"items", std::move(items)}});
    }
    if (r.method == http::verb::get) return json_reply((*found)->to_json());
    if (r.method == http::verb::delete_) return cancel(store, reconciler, r, **found);
    return {405, status_json(405, "MethodNotAllowed", "a pipeline: use GET or DELETE (cancel)")};
  };
}

}  // namespace koi::cluster
