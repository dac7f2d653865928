// The UsageStore of both backends (see usage_store.h), over one store::Database: the SQL
// is shared; only the first schema version differs, PostgreSQL's having BIGINT, DOUBLE
// PRECISION and BOOLEAN columns (store reads booleans back as 0/1 and binds 0/1 to them).
#include "gateway/usage_store.h"
#include "store/database.h"

namespace koi::gateway {
namespace {

// Version 1 is the schema stores had before schema_migrations existed (IF NOT EXISTS:
// it adopts them). Add a change as a new version at the end of both lists.
constexpr store::Migration kSqliteSchema[] = {{1, R"sql(
CREATE TABLE IF NOT EXISTS usage(
  request_id TEXT PRIMARY KEY, tenant TEXT NOT NULL, key_id TEXT NOT NULL, model TEXT NOT NULL,
  version TEXT NOT NULL, replica TEXT NOT NULL, prompt_tokens INTEGER NOT NULL,
  completion_tokens INTEGER NOT NULL, cached_tokens INTEGER NOT NULL, status INTEGER NOT NULL,
  stream INTEGER NOT NULL, start_unix_ms INTEGER NOT NULL, ttft_ms REAL NOT NULL, latency_ms REAL NOT NULL);
CREATE INDEX IF NOT EXISTS usage_tenant_start ON usage(tenant, start_unix_ms);
CREATE TABLE IF NOT EXISTS api_keys(
  id TEXT PRIMARY KEY, tenant TEXT NOT NULL, hash TEXT NOT NULL, revoked INTEGER NOT NULL DEFAULT 0);
)sql"}, {2, R"sql(
CREATE TABLE IF NOT EXISTS admin_tenants(
  name TEXT PRIMARY KEY, rpm REAL NOT NULL, tpm REAL NOT NULL, max_concurrency INTEGER NOT NULL,
  priority TEXT NOT NULL, models TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS admin_weights(
  model TEXT NOT NULL, version TEXT NOT NULL, weight REAL NOT NULL, PRIMARY KEY(model, version));
CREATE TABLE IF NOT EXISTS admin_replicas(
  model TEXT NOT NULL, version TEXT NOT NULL, url TEXT NOT NULL, removed INTEGER NOT NULL,
  PRIMARY KEY(model, version, url));
)sql"}};

constexpr store::Migration kPostgresSchema[] = {{1, R"sql(
CREATE TABLE IF NOT EXISTS usage(
  request_id TEXT PRIMARY KEY, tenant TEXT NOT NULL, key_id TEXT NOT NULL, model TEXT NOT NULL,
  version TEXT NOT NULL, replica TEXT NOT NULL, prompt_tokens BIGINT NOT NULL,
  completion_tokens BIGINT NOT NULL, cached_tokens BIGINT NOT NULL, status INTEGER NOT NULL,
  stream BOOLEAN NOT NULL, start_unix_ms BIGINT NOT NULL, ttft_ms DOUBLE PRECISION NOT NULL,
  latency_ms DOUBLE PRECISION NOT NULL);
CREATE INDEX IF NOT EXISTS usage_tenant_start ON usage(tenant, start_unix_ms);
CREATE TABLE IF NOT EXISTS api_keys(
  id TEXT PRIMARY KEY, tenant TEXT NOT NULL, hash TEXT NOT NULL, revoked BOOLEAN NOT NULL DEFAULT false);
)sql"}, {2, R"sql(
CREATE TABLE IF NOT EXISTS admin_tenants(
  name TEXT PRIMARY KEY, rpm DOUBLE PRECISION NOT NULL, tpm DOUBLE PRECISION NOT NULL,
  max_concurrency INTEGER NOT NULL, priority TEXT NOT NULL, models TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS admin_weights(
  model TEXT NOT NULL, version TEXT NOT NULL, weight DOUBLE PRECISION NOT NULL, PRIMARY KEY(model, version));
CREATE TABLE IF NOT EXISTS admin_replicas(
  model TEXT NOT NULL, version TEXT NOT NULL, url TEXT NOT NULL, removed BOOLEAN NOT NULL,
  PRIMARY KEY(model, version, url));
)sql"}};

class SqlUsageStore final : public UsageStore {
 public:
  explicit SqlUsageStore(std::unique_ptr<store::Database> db) : db_(std::move(db)) {}

  Status append(std::span<const UsageRecord> records) override {
    return db_->transaction([&]() -> Status {
      for (const UsageRecord& r : records) {
        KOI_RETURN_IF_ERROR(db_->exec(
            "insert", "INSERT INTO usage VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?) ON CONFLICT (request_id) DO NOTHING",
            {r.request_id, r.tenant, r.key_id, r.model, r.version, r.replica, r.prompt_tokens, r.completion_tokens,
             r.cached_tokens, int64_t{r.status}, int64_t{r.stream}, r.start_unix_ms, r.ttft_ms, r.latency_ms}));
      }
      return ok_status();
    });
  }

  Result<std::vector<UsageRecord>> query(const std::string& tenant, int64_t since_unix_ms) override {
    KOI_ASSIGN_OR_RETURN(
        const std::vector<store::Row> rows,
        db_->query("query",
                   "SELECT request_id, tenant, key_id, model, version, replica, prompt_tokens, completion_tokens, "
                   "cached_tokens, status, stream, start_unix_ms, ttft_ms, latency_ms FROM usage WHERE (? = '' OR "
                   "tenant = ?) AND start_unix_ms >= ? ORDER BY start_unix_ms, request_id",
                   {tenant, tenant, since_unix_ms}));
    std::vector<UsageRecord> out;
    for (const store::Row& row : rows) {
      UsageRecord r;
      r.request_id = row.text(0), r.tenant = row.text(1), r.key_id = row.text(2), r.model = row.text(3);
      r.version = row.text(4), r.replica = row.text(5);
      r.prompt_tokens = row.int64(6), r.completion_tokens = row.int64(7), r.cached_tokens = row.int64(8);
      r.status = static_cast<int>(row.int64(9)), r.stream = row.int64(10) != 0, r.start_unix_ms = row.int64(11);
      r.ttft_ms = row.real(12), r.latency_ms = row.real(13);
      out.push_back(std::move(r));
    }
    return out;
  }

  Status put_key(const KeyRecord& key) override {
    return db_->exec("put key",
                     "INSERT INTO api_keys(id, tenant, hash) VALUES(?,?,?) ON CONFLICT (id) DO UPDATE SET "
                     "tenant = excluded.tenant, hash = excluded.hash, revoked = ?",
                     {key.id, key.tenant, key.hash, int64_t{0}});
  }

  Status revoke_key(const std::string& id) override {
    return db_->exec("revoke key",
                     "INSERT INTO api_keys(id, tenant, hash, revoked) VALUES(?, '', '', ?) ON CONFLICT (id) DO UPDATE "
                     "SET revoked = ?",
                     {id, int64_t{1}, int64_t{1}});
  }

  Result<std::vector<StoredKey>> load_keys() override {
    KOI_ASSIGN_OR_RETURN(const std::vector<store::Row> rows,
                         db_->query("load keys", "SELECT id, tenant, hash, revoked FROM api_keys ORDER BY id"));
    std::vector<StoredKey> out;
    for (const store::Row& row : rows) out.push_back({{row.text(0), row.text(1), row.text(2)}, row.int64(3) != 0});
    return out;
  }

  Status put_tenant(const TenantConfig& t) override {
    return db_->exec("put tenant",
                     "INSERT INTO admin_tenants VALUES(?,?,?,?,?,?) ON CONFLICT (name) DO UPDATE SET rpm = excluded.rpm, "
                     "tpm = excluded.tpm, max_concurrency = excluded.max_concurrency, priority = excluded.priority, "
                     "models = excluded.models",
                     {t.name, t.rpm, t.tpm, int64_t{t.max_concurrency}, std::string(priority_name(t.priority)),
                      models_to_json(t.models)});
  }

  Status put_weights(std::span<const StoredWeight> weights) override {
    return db_->transaction([&]() -> Status {
      for (const StoredWeight& w : weights) {
        KOI_RETURN_IF_ERROR(db_->exec("put weights",
                                      "INSERT INTO admin_weights VALUES(?,?,?) ON CONFLICT (model, version) DO UPDATE "
                                      "SET weight = excluded.weight",
                                      {w.model, w.version, w.weight}));
      }
      return ok_status();
    });
  }

  Status put_replica(const StoredReplica& r) override {
    return db_->exec("put replica",
                     "INSERT INTO admin_replicas VALUES(?,?,?,?) ON CONFLICT (model, version, url) DO UPDATE SET "
                     "removed = excluded.removed",
                     {r.model, r.version, r.url, int64_t{r.removed}});
  }

  Result<AdminState> load_admin_state() override {
    AdminState out;
    KOI_ASSIGN_OR_RETURN(const std::vector<store::Row> replicas,
                         db_->query("load replicas",
                                    "SELECT model, version, url, removed FROM admin_replicas ORDER BY model, version, url"));
    for (const store::Row& row : replicas) out.replicas.push_back({row.text(0), row.text(1), row.text(2), row.int64(3) != 0});
    KOI_ASSIGN_OR_RETURN(const std::vector<store::Row> weights,
                         db_->query("load weights", "SELECT model, version, weight FROM admin_weights ORDER BY model, version"));
    for (const store::Row& row : weights) out.weights.push_back({row.text(0), row.text(1), row.real(2)});
    KOI_ASSIGN_OR_RETURN(
        const std::vector<store::Row> tenants,
        db_->query("load tenants",
                   "SELECT name, rpm, tpm, max_concurrency, priority, models FROM admin_tenants ORDER BY name"));
    for (const store::Row& row : tenants) {
      TenantConfig t;
      t.name = row.text(0);
      t.rpm = row.real(1), t.tpm = row.real(2);
      t.max_concurrency = static_cast<int>(row.int64(3));
      auto priority = parse_priority(row.text(4));
      auto models = models_from_json(row.text(5));
      if (!priority.ok() || !models.ok()) {
        return Status::corrupt("usage ledger: admin_tenants row '" + t.name + "' is unreadable; fix or delete it");
      }
      t.priority = *priority, t.models = std::move(*models);
      out.tenants.push_back(std::move(t));
    }
    return out;
  }

 private:
  std::unique_ptr<store::Database> db_;
};

}  // namespace

Result<std::unique_ptr<UsageStore>> open_store(const std::string& spec, const store::OpenOptions& options) {
  KOI_ASSIGN_OR_RETURN(std::unique_ptr<store::Database> db, store::Database::open("usage ledger", spec, options));
  if (db->backend() == store::Backend::kSqlite) {
    KOI_RETURN_IF_ERROR(db->migrate("gateway", kSqliteSchema));
  } else {
    KOI_RETURN_IF_ERROR(db->migrate("gateway", kPostgresSchema));
  }
  return std::unique_ptr<UsageStore>(std::make_unique<SqlUsageStore>(std::move(db)));
}

}  // namespace koi::gateway
