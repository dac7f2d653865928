#include "cluster/control_plane/deployment_api.h"

#include <fmt/format.h>

#include <boost/beast/http/verb.hpp>
#include <boost/json.hpp>

#include "cluster/control_plane/deployment.h"

namespace koi::cluster {
namespace json = boost::json;
namespace http = boost::beast::http;

namespace {

Status not_found(const std::string& ns, const std::string& name) {
  return Status::not_found(fmt::format("deployment {} not found in namespace {}", name, ns));
}

json::object status_of(const StoredObject& d) {
  const json::value* s = d.body.if_contains("status");
  return s && s->is_object() ? s->as_object() : json::object{};
}

Reply apply(StateStore& store, Reconciler& reconciler, const ResourceRequest& r) {
  bool created = false;
  if (Status s = apply_deployment(store, *reconciler.cluster(), r.ns, r.body, r.who.name, &created); !s.ok()) {
    return error_reply(s);
  }
  reconciler.wake();
  // The name, for the reply: the manifest parsed once more (it did a moment ago).
  auto d = parse_deployment_manifest(r.body, r.ns);
  auto stored = store.get(kDeploymentKind, r.ns, d->metadata.name);
  if (!stored.ok() || !*stored) return error_reply(stored.ok() ? not_found(r.ns, d->metadata.name) : stored.status());
  return json_reply((*stored)->to_json(), created ? 201 : 200);
}

Reply list(StateStore& store, const ResourceRequest& r) {
  auto items = store.list(kDeploymentKind, r.ns);
  if (!items.ok()) return error_reply(items.status());
  json::array out;
  for (const StoredObject& d : *items) out.push_back(d.to_json());
  return json_reply(json::object{{"apiVersion", kApiVersion}, {"kind", "DeploymentList"}, {"items", std::move(out)}});
}

Reply rollback(StateStore& store, Reconciler& reconciler, StoredObject& d, const std::string& by) {
  json::object status = status_of(d);
  const json::value* prev = status.if_contains("previousVersion");
  const bool has_previous = prev && prev->is_number() && prev->to_number<int64_t>() > 0;
  if (!status.contains("rollout") && !has_previous) {
    return error_reply(Status::failed_precondition(fmt::format(
        "deployment {} has no rollout in progress and no previous version to go back to", d.metadata.name)));
  }
  status["rollbackRequested"] = true;
  d.body["status"] = std::move(status);
  Event e;
  e.kind = kDeploymentKind, e.ns = d.metadata.ns, e.name = d.metadata.name, e.time = wall_seconds();
  e.reason = "RollbackRequested", e.message = "rollback requested by " + by;
  if (Status s = store.update(&d, {e}); !s.ok()) return error_reply(s);
  reconciler.wake();
  return json_reply(d.to_json(), 202);
}

Reply remove(StateStore& store, Reconciler& reconciler, StoredObject& d, const std::string& by) {
  if (!d.metadata.deletion_timestamp.empty()) return json_reply(d.to_json(), 202);
  d.metadata.deletion_timestamp = rfc3339(wall_seconds());
  Event e;
  e.kind = kDeploymentKind, e.ns = d.metadata.ns, e.name = d.metadata.name, e.time = wall_seconds();
  e.reason = "DeleteRequested", e.message = "delete requested by " + by + "; draining the replicas";
  if (Status s = store.update(&d, {e}); !s.ok()) return error_reply(s);
  reconciler.wake();
  return json_reply(d.to_json(), 202);
}

Reply events(StateStore& store, const StoredObject& d) {
  auto events = store.events(kDeploymentKind, d.metadata.ns, d.metadata.name);
  if (!events.ok()) return error_reply(events.status());
  json::array items;
  for (const Event& e : *events) items.push_back(json::parse(event_json(e)));
  return json_reply(json::object{{"apiVersion", kApiVersion}, {"kind", "EventList"}, {"items", std::move(items)}});
}

Reply traffic(const TrafficHistory& history, const StoredObject& d) {
  json::array points;
  for (const TrafficPoint& p : history.points(d.metadata.ns, d.metadata.name)) points.push_back(traffic_point_json(p));
  return json_reply(json::object{{"apiVersion", kApiVersion}, {"kind", "DeploymentMetrics"},
                                 {"metadata", json::object{{"name", d.metadata.name}, {"namespace", d.metadata.ns}}},
                                 {"points", std::move(points)}});
}

using Change = Reply (*)(StateStore&, Reconciler&, StoredObject&, const std::string&);

// A change to a stored deployment, read afresh and retried while the controller's status
// writes win the race (409 only after that).
Reply change(StateStore& store, Reconciler& reconciler, const ResourceRequest& r, Change fn) {
  constexpr int kAttempts = 10;
  Reply reply;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    auto found = store.get(kDeploymentKind, r.ns, r.path[0]);
    if (!found.ok()) return error_reply(found.status());
    if (!*found) return error_reply(not_found(r.ns, r.path[0]));
    reply = fn(store, reconciler, **found, r.who.name);
    if (reply.status != 409 || reply.body.find("conflict") == std::string::npos) return reply;
  }
  return reply;
}

Reply handle(StateStore& store, Reconciler& reconciler, const TrafficHistory& history, bool gateway_configured,
             const ResourceRequest& r) {
  const bool get = r.method == http::verb::get, post = r.method == http::verb::post;
  if (r.path.empty()) {
    if (get) return list(store, r);
    if (!post) return error_reply(Status::not_found("deployments: use GET (list) or POST (apply)"));
    if (!gateway_configured) {
      return error_reply(Status::failed_precondition(
          "this control plane has no gateway to route deployments: add gateway: {adminUrl, adminKey} to its config"));
    }
    return apply(store, reconciler, r);
  }
  const std::string& name = r.path[0];
  auto found = store.get(kDeploymentKind, r.ns, name);
  if (!found.ok()) return error_reply(found.status());
  if (!*found) return error_reply(not_found(r.ns, name));
  StoredObject& d = **found;
  if (r.path.size() == 1 && get) return json_reply(d.to_json());
  if (r.path.size() == 1 && r.method == http::verb::delete_) return change(store, reconciler, r, remove);
  if (r.path.size() == 2 && get && r.path[1] == "status") return json_reply(status_of(d));
  if (r.path.size() == 2 && get && r.path[1] == "events") return events(store, d);
  if (r.path.size() == 2 && get && r.path[1] == "metrics") return traffic(history, d);
  if (r.path.size() == 2 && post && r.path[1] == "rollback") return change(store, reconciler, r, rollback);
  return error_reply(Status::not_found("no such deployment route; see GET, DELETE, /status, /events, /metrics, POST /rollback"));
}

}  // namespace

void add_deployment_routes(ApiServer& api, StateStore& store, Reconciler& reconciler, const TrafficHistory& traffic,
                           bool gateway_configured) {
  api.add_resource("deployments", [&store, &reconciler, &traffic, gateway_configured](const ResourceRequest& r) {
    return handle(store, reconciler, traffic, gateway_configured, r);
  });
}

}  // namespace koi::cluster
