#include "gateway/admin_api.h"

#include <openssl/crypto.h>

#include <boost/json.hpp>
#include <climits>
#include <cmath>
#include <optional>
#include <vector>

#include "base/logging.h"
#include "gateway/api_keys.h"
#include "gateway/openai.h"

namespace koi::gateway {

namespace json = boost::json;

namespace {

AdminReply reply(const Status& s, std::string ok_body = "{\"ok\":true}") {
  if (s.ok()) return {200, std::move(ok_body)};
  int code = 500;
  switch (s.code()) {
    case StatusCode::kInvalidArgument: code = 400; break;
    case StatusCode::kNotFound: code = 404; break;
    case StatusCode::kAlreadyExists: code = 409; break;
    default: break;
  }
  return {code, openai_error(s.message(), "admin_error", code)};
}

// The fields of one admin call's JSON body, read with their path ("tenants.rpm") for errors.
// The first error wins; a getter after an error returns nothing.
class Fields {
 public:
  Fields(std::string resource, std::string_view body, std::initializer_list<std::string_view> allowed)
      : resource_(std::move(resource)) {
    json::error_code ec;
    value_ = json::parse(body, ec);
    if (ec || !value_.is_object()) {
      fail(Status::invalid_argument(resource_ + ": the body must be a JSON object"));
      return;
    }
    const std::vector<std::string_view> names(allowed);
    for (const auto& kv : value_.as_object()) {
      if (std::find(names.begin(), names.end(), kv.key()) == names.end()) {
        fail(Status::invalid_argument(path(kv.key()) + ": " + unknown_key_message(kv.key(), names)));
      }
    }
  }
  const Status& status() const { return status_; }
  const json::value* find(std::string_view key) const {
    return status_.ok() ? value_.as_object().if_contains(key) : nullptr;
  }
  std::string path(std::string_view key) const { return resource_ + "." + std::string(key); }
  void fail(Status s) {
    if (status_.ok()) status_ = std::move(s);
  }
  void bad(const std::string& path, const std::string& what, const json::value& got) {
    fail(Status::invalid_argument(path + " must be " + what + ", got " + json::serialize(got)));
  }

  std::string required_string(std::string_view key) {
    const json::value* v = find(key);
    if (!status_.ok()) return "";
    if (!v) {
      fail(Status::invalid_argument(path(key) + " is required (a non-empty string)"));
      return "";
    }
    if (!v->is_string() || v->as_string().empty()) {
      bad(path(key), "a non-empty string", *v);
      return "";
    }
    return std::string(v->as_string());
  }
  std::optional<double> non_negative(std::string_view key) {
    const json::value* v = find(key);
    if (!v) return std::nullopt;
    return non_negative_value(path(key), *v);
  }
  std::optional<double> non_negative_value(const std::string& path, const json::value& v) {
    if (!v.is_number() || !(v.to_number<double>() >= 0)) {
      bad(path, "a non-negative number", v);
      return std::nullopt;
    }
    return v.to_number<double>();
  }
  std::optional<int> count(std::string_view key) {
    const json::value* v = find(key);
    if (!v) return std::nullopt;
    const double d = v->is_number() ? v->to_number<double>() : -1;
    if (!(d >= 0 && d <= INT_MAX && d == std::floor(d))) {
      bad(path(key), "an integer from 0 to " + std::to_string(INT_MAX), *v);
      return std::nullopt;
    }
    return static_cast<int>(d);
  }

 private:
  std::string resource_;
  json::value value_;
  Status status_;
};

std::string issued_key_json(const IssuedKey& k) {
  return json::serialize(json::object{{"id", k.record.id}, {"key", k.key}, {"tenant", k.record.tenant}});
}

}  // namespace

AdminApi::AdminApi(std::string admin_key, Fleet& fleet, UsageStore& store)
    : admin_key_(std::move(admin_key)), fleet_(fleet), store_(store) {}

AdminReply AdminApi::handle(std::string_view method, std::string_view target, std::string_view bearer, std::string_view body) {
  if (admin_key_.empty() || bearer.size() != admin_key_.size() ||
      CRYPTO_memcmp(bearer.data(), admin_key_.data(), bearer.size()) != 0) {
    return {401, openai_error("admin API: wrong or missing admin key", "auth_error", 401)};
  }
  std::lock_guard<std::mutex> lock(mu_);
  const std::string text(body);
  if (method == "GET" && target == "/admin/state") return {200, fleet_.state_json()};
  if (method == "GET" && target == "/admin/stats") return {200, fleet_.stats_json()};
  if (method == "GET" && target == "/admin/kv_index") return {200, fleet_.kv_index_json()};
  if (method == "DELETE" && target.starts_with("/admin/keys/")) return revoke_key(std::string(target.substr(12)));
  if (method == "POST" && target == "/admin/keys") return issue_key(text);
  if (method == "POST" && target == "/admin/tenants") return tenants(text);
  if (method == "POST" && target == "/admin/weights") return weights(text);
  if ((method == "POST" || method == "DELETE") && target == "/admin/replicas") return replicas(method == "POST", text);
  return reply(Status::not_found("admin API: no route " + std::string(method) + " " + std::string(target) +
                                 "; see docs/gateway.md for the admin calls"));
}

AdminReply AdminApi::tenants(const std::string& body) {
  Fields f("tenants", body, {"name", "rpm", "tpm", "max_concurrency", "priority", "models"});
  const std::string name = f.required_string("name");
  const std::optional<double> rpm = f.non_negative("rpm"), tpm = f.non_negative("tpm");
  const std::optional<int> max_concurrency = f.count("max_concurrency");
  std::optional<Priority> priority;
  if (const json::value* p = f.find("priority")) {
    if (p->is_string()) {
      if (auto parsed = parse_priority(std::string(p->as_string())); parsed.ok()) priority = *parsed;
    }
    if (!priority) f.bad(f.path("priority"), "\"high\", \"normal\" or \"low\"", *p);
  }
  std::optional<std::vector<std::string>> models;
  if (const json::value* m = f.find("models")) {
    if (!m->is_array()) f.bad(f.path("models"), "a list of model names ([] for every model)", *m);
    models.emplace();
    for (size_t i = 0; m->is_array() && i < m->as_array().size(); ++i) {
      const json::value& x = m->as_array()[i];
      const std::string p = f.path("models") + "[" + std::to_string(i) + "]";
      if (!x.is_string()) {
        f.bad(p, "a model name", x);
      } else if (!fleet_.has_model(std::string(x.as_string()))) {
        f.fail(Status::invalid_argument(p + ": model '" + std::string(x.as_string()) +
                                        "' does not exist; GET /admin/state lists the models"));
      } else {
        models->emplace_back(x.as_string());
      }
    }
  }
  if (!f.status().ok()) return reply(f.status());

  TenantConfig t = fleet_.tenant(name).value_or(TenantConfig{.name = name});
  t.keys.clear();  // keys live in the key ring and the key table, not in the tenant row
  if (rpm) t.rpm = *rpm;
  if (tpm) t.tpm = *tpm;
  if (max_concurrency) t.max_concurrency = *max_concurrency;
  if (priority) t.priority = *priority;
  if (models) t.models = std::move(*models);
  if (Status s = store_.put_tenant(t); !s.ok()) return reply(s);
  return reply(fleet_.upsert_tenant(t));
}

AdminReply AdminApi::weights(const std::string& body) {
  Fields f("weights", body, {"model", "weights"});
  const std::string model = f.required_string("model");
  std::vector<StoredWeight> weights;
  const json::value* w = f.find("weights");
  if (f.status().ok() && !w) f.fail(Status::invalid_argument("weights.weights is required ({\"VERSION\": weight, ...})"));
  if (w && (!w->is_object() || w->as_object().empty())) f.bad("weights.weights", "an object {\"VERSION\": weight, ...}", *w);
  if (w && w->is_object()) {
    for (const auto& kv : w->as_object()) {
      const std::string version(kv.key());
      const std::optional<double> weight = f.non_negative_value("weights.weights." + version, kv.value());
      if (weight && !fleet_.has_version(model, version)) {
        f.fail(Status::not_found("weights.weights." + version + ": no version " + model + "/" + version +
                                 "; GET /admin/state lists the versions"));
      }
      if (weight) weights.push_back({model, version, *weight});
    }
  }
  if (!f.status().ok()) return reply(f.status());
  if (Status s = store_.put_weights(weights); !s.ok()) return reply(s);
  std::map<std::string, double> by_version;
  for (const StoredWeight& sw : weights) by_version[sw.version] = sw.weight;
  return reply(fleet_.set_weights(model, by_version));
}

AdminReply AdminApi::replicas(bool add, const std::string& body) {
  Fields f("replicas", body, {"model", "version", "url"});
  const StoredReplica r{f.required_string("model"), f.required_string("version"), f.required_string("url"), !add};
  if (f.status().ok()) {
    std::string host, port;
    if (Status s = parse_replica_url(r.url, &host, &port); !s.ok()) f.fail(Status::invalid_argument("replicas.url: " + s.message()));
  }
  if (!f.status().ok()) return reply(f.status());
  const bool present = fleet_.has_replica(r.model, r.version, r.url);
  if (add && present) return reply(Status::already_exists("replica " + r.url + " is already in " + r.model + "/" + r.version));
  if (!add && !present) return reply(Status::not_found("replica " + r.url + " is not in " + r.model + "/" + r.version));
  if (Status s = store_.put_replica(r); !s.ok()) return reply(s);
  return reply(add ? fleet_.add_replica(r.model, r.version, r.url) : fleet_.remove_replica(r.model, r.version, r.url));
}

AdminReply AdminApi::issue_key(const std::string& body) {
  Fields f("keys", body, {"tenant"});
  const std::string tenant = f.required_string("tenant");
  if (f.status().ok() && !fleet_.tenant(tenant)) {
    f.fail(Status::not_found("keys.tenant: tenant '" + tenant + "' does not exist; create it with POST /admin/tenants"));
  }
  if (!f.status().ok()) return reply(f.status());
  IssuedKey k = gateway::issue_key(tenant);
  if (Status s = store_.put_key(k.record); !s.ok()) return reply(s);
  fleet_.put_key(k.record);
  return reply(ok_status(), issued_key_json(k));
}

AdminReply AdminApi::revoke_key(const std::string& id) {
  Status s = store_.revoke_key(id);
  if (s.ok() && !fleet_.revoke_key(id)) s = Status::not_found("no key with id " + id);
  return reply(s);
}

Status restore_admin_changes(UsageStore& store, Fleet& fleet) {
  KOI_ASSIGN_OR_RETURN(std::vector<StoredKey> keys, store.load_keys());
  KOI_ASSIGN_OR_RETURN(AdminState state, store.load_admin_state());
  for (StoredKey& k : keys) {
    if (k.revoked) fleet.revoke_key(k.record.id);
    else fleet.put_key(std::move(k.record));
  }
  for (const StoredReplica& r : state.replicas) {
    Status s = r.removed ? fleet.remove_replica(r.model, r.version, r.url) : fleet.add_replica(r.model, r.version, r.url);
    if (!s.ok() && s.code() != StatusCode::kNotFound && s.code() != StatusCode::kAlreadyExists) {
      log::warn("gateway: stored replica {} of {}/{} skipped: {}", r.url, r.model, r.version, s.message());
    }
  }
  for (const StoredWeight& w : state.weights) {
    if (Status s = fleet.set_weights(w.model, {{w.version, w.weight}}); !s.ok()) {
      log::warn("gateway: stored weight of {}/{} skipped: {}", w.model, w.version, s.message());
    }
  }
  for (const TenantConfig& t : state.tenants) {
    if (Status s = fleet.upsert_tenant(t); !s.ok()) log::warn("gateway: stored tenant '{}' skipped: {}", t.name, s.message());
  }
  return ok_status();
}

}  // namespace koi::gateway
