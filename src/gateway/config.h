// GatewayConfig: everything `koi gateway` reads from its YAML file (see docs/gateway.md for an
// annotated example): listeners and the admin key, the ledger store, routing, timeouts,
// health checks and breakers, and the fleet: models -> versions (traffic weight, replica URLs)
// and tenants (limits, priority, allowed models, hashed keys). parse_config() validates every
// field by type and range, refuses unknown keys, a model without replicas, a tenant allowed a
// model that is not defined and a file without models or tenants, and names the field in its
// error ("gateway.yaml: tenants[1].rpmm: unknown key; did you mean rpm?"). A plain
// value; the running gateway copies what it needs and changes it only through the admin API.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "gateway/api_keys.h"
#include "gateway/router.h"

namespace koi::gateway {

enum class Priority { kHigh, kNormal, kLow };
Result<Priority> parse_priority(std::string_view name);
std::string_view priority_name(Priority p);

struct VersionConfig {
  std::string name;
  double weight = 0;
  std::vector<std::string> replicas;  // http://host:port
};

// Prefill/decode disaggregation (docs/kv-transfer.md): the model's versions are its decode
// pool; these are its prefill workers.
struct PrefillReplicaConfig {
  std::string url;  // http://host:port of the prefill worker's API (health checks)
  std::string kv;   // HOST:PORT of its --kv-port
};
struct PrefillConfig {
  int64_t min_uncached_tokens = 256;  // split only when the uncached prompt suffix is this long
  std::vector<PrefillReplicaConfig> replicas;  // empty: no disaggregation
};

struct ModelConfig {
  std::string name;
  double prompt_price_per_1k = 0;      // currency units per 1000 prompt tokens
  double completion_price_per_1k = 0;
  std::vector<VersionConfig> versions;
  PrefillConfig prefill;
  std::optional<RoutingPolicy> routing;  // `routing:` of the model; unset: routing.policy
};

struct TenantConfig {
  std::string name;
  double rpm = 0;           // requests per minute; 0: unlimited
  double tpm = 0;           // tokens per minute; 0: unlimited
  int max_concurrency = 0;  // requests in flight; 0: unlimited
  Priority priority = Priority::kNormal;
  std::vector<std::string> models;  // empty: every model
  std::vector<KeyRecord> keys;
};

struct GatewayConfig {
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string grpc_host;  // the gRPC API (proto/koi/v1/inference.proto); empty: off
  int grpc_port = 0;
  std::string admin_host = "127.0.0.1";
  int admin_port = 8081;
  std::string admin_key;  // empty: the admin API is off
  std::string store = "koi-gateway.db";

  RoutingPolicy routing = RoutingPolicy::kLeastOutstanding;
  KvAwareOptions kv;
  size_t prefix_block_bytes = 256;
  // kv_events routing: each replica's GET /kv/events is a long poll held up to kv_events_wait_ms
  // (0: no long poll, read every kv_events_poll_ms); kv_events_poll_ms is also the pause before
  // asking a replica that failed again, and how often new replicas are looked for.
  int64_t kv_events_poll_ms = 20;
  int64_t kv_events_wait_ms = 2000;
  std::string session_header = "x-session-id";

  int64_t connect_timeout_ms = 2000;
  int64_t first_byte_timeout_ms = 60000;
  int64_t idle_timeout_ms = 30000;
  int64_t health_interval_ms = 1000;
  int64_t health_timeout_ms = 1000;
  int breaker_failures = 3;
  int64_t breaker_open_ms = 5000;
  int max_attempts = 3;
  int max_in_flight = 4096;   // the whole gateway; low priority gets half, normal 80%
  int max_connections = 8192; // open client connections; beyond it idle ones are closed first

  std::vector<ModelConfig> models;
  std::vector<TenantConfig> tenants;
};

Result<GatewayConfig> parse_config(std::string_view yaml, std::string_view origin);
Result<GatewayConfig> load_config(const std::string& path);
// Checks that a replica URL is http://host:port[/] with a port 1-65535 and splits it.
Status parse_replica_url(std::string_view url, std::string* host, std::string* port);
// "unknown key; did you mean rpm?" (a name at most two edits away), else the list of `allowed`.
std::string unknown_key_message(std::string_view key, std::span<const std::string_view> allowed);

}  // namespace koi::gateway
