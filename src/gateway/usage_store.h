// UsageStore: the metering ledger, one row per request keyed by the request id, the API
// keys issued at run time, and the fleet changes made through the admin API (tenants, traffic
// weights, replicas added or removed), which Gateway::start applies over the YAML config so
// they survive a restart (docs/gateway.md). It lives in a store::Database (store/database.h):
// SQLite, the embedded default ("sqlite:PATH" or a plain path; WAL, synchronous=NORMAL: a
// committed transaction survives a crash of the gateway process, not a power loss of the
// machine), or PostgreSQL ("postgres://..." or "postgresql://..."). One implementation
// serves both; its tables are the schema "gateway" of the database's schema_migrations.
// append() inserts a batch in one transaction and skips a request id that is already stored
// (INSERT ... ON CONFLICT DO NOTHING), so retrying a batch never duplicates a record.
// Thread-safe (the database serializes calls); errors name the store and the operation.
//
// Ledger: the batching writer in front of a store. submit() queues a record; one writer
// thread commits whatever has queued up in one transaction (group commit) and then calls each
// record's callback with the result. The gateway sends the end of a response only after that
// callback, so a request the client saw complete has a durable record (see docs/gateway.md).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "gateway/api_keys.h"
#include "gateway/config.h"
#include "store/database.h"

namespace koi::gateway {

struct UsageRecord {
  std::string request_id;
  std::string tenant;
  std::string key_id;
  std::string model;
  std::string version;
  std::string replica;
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;
  int status = 0;  // the HTTP status the client got (499: the client went away)
  bool stream = false;
  int64_t start_unix_ms = 0;
  double ttft_ms = 0;
  double latency_ms = 0;
};

struct StoredKey {
  KeyRecord record;
  bool revoked = false;
};

// A replica the admin API added (removed = false) or removed (also one from the config file).
struct StoredReplica {
  std::string model, version, url;
  bool removed = false;
};

struct StoredWeight {
  std::string model, version;
  double weight = 0;
};

// Everything the admin API changed, in the order Gateway::start applies it.
struct AdminState {
  std::vector<StoredReplica> replicas;  // by model, version, url
  std::vector<StoredWeight> weights;    // by model, version
  std::vector<TenantConfig> tenants;    // by name; no keys (those are in the key table)
};

class UsageStore {
 public:
  virtual ~UsageStore() = default;
  virtual Status append(std::span<const UsageRecord> records) = 0;
  // Records of `tenant` ("" for all) that started at or after `since_unix_ms`, oldest first.
  virtual Result<std::vector<UsageRecord>> query(const std::string& tenant, int64_t since_unix_ms) = 0;
  virtual Status put_key(const KeyRecord& key) = 0;
  // Marks a key revoked (also a key that came from the config file, by id).
  virtual Status revoke_key(const std::string& id) = 0;
  virtual Result<std::vector<StoredKey>> load_keys() = 0;
  // The admin API's changes, each replacing an earlier one for the same name.
  virtual Status put_tenant(const TenantConfig& tenant) = 0;  // keys are not stored
  virtual Status put_weights(std::span<const StoredWeight> weights) = 0;  // one transaction
  virtual Status put_replica(const StoredReplica& replica) = 0;
  virtual Result<AdminState> load_admin_state() = 0;
};

// How the store keeps a tenant's allowed models in one text column: a JSON array of strings.
std::string models_to_json(const std::vector<std::string>& models);
Result<std::vector<std::string>> models_from_json(const std::string& text);

// Opens the ledger at `spec` (store::Database::open) and brings its schema up to date; with
// options.read_only it is only checked ({.read_only = true, .must_exist = true} for a reader
// that must not create an empty ledger from a mistyped path).
Result<std::unique_ptr<UsageStore>> open_store(const std::string& spec, const store::OpenOptions& options = {});

class Ledger {
 public:
  using Done = std::function<void(const Status&)>;
  explicit Ledger(std::unique_ptr<UsageStore> store);
  ~Ledger();  // commits what is queued, then stops the writer
  Ledger(const Ledger&) = delete;
  Ledger& operator=(const Ledger&) = delete;

  // Thread-safe. `done` runs on the writer thread after the record's transaction.
  void submit(UsageRecord record, Done done);
  UsageStore& store() { return *store_; }

 private:
  void run();
  std::unique_ptr<UsageStore> store_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::pair<UsageRecord, Done>> queue_;  // guarded by mu_
  bool stopping_ = false;                            // guarded by mu_
  std::thread writer_;
};

}  // namespace koi::gateway
