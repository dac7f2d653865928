// Fleet: the gateway's live state — models with their versions (traffic weights, replicas
// with breakers and in-flight counts), tenants with their token buckets and concurrency, the
// key ring, a router per model and the exact KV index (kv_index.h) that kv_events routers read
// — and the decisions made on it: authenticate, admit, pick a replica,
// account the outcome. The admin API changes it at run time; requests in flight keep the
// replica they picked (shared_ptr), so a change never drops a connection.
// Thread-safe: one mutex guards everything but the KV index, which has its own (taken after
// the fleet's, never before); no call blocks or does I/O. Time comes from the
// injected Clock and version picks from a seeded Rng, so tests are exact.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "base/clock.h"
#include "base/metrics.h"
#include "base/random.h"
#include "base/status.h"
#include "gateway/api_keys.h"
#include "gateway/circuit_breaker.h"
#include "gateway/config.h"
#include "gateway/kv_index.h"
#include "gateway/pd_split.h"
#include "gateway/router.h"
#include "gateway/token_bucket.h"

namespace koi::gateway {

struct Replica {
  std::string url, host, port;  // host: the IPv4 address the URL resolved to when added
  CircuitBreaker breaker;
  int64_t outstanding = 0;
  std::vector<std::string> adapters;  // LoRA adapters it serves (its /v1/models), guarded by Fleet's mutex
};

struct ReplicaPick {
  std::shared_ptr<Replica> replica;
  std::string model, version;
  size_t matched_blocks = 0;
  size_t route_blocks = 0;            // the prompt's blocks that matched_blocks counts in
  int64_t predicted_hit_tokens = -1;  // kv_events routing: matched_blocks x block size; else -1
  // Disaggregation: "" for a model without a prefill pool, else "split" (prefill on
  // prefill_url, whose KV address is prefill_peer) or "local".
  std::string pd_decision;
  std::string prefill_url, prefill_peer;
};

struct Admission {
  int status = 200;          // 200, or 403 / 404 / 429 to send to the client
  std::string message;
  std::string limit;         // for a 429: rpm, tpm, concurrency or overload
  int64_t retry_after_s = 0;
};

// How an attempt on a replica ended, for its breaker and its version's statistics.
enum class Outcome { kOk, kReplicaError, kNeutral };

struct VersionStats {
  int64_t requests = 0, errors = 0;
  double latency_sum_s = 0;
};

class Fleet {
 public:
  Fleet(const GatewayConfig& config, const Clock& clock, uint64_t seed);

  std::optional<KeyRecord> authenticate(std::string_view presented) const;
  void put_key(KeyRecord key);
  bool revoke_key(const std::string& id);

  // Checks the tenant's model list, concurrency cap, the priority's share of the gateway and
  // the RPM and TPM buckets (charging 1 request and `estimated_tokens`). After a 200 the
  // caller must call finish() exactly once.
  Admission admit(const std::string& tenant, const std::string& model, int64_t estimated_tokens);
  // Releases the concurrency slot and corrects the TPM charge to the real token count.
  void finish(const std::string& tenant, int64_t estimated_tokens, int64_t actual_tokens);

  // Picks a version by weight among those with a replica that is allowed (breaker) and not in
  // `exclude` (and, with `adapter`, that serves that LoRA adapter: affinity), then a replica by
  // the routing policy; counts it as outstanding.
  std::optional<ReplicaPick> pick(const std::string& model, const RouteInput& input,
                                  const std::vector<std::string>& exclude, const std::string& adapter = "");
  void report(const ReplicaPick& pick, Outcome outcome, double latency_s);

  struct Endpoint { std::string url, host, port; };
  std::vector<Endpoint> endpoints() const;
  // The replicas of the models routed by kv_events, whose KV events feed kv_index().
  std::vector<Endpoint> kv_event_endpoints() const;
  // For a model routed by kv_events: its engines' block size (from a synced replica) and a
  // usable replica to tokenize a text prompt on; nullopt for other models, or while no
  // replica of the model is synced.
  struct KvRouteInfo {
    int block_size = 0;
    Endpoint tokenizer;
  };
  std::optional<KvRouteInfo> kv_route_info(const std::string& model) const;
  KvIndex& kv_index() { return kv_index_; }
  void health_result(const std::string& url, bool ok);
  // The LoRA adapters the replica at `url` serves, from its /v1/models (cards with a parent);
  // learned by the health loop.
  void set_adapters(const std::string& url, const std::vector<std::string>& adapters);
  // The model whose replicas serve LoRA adapter `name`, when `name` is not a model itself.
  std::optional<std::string> model_of_adapter(const std::string& name) const;
  BreakerState breaker_state(const std::string& url) const;

  Status add_replica(const std::string& model, const std::string& version, const std::string& url);
  Status remove_replica(const std::string& model, const std::string& version, const std::string& url);
  Status set_weights(const std::string& model, const std::map<std::string, double>& weights);
  // Replaces the tenant's limits, priority and models (creates it when new); keys are not
  // touched (put_key / revoke_key).
  Status upsert_tenant(const TenantConfig& tenant);
  std::optional<TenantConfig> tenant(const std::string& name) const;
  bool has_model(const std::string& model) const;
  bool has_version(const std::string& model, const std::string& version) const;
  bool has_replica(const std::string& model, const std::string& version, const std::string& url) const;
  std::vector<std::string> models_for(const std::string& tenant) const;
  const ModelConfig* price_of(const std::string& model) const;
  std::string state_json() const;
  std::string stats_json() const;
  std::string kv_index_json() const;  // GET /admin/kv_index (admin_api.h)
  // Sets the breaker-state and outstanding gauges.
  void export_gauges(metrics::Registry& metrics) const;

 private:
  struct Version {
    std::string name;
    double weight = 0;
    std::vector<std::shared_ptr<Replica>> replicas;
    VersionStats stats;
  };
  struct Model {
    ModelConfig config;  // versions here are the initial ones; `versions` is the live list
    std::vector<Version> versions;
    std::unique_ptr<PrefillPool> prefill;  // set when the model has a prefill pool
    std::unique_ptr<Router> router;        // the model's routing policy, or the gateway's
  };
  std::unique_ptr<Router> make_router(const ModelConfig& m) const;
  void choose_prefill(Model& model, const RouteInput& input, int64_t now, ReplicaPick& pick);
  struct Tenant {
    TenantConfig config;
    TokenBucket rpm, tpm;
    int in_flight = 0;
  };
  Version* find_version(const std::string& model, const std::string& version);
  const Version* find_version(const std::string& model, const std::string& version) const;
  std::shared_ptr<Replica> make_replica(const std::string& url, const std::string& host, const std::string& port) const;
  Tenant make_tenant(const TenantConfig& t) const;

  const GatewayConfig config_;
  const Clock& clock_;
  mutable std::mutex mu_;
  Rng rng_;
  KvIndex kv_index_;  // its own lock; declared before the routers that read it
  KeyRing keys_;
  std::map<std::string, Model> models_;
  std::map<std::string, Tenant> tenants_;
  int in_flight_ = 0;
};

}  // namespace koi::gateway
