#include "cluster/control_plane/gateway_admin.h"

#include <boost/json.hpp>

#include "net/client.h"

namespace koi::cluster {
namespace json = boost::json;

namespace {

constexpr auto kAdminTimeout = std::chrono::milliseconds(2000);

std::string replica_body(const std::string& route, const std::string& version, const std::string& url) {
  return json::serialize(json::object{{"model", route}, {"version", version}, {"url", url}});
}

}  // namespace

Result<std::string> GatewayAdmin::call(const std::string& method, const std::string& path, const std::string& body) {
  const net::Headers headers{{"Authorization", "Bearer " + link_.admin_key}, {"Content-Type", "application/json"}};
  auto r = net::Client::fetch(link_.admin_url + path, method, body, headers, kAdminTimeout);
  if (!r.ok()) return Status::unavailable("gateway " + link_.admin_url + ": " + r.status().message());
  if (r->status == 409 || r->status == 404) return Status(r->status == 409 ? StatusCode::kAlreadyExists : StatusCode::kNotFound, r->body);
  if (r->status / 100 != 2) {
    return Status::unavailable("gateway " + method + " " + path + " answered " + std::to_string(r->status) + ": " + r->body);
  }
  return r->body;
}

Status GatewayAdmin::add_replica(const std::string& route, const std::string& version, const std::string& url) {
  auto r = call("POST", "/admin/replicas", replica_body(route, version, url));
  if (!r.ok() && r.status().code() != StatusCode::kAlreadyExists) return r.status();
  return ok_status();
}

Status GatewayAdmin::remove_replica(const std::string& route, const std::string& version, const std::string& url) {
  auto r = call("DELETE", "/admin/replicas", replica_body(route, version, url));
  if (!r.ok() && r.status().code() != StatusCode::kNotFound) return r.status();
  return ok_status();
}

Status GatewayAdmin::set_weights(const std::string& route, const std::map<std::string, double>& weights) {
  json::object w;
  for (const auto& [version, weight] : weights) w[version] = weight;
  return call("POST", "/admin/weights", json::serialize(json::object{{"model", route}, {"weights", std::move(w)}})).status();
}

Result<std::map<std::string, GatewayVersionStats>> GatewayAdmin::stats(const std::string& route) {
  KOI_ASSIGN_OR_RETURN(std::string body, call("GET", "/admin/stats", ""));
  json::error_code ec;
  json::value v = json::parse(body, ec);
  if (ec || !v.is_object()) return Status::unavailable("gateway /admin/stats is not a JSON object");
  std::map<std::string, GatewayVersionStats> out;
  const json::value* model = v.as_object().if_contains(route);
  if (!model || !model->is_object()) return out;
  for (const auto& [version, s] : model->as_object()) {
    if (!s.is_object()) continue;
    GatewayVersionStats st;
    if (const json::value* n = s.as_object().if_contains("requests"); n && n->is_number()) st.requests = n->to_number<int64_t>();
    if (const json::value* n = s.as_object().if_contains("errors"); n && n->is_number()) st.errors = n->to_number<int64_t>();
    out[std::string(version)] = st;
  }
  return out;
}

}  // namespace koi::cluster
