#include "gateway/config.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <boost/url/parse.hpp>
#include <cmath>
#include <set>
#include <type_traits>

#include "base/file.h"

namespace koi::gateway {

Result<Priority> parse_priority(std::string_view name) {
  if (name == "high") return Priority::kHigh;
  if (name == "normal") return Priority::kNormal;
  if (name == "low") return Priority::kLow;
  return Status::invalid_argument("priority '" + std::string(name) + "' is unknown; use high, normal or low");
}

std::string_view priority_name(Priority p) {
  switch (p) {
    case Priority::kHigh: return "high";
    case Priority::kNormal: return "normal";
    case Priority::kLow: return "low";
  }
  return "?";
}

Status parse_replica_url(std::string_view url, std::string* host, std::string* port) {
  auto u = boost::urls::parse_absolute_uri(url);
  if (!u || u->scheme() != "http" || u->host().empty() || !u->has_port() || (u->path() != "" && u->path() != "/")) {
    return Status::invalid_argument("replica URL '" + std::string(url) + "' must read http://HOST:PORT");
  }
  const std::string_view p = u->port();
  int number = 0;
  const bool digits = !p.empty() && p.size() <= 5 && std::all_of(p.begin(), p.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (digits) number = std::stoi(std::string(p));
  if (!digits || number < 1 || number > 65535) {
    return Status::invalid_argument("replica URL '" + std::string(url) + "' has port " + std::string(p) + "; a port is 1-65535");
  }
  *host = u->host();
  *port = std::string(p);
  return ok_status();
}

namespace {

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1])});
      diag = up;
    }
  }
  return row[b.size()];
}

}  // namespace

std::string unknown_key_message(std::string_view key, std::span<const std::string_view> allowed) {
  std::string_view best;
  size_t best_distance = 3;  // suggest only names at most two edits away
  for (std::string_view a : allowed) {
    if (const size_t d = edit_distance(key, a); d < best_distance) best = a, best_distance = d;
  }
  if (!best.empty()) return "unknown key; did you mean " + std::string(best) + "?";
  std::string list;
  for (std::string_view a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
  return "unknown key; the keys here are " + list;
}

namespace {

using Keys = std::initializer_list<std::string_view>;

// Reads one YAML document field by field; the first error wins and names its path.
class Reader {
 public:
  explicit Reader(std::string origin) : origin_(std::move(origin)) {}
  Status status() const { return status_; }
  void fail(const std::string& path, const std::string& msg) {
    if (status_.ok()) status_ = Status::invalid_argument(origin_ + ": " + path + ": " + msg);
  }
  // Fails on a key of the mapping `node` (at `path`, which ends in '.' or is "") that is not
  // in `allowed`, and when `node` is there but not a mapping; true when it is a mapping.
  bool is_map(const YAML::Node& node, const std::string& path, Keys allowed) {
    if (!node) return false;
    if (!node.IsMap()) {
      fail(path.empty() ? "(top level)" : path.substr(0, path.size() - 1), "must be a mapping");
      return false;
    }
    const std::vector<std::string_view> names(allowed);
    for (const auto& kv : node) {
      const std::string key = kv.first.Scalar();
      if (std::find(names.begin(), names.end(), key) == names.end()) fail(path + key, unknown_key_message(key, names));
    }
    return true;
  }
  template <typename T>
  void get(const YAML::Node& node, const char* key, const std::string& path, T* out) {
    const YAML::Node v = node[key];
    if (!v) return;
    if constexpr (std::is_same_v<T, std::string>) {
      if (!v.IsScalar()) return fail(path + key, "must be a string");
    } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
      if (!v.IsSequence()) return fail(path + key, "must be a list of strings");
      for (const auto& item : v) {
        if (!item.IsScalar()) return fail(path + key, "must be a list of strings");
      }
    }
    try {
      *out = v.as<T>();
    } catch (const YAML::Exception&) {
      const std::string shown = v.IsScalar() ? "'" + v.Scalar() + "'" : v.IsSequence() ? "a list" : "a mapping";
      fail(path + key, std::string(std::is_arithmetic_v<T> ? "must be a number" : "has the wrong type") + ", got " + shown);
      return;
    }
    if constexpr (std::is_floating_point_v<T>) {
      if (!std::isfinite(*out)) fail(path + key, "must be a finite number");
    }
  }
  template <typename T>
  void get_min(const YAML::Node& node, const char* key, const std::string& path, T* out, T min) {
    get(node, key, path, out);
    if (*out < min) fail(path + key, fmt::format("must be >= {}", min));
  }
  bool is_list(const YAML::Node& node, const std::string& path) {
    if (node && !node.IsSequence()) fail(path, "must be a list");
    return node && node.IsSequence();
  }

 private:
  std::string origin_;
  Status status_;
};

void split_listen(Reader& r, const std::string& path, const std::string& text, std::string* host, int* port) {
  const size_t colon = text.rfind(':');
  try {
    if (colon == std::string::npos) throw std::invalid_argument("no colon");
    *host = text.substr(0, colon);
    size_t used = 0;
    *port = std::stoi(text.substr(colon + 1), &used);
    if (used != text.size() - colon - 1 || *port < 0 || *port > 65535) throw std::out_of_range("port");
  } catch (const std::exception&) {
    r.fail(path, "must read HOST:PORT with a port 0-65535 (0 picks a free one), got '" + text + "'");
  }
}

void read_prefill(Reader& r, const YAML::Node& node, const std::string& p, PrefillConfig* out) {
  if (!r.is_map(node, p, {"min_uncached_tokens", "replicas"})) return;
  r.get_min(node, "min_uncached_tokens", p, &out->min_uncached_tokens, int64_t{0});
  const YAML::Node replicas = node["replicas"];
  if (!replicas || !r.is_list(replicas, p + "replicas") || replicas.size() == 0) {
    return r.fail(p + "replicas", "needs at least one prefill worker ({url: http://HOST:PORT, kv: HOST:PORT})");
  }
  for (size_t k = 0; k < replicas.size(); ++k) {
    const std::string rp = p + "replicas[" + std::to_string(k) + "].";
    if (!r.is_map(replicas[k], rp, {"url", "kv"})) {
      r.fail(rp.substr(0, rp.size() - 1), "must be a mapping with url and kv");
      continue;
    }
    PrefillReplicaConfig w;
    r.get(replicas[k], "url", rp, &w.url);
    r.get(replicas[k], "kv", rp, &w.kv);
    std::string host, port;
    if (Status s = parse_replica_url(w.url, &host, &port); !s.ok()) r.fail(rp + "url", s.message());
    int kv_port = 0;
    split_listen(r, rp + "kv", w.kv, &host, &kv_port);
    if (kv_port == 0) r.fail(rp + "kv", "needs the prefill worker's --kv-port (1-65535), got '" + w.kv + "'");
    out->replicas.push_back(std::move(w));
  }
}

void read_models(Reader& r, const YAML::Node& root, GatewayConfig* c) {
  const YAML::Node models = root["models"];
  if (!models || (models.IsSequence() && models.size() == 0)) {
    // A gateway whose routes all come through its admin API (the control plane's
    // Deployments) starts with none; without the admin API nothing could ever be served.
    if (c->admin_key.empty()) {
      r.fail("models", "at least one model is required (name, versions with replicas), or an admin key so that "
                       "routes are added at run time");
    }
    return;
  }
  if (!r.is_list(models, "models")) return;
  std::set<std::string> names;
  for (size_t i = 0; i < models.size(); ++i) {
    const std::string p = "models[" + std::to_string(i) + "].";
    if (!r.is_map(models[i], p, {"name", "price", "versions", "prefill", "routing"})) {
      r.fail(p.substr(0, p.size() - 1), "must be a mapping with name and versions");
      continue;
    }
    ModelConfig m;
    r.get(models[i], "name", p, &m.name);
    if (m.name.empty()) r.fail(p + "name", "is required");
    if (!names.insert(m.name).second) r.fail(p + "name", "'" + m.name + "' appears twice");
    if (const YAML::Node price = models[i]["price"]; r.is_map(price, p + "price.", {"prompt_per_1k", "completion_per_1k"})) {
      r.get_min(price, "prompt_per_1k", p + "price.", &m.prompt_price_per_1k, 0.0);
      r.get_min(price, "completion_per_1k", p + "price.", &m.completion_price_per_1k, 0.0);
    }
    const YAML::Node versions = models[i]["versions"];
    if (!versions || !r.is_list(versions, p + "versions") || versions.size() == 0) {
      r.fail(p + "versions", "needs at least one version with replicas");
      continue;
    }
    std::set<std::string> version_names;
    for (size_t j = 0; j < versions.size(); ++j) {
      const std::string vp = p + "versions[" + std::to_string(j) + "].";
      if (!r.is_map(versions[j], vp, {"name", "weight", "replicas"})) {
        r.fail(vp.substr(0, vp.size() - 1), "must be a mapping with name, weight and replicas");
        continue;
      }
      VersionConfig v;
      r.get(versions[j], "name", vp, &v.name);
      if (v.name.empty()) r.fail(vp + "name", "is required");
      if (!version_names.insert(v.name).second) r.fail(vp + "name", "'" + v.name + "' appears twice");
      v.weight = versions.size() == 1 ? 100 : 0;
      r.get_min(versions[j], "weight", vp, &v.weight, 0.0);
      r.get(versions[j], "replicas", vp, &v.replicas);
      if (v.replicas.empty()) r.fail(vp + "replicas", "needs at least one replica URL (http://HOST:PORT)");
      for (size_t k = 0; k < v.replicas.size(); ++k) {
        std::string host, port;
        if (Status s = parse_replica_url(v.replicas[k], &host, &port); !s.ok()) {
          r.fail(vp + "replicas[" + std::to_string(k) + "]", s.message());
        }
      }
      m.versions.push_back(std::move(v));
    }
    read_prefill(r, models[i]["prefill"], p + "prefill.", &m.prefill);
    if (models[i]["routing"]) {
      std::string policy;
      r.get(models[i], "routing", p, &policy);
      if (auto parsed = parse_routing_policy(policy); parsed.ok()) {
        m.routing = *parsed;
      } else {
        r.fail(p + "routing", parsed.status().message());
      }
    }
    c->models.push_back(std::move(m));
  }
}

void read_tenants(Reader& r, const YAML::Node& root, GatewayConfig* c) {
  const YAML::Node tenants = root["tenants"];
  if (!tenants || (tenants.IsSequence() && tenants.size() == 0)) {
    return r.fail("tenants", "at least one tenant is required (name, limits, keys)");
  }
  if (!r.is_list(tenants, "tenants")) return;
  std::set<std::string> names, key_ids;
  for (size_t i = 0; i < tenants.size(); ++i) {
    const std::string p = "tenants[" + std::to_string(i) + "].";
    if (!r.is_map(tenants[i], p, {"name", "rpm", "tpm", "max_concurrency", "priority", "models", "keys"})) {
      r.fail(p.substr(0, p.size() - 1), "must be a mapping with a name");
      continue;
    }
    TenantConfig t;
    r.get(tenants[i], "name", p, &t.name);
    if (t.name.empty()) r.fail(p + "name", "is required");
    if (!names.insert(t.name).second) r.fail(p + "name", "'" + t.name + "' appears twice");
    r.get_min(tenants[i], "rpm", p, &t.rpm, 0.0);
    r.get_min(tenants[i], "tpm", p, &t.tpm, 0.0);
    r.get_min(tenants[i], "max_concurrency", p, &t.max_concurrency, 0);
    std::string priority = "normal";
    r.get(tenants[i], "priority", p, &priority);
    if (auto pr = parse_priority(priority); pr.ok()) t.priority = *pr; else r.fail(p + "priority", pr.status().message());
    r.get(tenants[i], "models", p, &t.models);
    for (size_t j = 0; j < t.models.size(); ++j) {
      const bool known = std::any_of(c->models.begin(), c->models.end(), [&](const ModelConfig& m) { return m.name == t.models[j]; });
      if (!known) r.fail(p + "models[" + std::to_string(j) + "]", "model '" + t.models[j] + "' is not defined under models:");
    }
    const YAML::Node keys = tenants[i]["keys"];
    if (r.is_list(keys, p + "keys")) {
      for (size_t j = 0; j < keys.size(); ++j) {
        const std::string kp = p + "keys[" + std::to_string(j) + "].";
        if (!r.is_map(keys[j], kp, {"id", "hash"})) {
          r.fail(kp.substr(0, kp.size() - 1), "must be a mapping {id, hash}");
          continue;
        }
        KeyRecord k{.id = "", .tenant = t.name, .hash = ""};
        r.get(keys[j], "id", kp, &k.id);
        r.get(keys[j], "hash", kp, &k.hash);
        if (Status s = validate_key_hash(k.hash); !s.ok()) r.fail(kp + "hash", s.message());
        if (k.id.empty() || !key_ids.insert(k.id).second) r.fail(kp + "id", "must be present and unique");
        t.keys.push_back(std::move(k));
      }
    }
    c->tenants.push_back(std::move(t));
  }
}

}  // namespace

Result<GatewayConfig> parse_config(std::string_view yaml, std::string_view origin) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml));
  } catch (const YAML::Exception& e) {
    return Status::invalid_argument(std::string(origin) + ": not valid YAML: " + e.what());
  }
  if (!root.IsMap()) return Status::invalid_argument(std::string(origin) + ": must be a YAML mapping (listen:, models:, tenants:, ...)");
  Reader r{std::string(origin)};
  GatewayConfig c;
  r.is_map(root, "", {"listen", "grpc_listen", "admin", "store", "routing", "timeouts", "health", "breaker", "max_attempts", "limits",
                      "models", "tenants"});
  std::string listen = c.host + ":" + std::to_string(c.port);
  r.get(root, "listen", "", &listen);
  split_listen(r, "listen", listen, &c.host, &c.port);
  if (root["grpc_listen"]) {
    std::string grpc_listen;
    r.get(root, "grpc_listen", "", &grpc_listen);
    split_listen(r, "grpc_listen", grpc_listen, &c.grpc_host, &c.grpc_port);
    if (c.grpc_host.empty() && grpc_listen.find(':') != std::string::npos) {
      r.fail("grpc_listen", "needs a host, got '" + grpc_listen + "'");
    }
  }
  if (const YAML::Node admin = root["admin"]; r.is_map(admin, "admin.", {"listen", "key"})) {
    std::string admin_listen = c.admin_host + ":" + std::to_string(c.admin_port);
    r.get(admin, "listen", "admin.", &admin_listen);
    split_listen(r, "admin.listen", admin_listen, &c.admin_host, &c.admin_port);
    r.get(admin, "key", "admin.", &c.admin_key);
    if (c.admin_key.size() < 16) r.fail("admin.key", "must be at least 16 characters");
  }
  r.get(root, "store", "", &c.store);
  if (const YAML::Node routing = root["routing"];
      r.is_map(routing, "routing.", {"policy", "block_bytes", "session_header", "cache_threshold", "balance_abs",
                                     "balance_rel", "blocks_per_replica", "kv_events_poll_ms",
                                     "kv_events_wait_ms"})) {
    std::string policy = "least_outstanding";
    r.get(routing, "policy", "routing.", &policy);
    if (auto p = parse_routing_policy(policy); p.ok()) c.routing = *p; else r.fail("routing.policy", p.status().message());
    r.get_min(routing, "block_bytes", "routing.", &c.prefix_block_bytes, size_t{1});
    r.get(routing, "session_header", "routing.", &c.session_header);
    r.get_min(routing, "cache_threshold", "routing.", &c.kv.cache_threshold, 0.0);
    r.get_min(routing, "balance_abs", "routing.", &c.kv.balance_abs, int64_t{0});
    r.get_min(routing, "balance_rel", "routing.", &c.kv.balance_rel, 1.0);
    r.get_min(routing, "blocks_per_replica", "routing.", &c.kv.blocks_per_replica, size_t{1});
    r.get_min(routing, "kv_events_poll_ms", "routing.", &c.kv_events_poll_ms, int64_t{1});
    r.get_min(routing, "kv_events_wait_ms", "routing.", &c.kv_events_wait_ms, int64_t{0});
    if (c.kv_events_wait_ms > 60000) r.fail("routing.kv_events_wait_ms", "is at most 60000 (the engines' limit)");
  }
  if (const YAML::Node t = root["timeouts"]; r.is_map(t, "timeouts.", {"connect_ms", "first_byte_ms", "idle_ms"})) {
    r.get_min(t, "connect_ms", "timeouts.", &c.connect_timeout_ms, int64_t{1});
    r.get_min(t, "first_byte_ms", "timeouts.", &c.first_byte_timeout_ms, int64_t{1});
    r.get_min(t, "idle_ms", "timeouts.", &c.idle_timeout_ms, int64_t{1});
  }
  if (const YAML::Node h = root["health"]; r.is_map(h, "health.", {"interval_ms", "timeout_ms"})) {
    r.get_min(h, "interval_ms", "health.", &c.health_interval_ms, int64_t{10});
    r.get_min(h, "timeout_ms", "health.", &c.health_timeout_ms, int64_t{1});
  }
  if (const YAML::Node b = root["breaker"]; r.is_map(b, "breaker.", {"failures", "open_ms"})) {
    r.get_min(b, "failures", "breaker.", &c.breaker_failures, 1);
    r.get_min(b, "open_ms", "breaker.", &c.breaker_open_ms, int64_t{1});
  }
  r.get_min(root, "max_attempts", "", &c.max_attempts, 1);
  if (const YAML::Node l = root["limits"]) {
    if (l.IsMap() && l["burst_seconds"]) {
      r.fail("limits.burst_seconds", "is no longer read: a tenant's bucket holds its whole per-minute allowance "
                                     "(docs/gateway.md); remove the key");
    }
    if (r.is_map(l, "limits.", {"max_in_flight", "max_connections"})) {
      r.get_min(l, "max_in_flight", "limits.", &c.max_in_flight, 1);
      r.get_min(l, "max_connections", "limits.", &c.max_connections, 1);
    }
  }
  read_models(r, root, &c);
  read_tenants(r, root, &c);
  KOI_RETURN_IF_ERROR(r.status());
  return c;
}

Result<GatewayConfig> load_config(const std::string& path) {
  KOI_ASSIGN_OR_RETURN(std::string text, read_file(path));
  return parse_config(text, path);
}

}  // namespace koi::gateway
