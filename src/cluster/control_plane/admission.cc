#include "cluster/control_plane/admission.h"

#include <fmt/format.h>

#include <boost/json.hpp>

#include "cluster/control_plane/object.h"
#include "cluster/control_plane/yaml_reader.h"

namespace koi::cluster {
namespace json = boost::json;
namespace http = boost::beast::http;

namespace {

constexpr const char* kKind = "Admission";
constexpr const char* kName = "cluster";

json::object admission_json(const json::object& stored, const Reconciler& reconciler) {
  json::object out;
  out["paused"] = reconciler.admission_paused();
  for (const char* k : {"reason", "by", "since"}) {
    if (const json::value* v = stored.if_contains(k)) out[k] = *v;
  }
  out["rounds"] = reconciler.rounds();
  return out;
}

Result<json::object> stored_setting(StateStore& store) {
  KOI_ASSIGN_OR_RETURN(std::optional<StoredObject> obj, store.get(kKind, "", kName));
  if (!obj) return json::object{};
  const json::value* spec = obj->body.if_contains("spec");
  return spec && spec->is_object() ? spec->as_object() : json::object{};
}

}  // namespace

Result<AdmissionRequest> parse_admission_request(const std::string& text) {
  KOI_ASSIGN_OR_RETURN(YAML::Node doc, parse_yaml(text, "admission request"));
  if (!doc || !doc.IsMap()) return Status::invalid_argument("admission request: send {paused: true|false, reason: TEXT}");
  YamlReader r(doc, "");
  AdmissionRequest req;
  std::optional<bool> paused = r.boolean("paused");
  if (!paused && r.ok()) r.fail("paused", "is required (true or false)");
  req.paused = paused.value_or(false);
  req.reason = r.str("reason");
  KOI_RETURN_IF_ERROR(r.finish());
  return req;
}

Status restore_admission(StateStore& store, Reconciler& reconciler) {
  KOI_ASSIGN_OR_RETURN(json::object setting, stored_setting(store));
  const json::value* paused = setting.if_contains("paused");
  reconciler.set_admission_paused(paused && paused->is_bool() && paused->as_bool());
  return ok_status();
}

Reply admission_route(const Principal& who, http::verb method, const std::string& body, StateStore& store,
                      Reconciler& reconciler) {
  if (method == http::verb::get) {
    Result<json::object> stored = stored_setting(store);
    if (!stored.ok()) return error_reply(stored.status());
    return json_reply(admission_json(*stored, reconciler));
  }
  if (method != http::verb::put) return error_reply(Status::invalid_argument("admission: use GET or PUT"));
  if (!who.admin) {
    return {403, status_json(403, "Forbidden", "admission is paused and resumed by admins: ask one (koi cluster pause)")};
  }
  Result<AdmissionRequest> req = parse_admission_request(body);
  if (!req.ok()) return error_reply(req.status());
  json::object spec{{"paused", req->paused}, {"reason", req->reason}, {"by", who.name}, {"since", wall_seconds()}};
  json::object obj{{"apiVersion", kApiVersion},
                   {"kind", kKind},
                   {"metadata", json::object{{"name", kName}}},
                   {"spec", spec}};
  Event e;
  e.kind = kKind, e.name = kName, e.time = wall_seconds(), e.reason = req->paused ? "AdmissionPaused" : "AdmissionResumed";
  e.message = fmt::format("admission {} by {}{}", req->paused ? "paused" : "resumed", who.name,
                          req->reason.empty() ? "" : ": " + req->reason);
  if (Status s = store.put_setting(kKind, kName, obj, e); !s.ok()) return error_reply(s);
  reconciler.set_admission_paused(req->paused);
  return json_reply(admission_json(spec, reconciler));
}

}  // namespace koi::cluster
