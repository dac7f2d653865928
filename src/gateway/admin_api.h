// AdminApi: the gateway's admin calls as one plain function over the Fleet and the store, so
// they are tested without HTTP (admin_api_test.cc) and the HTTP layer only forwards to it.
//
//   GET /admin/state, GET /admin/stats
//   GET /admin/kv_index: per replica of a kv_events model, what the exact index holds
//       {"replicas": {URL: {"synced", "epoch", "last", "block_size", "hashes": [32 hex digits]}}}
//   POST /admin/tenants {name, rpm?, tpm?, max_concurrency?, priority?, models?}
//       a partial update: only the fields given change; a new tenant starts from the defaults
//       (no limits, priority normal, every model)
//   POST /admin/weights {model, weights: {VERSION: number >= 0, ...}}
//   POST|DELETE /admin/replicas {model, version, url: http://HOST:PORT (port 1-65535)}
//   POST /admin/keys {tenant} -> {id, key, tenant}; DELETE /admin/keys/<id>
//
// Every field is checked by type and range and unknown fields are refused: a bad call gets
// 400 naming the field ("tenants.rpm must be a non-negative number, got \"abc\"") and
// changes nothing. A change is written to the store first and applied to the Fleet only when
// that succeeded, so what a restart reloads (apply_stored) is what was running.
// Thread-safe: calls are serialized by one mutex (admin traffic is rare); failures are replies.
#pragma once

#include <mutex>
#include <string>
#include <string_view>

#include "base/status.h"
#include "gateway/fleet.h"
#include "gateway/usage_store.h"

namespace koi::gateway {

struct AdminReply {
  int status = 200;
  std::string body;  // JSON: the result, or an OpenAI-shaped error
};

class AdminApi {
 public:
  // `fleet` and `store` must outlive this. An empty `admin_key` refuses every call.
  AdminApi(std::string admin_key, Fleet& fleet, UsageStore& store);

  // `bearer`: the token of the Authorization header ("" when there is none).
  AdminReply handle(std::string_view method, std::string_view target, std::string_view bearer, std::string_view body);

 private:
  AdminReply tenants(const std::string& body);
  AdminReply weights(const std::string& body);
  AdminReply replicas(bool add, const std::string& body);
  AdminReply issue_key(const std::string& body);
  AdminReply revoke_key(const std::string& id);

  const std::string admin_key_;
  Fleet& fleet_;
  UsageStore& store_;
  std::mutex mu_;
};

// Applies what the admin API stored over a fleet built from the YAML config, as
// Gateway::start does: issued and revoked keys, replicas added or removed, then traffic
// weights, then tenants (the stored row replaces the file's limits and models; its keys
// stay). Entries that no longer fit the config (a weight for a version that is gone) are
// skipped with a warning; an error reading the store is returned.
Status restore_admin_changes(UsageStore& store, Fleet& fleet);

}  // namespace koi::gateway
