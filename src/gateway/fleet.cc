#include "gateway/fleet.h"

#include <algorithm>
#include <boost/json.hpp>
#include <cmath>
#include <utility>
#include <fmt/format.h>

#include "net/client.h"
#include "gateway/rollout.h"

namespace koi::gateway {

namespace json = boost::json;

Fleet::Fleet(const GatewayConfig& config, const Clock& clock, uint64_t seed)
    : config_(config), clock_(clock), rng_(seed) {
  for (const ModelConfig& m : config.models) {
    Model& model = models_[m.name];
    model.config = m;
    model.router = make_router(m);
    for (const VersionConfig& v : m.versions) {
      Version version{v.name, v.weight, {}, {}};
      for (const std::string& url : v.replicas) {
        std::string host, port;
        if (parse_replica_url(url, &host, &port).ok()) version.replicas.push_back(make_replica(url, host, port));
      }
      model.versions.push_back(std::move(version));
    }
    if (!m.prefill.replicas.empty()) {
      model.prefill = std::make_unique<PrefillPool>(m.prefill, config.kv, config.breaker_failures,
                                                    config.breaker_open_ms * 1000000);
    }
  }
  for (const TenantConfig& t : config.tenants) {
    tenants_.emplace(t.name, make_tenant(t));
    for (const KeyRecord& k : t.keys) keys_.put(k);
  }
}

std::unique_ptr<Router> Fleet::make_router(const ModelConfig& m) const {
  return std::make_unique<Router>(m.routing.value_or(config_.routing), config_.kv, &kv_index_);
}

std::shared_ptr<Replica> Fleet::make_replica(const std::string& url, const std::string& host, const std::string& port) const {
  return std::make_shared<Replica>(
      Replica{url, net::resolve_host(host), port, CircuitBreaker(config_.breaker_failures, config_.breaker_open_ms * 1000000), 0, {}});
}

namespace {
// A bucket holds the whole per-minute allowance (see token_bucket.h); at least one unit, so a
// fractional rate still admits its first request.
double burst_of(double rate_per_minute) { return std::max(1.0, rate_per_minute); }
}  // namespace

Fleet::Tenant Fleet::make_tenant(const TenantConfig& t) const {
  const int64_t now = clock_.now_ns();
  return Tenant{t, TokenBucket(t.rpm, burst_of(t.rpm), now), TokenBucket(t.tpm, burst_of(t.tpm), now), 0};
}

std::optional<KeyRecord> Fleet::authenticate(std::string_view presented) const {
  std::lock_guard<std::mutex> lock(mu_);
  return keys_.verify(presented);
}

void Fleet::put_key(KeyRecord key) {
  std::lock_guard<std::mutex> lock(mu_);
  keys_.put(std::move(key));
}

bool Fleet::revoke_key(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  return keys_.revoke(id);
}

Admission Fleet::admit(const std::string& tenant_name, const std::string& model, int64_t estimated_tokens) {
  std::lock_guard<std::mutex> lock(mu_);
  auto t = tenants_.find(tenant_name);
  if (t == tenants_.end()) return {403, "tenant '" + tenant_name + "' no longer exists", "", 0};
  Tenant& tenant = t->second;
  if (!models_.count(model)) return {404, "model '" + model + "' does not exist; GET /v1/models lists them", "", 0};
  const auto& allowed = tenant.config.models;
  if (!allowed.empty() && std::find(allowed.begin(), allowed.end(), model) == allowed.end()) {
    return {403, "tenant '" + tenant_name + "' may not use model '" + model + "'", "", 0};
  }
  if (tenant.config.max_concurrency > 0 && tenant.in_flight >= tenant.config.max_concurrency) {
    return {429, "tenant '" + tenant_name + "' has " + std::to_string(tenant.in_flight) + " requests in flight, its limit",
            "concurrency", 1};
  }
  static constexpr double kShare[] = {1.0, 0.8, 0.5};  // high, normal, low
  if (in_flight_ >= kShare[static_cast<int>(tenant.config.priority)] * config_.max_in_flight) {
    return {429, "the gateway is at capacity for " + std::string(priority_name(tenant.config.priority)) + " priority requests",
            "overload", 1};
  }
  const int64_t now = clock_.now_ns();
  auto retry_s = [](int64_t wait_ns) { return std::max<int64_t>(1, (wait_ns + 999999999) / 1000000000); };
  if (tenant.config.rpm > 0) {
    if (int64_t wait = tenant.rpm.try_take(1, now); wait > 0) {
      return {429, "tenant '" + tenant_name + "' is over its limit of " + fmt::format("{:g}", tenant.config.rpm) + " requests per minute",
              "rpm", retry_s(wait)};
    }
  }
  if (tenant.config.tpm > 0) {
    if (int64_t wait = tenant.tpm.try_take(static_cast<double>(estimated_tokens), now); wait > 0) {
      if (tenant.config.rpm > 0) tenant.rpm.adjust(-1, now);  // the request was not admitted after all
      return {429, "tenant '" + tenant_name + "' is over its limit of " + fmt::format("{:g}", tenant.config.tpm) + " tokens per minute",
              "tpm", retry_s(wait)};
    }
  }
  ++tenant.in_flight;
  ++in_flight_;
  return {};
}

void Fleet::finish(const std::string& tenant_name, int64_t estimated_tokens, int64_t actual_tokens) {
  std::lock_guard<std::mutex> lock(mu_);
  --in_flight_;
  auto t = tenants_.find(tenant_name);
  if (t == tenants_.end()) return;
  --t->second.in_flight;
  if (t->second.config.tpm > 0) t->second.tpm.adjust(static_cast<double>(actual_tokens - estimated_tokens), clock_.now_ns());
}

std::optional<ReplicaPick> Fleet::pick(const std::string& model_name, const RouteInput& input,
                                       const std::vector<std::string>& exclude, const std::string& adapter) {
  std::lock_guard<std::mutex> lock(mu_);
  auto m = models_.find(model_name);
  if (m == models_.end()) return std::nullopt;
  const int64_t now = clock_.now_ns();
  auto usable = [&](const Replica& r) {
    const bool serves = adapter.empty() || std::find(r.adapters.begin(), r.adapters.end(), adapter) != r.adapters.end();
    return serves && r.breaker.would_allow(now) && std::find(exclude.begin(), exclude.end(), r.url) == exclude.end();
  };
  std::vector<double> weights;
  for (const Version& v : m->second.versions) {
    const bool any = std::any_of(v.replicas.begin(), v.replicas.end(), [&](const auto& r) { return usable(*r); });
    weights.push_back(any ? v.weight : 0.0);
  }
  const size_t vi = pick_weighted(weights, rng_);
  if (vi == weights.size()) return std::nullopt;
  Version& version = m->second.versions[vi];
  std::vector<Candidate> candidates;
  std::vector<Replica*> replicas;
  for (const auto& r : version.replicas) {
    if (usable(*r)) {
      candidates.push_back({r->url, r->outstanding});
      replicas.push_back(r.get());
    }
  }
  Router& router = *m->second.router;
  const RouteDecision d = router.pick(input, candidates);
  for (const auto& r : version.replicas) {
    if (r.get() != replicas[d.index]) continue;
    r->breaker.allow(now);
    ++r->outstanding;
    ReplicaPick pick{r, model_name, version.name, d.matched_blocks, d.route_blocks, -1, "", "", ""};
    if (router.policy() == RoutingPolicy::kKvEvents) {
      const std::optional<KvIndex::Sync> sync = kv_index_.sync_of(r->url);
      pick.predicted_hit_tokens = sync ? static_cast<int64_t>(d.matched_blocks) * sync->block_size : 0;
    }
    choose_prefill(m->second, input, now, pick);
    return pick;
  }
  return std::nullopt;
}

void Fleet::choose_prefill(Model& model, const RouteInput& input, int64_t now, ReplicaPick& pick) {
  if (!model.prefill) return;
  const std::optional<PrefillChoice> choice = model.prefill->choose(input, input.prompt_tokens, pick.matched_blocks, pick.route_blocks, now);
  pick.pd_decision = choice ? "split" : "local";
  if (!choice) return;
  pick.prefill_url = choice->url;
  pick.prefill_peer = choice->kv_peer;
}

void Fleet::report(const ReplicaPick& pick, Outcome outcome, double latency_s) {
  if (!pick.prefill_url.empty()) {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto m = models_.find(pick.model); m != models_.end() && m->second.prefill) m->second.prefill->release(pick.prefill_url);
  }
  std::lock_guard<std::mutex> lock(mu_);
  Replica& r = *pick.replica;
  --r.outstanding;
  if (outcome == Outcome::kOk) r.breaker.on_success();
  if (outcome == Outcome::kReplicaError) r.breaker.on_failure(clock_.now_ns());
  if (Version* v = find_version(pick.model, pick.version); v && outcome != Outcome::kNeutral) {
    ++v->stats.requests;
    v->stats.errors += outcome == Outcome::kReplicaError;
    v->stats.latency_sum_s += latency_s;
  }
}

std::vector<Fleet::Endpoint> Fleet::kv_event_endpoints() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Endpoint> out;
  for (const auto& [name, m] : models_) {
    if (m.router->policy() != RoutingPolicy::kKvEvents) continue;
    for (const Version& v : m.versions) {
      for (const auto& r : v.replicas) out.push_back({r->url, r->host, r->port});
    }
  }
  return out;
}

std::optional<Fleet::KvRouteInfo> Fleet::kv_route_info(const std::string& model) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto m = models_.find(model);
  if (m == models_.end() || m->second.router->policy() != RoutingPolicy::kKvEvents) return std::nullopt;
  const int64_t now = clock_.now_ns();
  for (const Version& v : m->second.versions) {
    for (const auto& r : v.replicas) {
      const std::optional<KvIndex::Sync> sync = kv_index_.sync_of(r->url);
      if (sync && r->breaker.would_allow(now)) return KvRouteInfo{sync->block_size, {r->url, r->host, r->port}};
    }
  }
  return std::nullopt;
}

std::vector<Fleet::Endpoint> Fleet::endpoints() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Endpoint> out;
  for (const auto& [name, m] : models_) {
    for (const Version& v : m.versions) {
      for (const auto& r : v.replicas) out.push_back({r->url, r->host, r->port});
    }
    if (!m.prefill) continue;
    for (const std::string& url : m.prefill->urls()) {
      std::string host, port;
      if (parse_replica_url(url, &host, &port).ok()) out.push_back({url, net::resolve_host(host), port});
    }
  }
  return out;
}

void Fleet::set_adapters(const std::string& url, const std::vector<std::string>& adapters) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [name, m] : models_) {
    for (Version& v : m.versions) {
      for (auto& r : v.replicas) {
        if (r->url == url) r->adapters = adapters;
      }
    }
  }
}

std::optional<std::string> Fleet::model_of_adapter(const std::string& adapter) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (models_.count(adapter)) return std::nullopt;
  for (const auto& [name, m] : models_) {
    for (const Version& v : m.versions) {
      for (const auto& r : v.replicas) {
        if (std::find(r->adapters.begin(), r->adapters.end(), adapter) != r->adapters.end()) return name;
      }
    }
  }
  return std::nullopt;
}

void Fleet::health_result(const std::string& url, bool ok) {
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t now = clock_.now_ns();
  for (auto& [name, m] : models_) {
    if (m.prefill) m.prefill->health_result(url, ok, now);
    for (Version& v : m.versions) {
      for (auto& r : v.replicas) {
        if (r->url != url) continue;
        if (!ok) {
          r->breaker.on_failure(now);
        } else if (r->breaker.state() != BreakerState::kClosed && r->breaker.allow(now)) {
          r->breaker.on_success();  // the health check was the half-open probe
        }
      }
    }
  }
}

BreakerState Fleet::breaker_state(const std::string& url) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [name, m] : models_) {
    for (const Version& v : m.versions) {
      for (const auto& r : v.replicas) {
        if (r->url == url) return r->breaker.state();
      }
    }
  }
  return BreakerState::kClosed;
}

const Fleet::Version* Fleet::find_version(const std::string& model, const std::string& version) const {
  auto m = models_.find(model);
  if (m == models_.end()) return nullptr;
  for (const Version& v : m->second.versions) {
    if (v.name == version) return &v;
  }
  return nullptr;
}

Fleet::Version* Fleet::find_version(const std::string& model, const std::string& version) {
  return const_cast<Version*>(std::as_const(*this).find_version(model, version));
}

std::optional<TenantConfig> Fleet::tenant(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = tenants_.find(name);
  if (it == tenants_.end()) return std::nullopt;
  return it->second.config;
}

bool Fleet::has_model(const std::string& model) const {
  std::lock_guard<std::mutex> lock(mu_);
  return models_.count(model) != 0;
}

bool Fleet::has_version(const std::string& model, const std::string& version) const {
  std::lock_guard<std::mutex> lock(mu_);
  return find_version(model, version) != nullptr;
}

bool Fleet::has_replica(const std::string& model, const std::string& version, const std::string& url) const {
  std::lock_guard<std::mutex> lock(mu_);
  const Version* v = find_version(model, version);
  return v && std::any_of(v->replicas.begin(), v->replicas.end(), [&](const auto& r) { return r->url == url; });
}

Status Fleet::add_replica(const std::string& model, const std::string& version, const std::string& url) {
  std::string host, port;
  KOI_RETURN_IF_ERROR(parse_replica_url(url, &host, &port));
  std::lock_guard<std::mutex> lock(mu_);
  auto m = models_.find(model);
  if (m == models_.end()) {
    m = models_.emplace(model, Model{}).first;
    m->second.config.name = model;
    m->second.router = make_router(m->second.config);
  }
  Version* v = find_version(model, version);
  if (!v) v = &m->second.versions.emplace_back(Version{version, m->second.versions.empty() ? 100.0 : 0.0, {}, {}});
  for (const auto& r : v->replicas) {
    if (r->url == url) return Status::already_exists("replica " + url + " is already in " + model + "/" + version);
  }
  v->replicas.push_back(make_replica(url, host, port));
  return ok_status();
}

Status Fleet::remove_replica(const std::string& model, const std::string& version, const std::string& url) {
  std::lock_guard<std::mutex> lock(mu_);
  Version* v = find_version(model, version);
  if (!v) return Status::not_found("no version " + model + "/" + version);
  auto it = std::find_if(v->replicas.begin(), v->replicas.end(), [&](const auto& r) { return r->url == url; });
  if (it == v->replicas.end()) return Status::not_found("replica " + url + " is not in " + model + "/" + version);
  v->replicas.erase(it);
  models_[model].router->forget(url);
  kv_index_.forget(url);
  return ok_status();
}

Status Fleet::set_weights(const std::string& model, const std::map<std::string, double>& weights) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [name, w] : weights) {
    if (!find_version(model, name)) return Status::not_found("no version " + model + "/" + name);
    if (!(w >= 0)) return Status::invalid_argument("weight of " + model + "/" + name + " must be >= 0");
  }
  for (const auto& [name, w] : weights) find_version(model, name)->weight = w;
  return ok_status();
}

Status Fleet::upsert_tenant(const TenantConfig& t) {
  if (t.name.empty() || t.rpm < 0 || t.tpm < 0 || t.max_concurrency < 0) {
    return Status::invalid_argument("a tenant needs a name and limits >= 0");
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto it = tenants_.find(t.name);
  if (it == tenants_.end()) {
    tenants_.emplace(t.name, make_tenant(t));
    return ok_status();
  }
  const int64_t now = clock_.now_ns();
  it->second.config = t;
  it->second.rpm.reconfigure(t.rpm, burst_of(t.rpm), now);
  it->second.tpm.reconfigure(t.tpm, burst_of(t.tpm), now);
  return ok_status();
}

std::vector<std::string> Fleet::models_for(const std::string& tenant) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out;
  auto t = tenants_.find(tenant);
  for (const auto& [name, m] : models_) {
    if (t == tenants_.end()) continue;
    const auto& allowed = t->second.config.models;
    if (allowed.empty() || std::find(allowed.begin(), allowed.end(), name) != allowed.end()) out.push_back(name);
  }
  return out;
}

const ModelConfig* Fleet::price_of(const std::string& model) const {
  for (const ModelConfig& m : config_.models) {
    if (m.name == model) return &m;
  }
  return nullptr;
}

std::string Fleet::state_json() const {
  std::lock_guard<std::mutex> lock(mu_);
  json::object models;
  for (const auto& [name, m] : models_) {
    json::array versions;
    for (const Version& v : m.versions) {
      json::array replicas;
      for (const auto& r : v.replicas) {
        replicas.push_back(json::object{{"url", r->url},
                                        {"breaker", breaker_state_name(r->breaker.state())},
                                        {"outstanding", r->outstanding}});
      }
      versions.push_back(json::object{{"name", v.name}, {"weight", v.weight}, {"replicas", replicas}});
    }
    models[name] = json::object{{"versions", versions}};
  }
  json::object tenants;
  for (const auto& [name, t] : tenants_) {
    json::array allowed;
    for (const std::string& m : t.config.models) allowed.emplace_back(m);
    tenants[name] = json::object{{"rpm", t.config.rpm},
                                 {"tpm", t.config.tpm},
                                 {"max_concurrency", t.config.max_concurrency},
                                 {"priority", priority_name(t.config.priority)},
                                 {"models", allowed},
                                 {"in_flight", t.in_flight}};
  }
  return json::serialize(json::object{{"models", models}, {"tenants", tenants}, {"keys", keys_.size()}});
}

std::string Fleet::stats_json() const {
  std::lock_guard<std::mutex> lock(mu_);
  json::object out;
  for (const auto& [name, m] : models_) {
    json::object versions;
    for (const Version& v : m.versions) {
      versions[v.name] = json::object{{"weight", v.weight},
                                      {"requests", v.stats.requests},
                                      {"errors", v.stats.errors},
                                      {"latency_sum_s", v.stats.latency_sum_s}};
    }
    out[name] = versions;
  }
  return json::serialize(out);
}

std::string Fleet::kv_index_json() const {
  json::object replicas;
  for (const Endpoint& e : kv_event_endpoints()) {
    const std::optional<KvIndex::Sync> sync = kv_index_.sync_of(e.url);
    json::array hashes;
    for (const std::string& h : kv_index_.hashes_of(e.url)) hashes.emplace_back(h);
    replicas[e.url] = json::object{{"synced", sync.has_value()},
                                   {"epoch", sync ? sync->epoch : 0},
                                   {"last", sync ? sync->last : 0},
                                   {"block_size", sync ? sync->block_size : 0},
                                   {"hashes", std::move(hashes)}};
  }
  return json::serialize(json::object{{"replicas", std::move(replicas)}});
}

void Fleet::export_gauges(metrics::Registry& metrics) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [name, m] : models_) {
    for (const Version& v : m.versions) {
      for (const auto& r : v.replicas) {
        const metrics::Labels labels{{"model", name}, {"version", v.name}, {"replica", r->url}};
        metrics.set("koi_gateway_breaker_state", labels, static_cast<double>(r->breaker.state()));
        metrics.set("koi_gateway_replica_outstanding", labels, static_cast<double>(r->outstanding));
      }
      metrics.set("koi_gateway_version_weight", {{"model", name}, {"version", v.name}}, v.weight);
    }
  }
}

}  // namespace koi::gateway
