// The PostgreSQL implementation of UsageStore (see usage_store.h), through libpq.
#include <libpq-fe.h>

#include <fmt/format.h>

#include <mutex>

#include "gateway/usage_store.h"

namespace koi::gateway {
namespace {

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS usage(
  request_id TEXT PRIMARY KEY, tenant TEXT NOT NULL, key_id TEXT NOT NULL, model TEXT NOT NULL,
  version TEXT NOT NULL, replica TEXT NOT NULL, prompt_tokens BIGINT NOT NULL,
  completion_tokens BIGINT NOT NULL, cached_tokens BIGINT NOT NULL, status INTEGER NOT NULL,
  stream BOOLEAN NOT NULL, start_unix_ms BIGINT NOT NULL, ttft_ms DOUBLE PRECISION NOT NULL,
  latency_ms DOUBLE PRECISION NOT NULL);
CREATE INDEX IF NOT EXISTS usage_tenant_start ON usage(tenant, start_unix_ms);
CREATE TABLE IF NOT EXISTS api_keys(
  id TEXT PRIMARY KEY, tenant TEXT NOT NULL, hash TEXT NOT NULL, revoked BOOLEAN NOT NULL DEFAULT false);
)sql";

// Migration 2: the admin API's changes (additive; an older ledger gets the tables on open).
constexpr const char* kAdminSchema = R"sql(
CREATE TABLE IF NOT EXISTS admin_tenants(
  name TEXT PRIMARY KEY, rpm DOUBLE PRECISION NOT NULL, tpm DOUBLE PRECISION NOT NULL,
  max_concurrency INTEGER NOT NULL, priority TEXT NOT NULL, models TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS admin_weights(
  model TEXT NOT NULL, version TEXT NOT NULL, weight DOUBLE PRECISION NOT NULL, PRIMARY KEY(model, version));
CREATE TABLE IF NOT EXISTS admin_replicas(
  model TEXT NOT NULL, version TEXT NOT NULL, url TEXT NOT NULL, removed BOOLEAN NOT NULL,
  PRIMARY KEY(model, version, url));
)sql";

// Doubles as text that reads back exactly.
std::string exact(double v) { return fmt::format("{}", v); }

// One result, cleared on scope exit.
class PgResult {
 public:
  explicit PgResult(PGresult* r) : r_(r) {}
  ~PgResult() { PQclear(r_); }
  PGresult* get() { return r_; }
  bool ok() const { return PQresultStatus(r_) == PGRES_COMMAND_OK || PQresultStatus(r_) == PGRES_TUPLES_OK; }

 private:
  PGresult* r_;
};

class PostgresStore final : public UsageStore {
 public:
  explicit PostgresStore(PGconn* conn) : conn_(conn) {}
  ~PostgresStore() override { PQfinish(conn_); }

  Status error(const char* what) {
    return Status::io_error(std::string("usage ledger (postgres): ") + what + ": " + PQerrorMessage(conn_));
  }
  Status exec(const char* sql, const char* what) {
    PgResult r(PQexec(conn_, sql));
    return r.ok() ? ok_status() : error(what);
  }
  PGresult* params(const char* sql, const std::vector<std::string>& values) {
    std::vector<const char*> p;
    for (const auto& v : values) p.push_back(v.c_str());
    return PQexecParams(conn_, sql, static_cast<int>(p.size()), nullptr, p.data(), nullptr, nullptr, 0);
  }

  Status append(std::span<const UsageRecord> records) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (PQstatus(conn_) != CONNECTION_OK) PQreset(conn_);
    KOI_RETURN_IF_ERROR(exec("BEGIN", "begin"));
    for (const UsageRecord& r : records) {
      PgResult res(params(
          "INSERT INTO usage VALUES($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14) ON CONFLICT (request_id) DO NOTHING",
          {r.request_id, r.tenant, r.key_id, r.model, r.version, r.replica, std::to_string(r.prompt_tokens),
           std::to_string(r.completion_tokens), std::to_string(r.cached_tokens), std::to_string(r.status),
           r.stream ? "true" : "false", std::to_string(r.start_unix_ms), std::to_string(r.ttft_ms),
           std::to_string(r.latency_ms)}));
      if (!res.ok()) {
        Status s = error("insert");
        (void)exec("ROLLBACK", "rollback");
        return s;
      }
    }
    return exec("COMMIT", "commit");
  }

  Result<std::vector<UsageRecord>> query(const std::string& tenant, int64_t since_unix_ms) override {
    std::lock_guard<std::mutex> lock(mu_);
    PgResult res(params(
        "SELECT request_id, tenant, key_id, model, version, replica, prompt_tokens, completion_tokens, cached_tokens, "
        "status, stream, start_unix_ms, ttft_ms, latency_ms FROM usage WHERE ($1 = '' OR tenant = $1) AND "
        "start_unix_ms >= $2 ORDER BY start_unix_ms, request_id",
        {tenant, std::to_string(since_unix_ms)}));
    if (!res.ok()) return error("query");
    std::vector<UsageRecord> out;
    for (int i = 0; i < PQntuples(res.get()); ++i) {
      auto col = [&](int c) { return std::string(PQgetvalue(res.get(), i, c)); };
      UsageRecord r;
      r.request_id = col(0), r.tenant = col(1), r.key_id = col(2), r.model = col(3), r.version = col(4);
      r.replica = col(5), r.prompt_tokens = std::stoll(col(6)), r.completion_tokens = std::stoll(col(7));
      r.cached_tokens = std::stoll(col(8)), r.status = std::stoi(col(9)), r.stream = col(10) == "t";
      r.start_unix_ms = std::stoll(col(11)), r.ttft_ms = std::stod(col(12)), r.latency_ms = std::stod(col(13));
      out.push_back(std::move(r));
    }
    return out;
  }

  Status put_key(const KeyRecord& key) override {
    std::lock_guard<std::mutex> lock(mu_);
    PgResult res(params(
        "INSERT INTO api_keys(id, tenant, hash) VALUES($1,$2,$3) ON CONFLICT (id) DO UPDATE SET "
        "tenant = excluded.tenant, hash = excluded.hash, revoked = false",
        {key.id, key.tenant, key.hash}));
    return res.ok() ? ok_status() : error("put key");
  }

  Status revoke_key(const std::string& id) override {
    std::lock_guard<std::mutex> lock(mu_);
    PgResult res(params(
        "INSERT INTO api_keys(id, tenant, hash, revoked) VALUES($1, '', '', true) ON CONFLICT (id) DO UPDATE SET revoked = true",
        {id}));
    return res.ok() ? ok_status() : error("revoke key");
  }

  Result<std::vector<StoredKey>> load_keys() override {
    std::lock_guard<std::mutex> lock(mu_);
    PgResult res(PQexec(conn_, "SELECT id, tenant, hash, revoked FROM api_keys ORDER BY id"));
    if (!res.ok()) return error("load keys");
    std::vector<StoredKey> out;
    for (int i = 0; i < PQntuples(res.get()); ++i) {
      out.push_back({{PQgetvalue(res.get(), i, 0), PQgetvalue(res.get(), i, 1), PQgetvalue(res.get(), i, 2)},
                     std::string(PQgetvalue(res.get(), i, 3)) == "t"});
    }
    return out;
  }

  Status put_tenant(const TenantConfig& t) override {
    std::lock_guard<std::mutex> lock(mu_);
    PgResult res(params(
        "INSERT INTO admin_tenants VALUES($1,$2,$3,$4,$5,$6) ON CONFLICT (name) DO UPDATE SET rpm = excluded.rpm, "
        "tpm = excluded.tpm, max_concurrency = excluded.max_concurrency, priority = excluded.priority, models = excluded.models",
        {t.name, exact(t.rpm), exact(t.tpm), std::to_string(t.max_concurrency), std::string(priority_name(t.priority)),
         models_to_json(t.models)}));
    return res.ok() ? ok_status() : error("put tenant");
  }

  Status put_weights(std::span<const StoredWeight> weights) override {
    std::lock_guard<std::mutex> lock(mu_);
    KOI_RETURN_IF_ERROR(exec("BEGIN", "begin"));
    for (const StoredWeight& w : weights) {
      PgResult res(params("INSERT INTO admin_weights VALUES($1,$2,$3) ON CONFLICT (model, version) DO UPDATE SET weight = excluded.weight",
                          {w.model, w.version, exact(w.weight)}));
      if (!res.ok()) {
        Status s = error("put weights");
        (void)exec("ROLLBACK", "rollback");
        return s;
      }
    }
    return exec("COMMIT", "commit");
  }

  Status put_replica(const StoredReplica& r) override {
    std::lock_guard<std::mutex> lock(mu_);
    PgResult res(params("INSERT INTO admin_replicas VALUES($1,$2,$3,$4) ON CONFLICT (model, version, url) DO UPDATE SET removed = excluded.removed",
                        {r.model, r.version, r.url, r.removed ? "true" : "false"}));
    return res.ok() ? ok_status() : error("put replica");
  }

  Result<AdminState> load_admin_state() override {
    std::lock_guard<std::mutex> lock(mu_);
    AdminState out;
    PgResult replicas(PQexec(conn_, "SELECT model, version, url, removed FROM admin_replicas ORDER BY model, version, url"));
    if (!replicas.ok()) return error("load replicas");
    for (int i = 0; i < PQntuples(replicas.get()); ++i) {
      out.replicas.push_back({PQgetvalue(replicas.get(), i, 0), PQgetvalue(replicas.get(), i, 1), PQgetvalue(replicas.get(), i, 2),
                              std::string(PQgetvalue(replicas.get(), i, 3)) == "t"});
    }
    PgResult weights(PQexec(conn_, "SELECT model, version, weight FROM admin_weights ORDER BY model, version"));
    if (!weights.ok()) return error("load weights");
    for (int i = 0; i < PQntuples(weights.get()); ++i) {
      out.weights.push_back({PQgetvalue(weights.get(), i, 0), PQgetvalue(weights.get(), i, 1), std::stod(PQgetvalue(weights.get(), i, 2))});
    }
    PgResult tenants(PQexec(conn_, "SELECT name, rpm, tpm, max_concurrency, priority, models FROM admin_tenants ORDER BY name"));
    if (!tenants.ok()) return error("load tenants");
    for (int i = 0; i < PQntuples(tenants.get()); ++i) {
      auto col = [&](int c) { return std::string(PQgetvalue(tenants.get(), i, c)); };
      TenantConfig t;
      t.name = col(0), t.rpm = std::stod(col(1)), t.tpm = std::stod(col(2)), t.max_concurrency = std::stoi(col(3));
      auto priority = parse_priority(col(4));
      auto models = models_from_json(col(5));
      if (!priority.ok() || !models.ok()) {
        return Status::corrupt("usage ledger (postgres): admin_tenants row '" + t.name + "' is unreadable; fix or delete it");
      }
      t.priority = *priority, t.models = std::move(*models);
      out.tenants.push_back(std::move(t));
    }
    return out;
  }

 private:
  std::mutex mu_;
  PGconn* conn_;
};

}  // namespace

Result<std::unique_ptr<UsageStore>> open_postgres_store(const std::string& conninfo) {
  PGconn* conn = PQconnectdb(conninfo.c_str());
  if (PQstatus(conn) != CONNECTION_OK) {
    std::string m = PQerrorMessage(conn);
    PQfinish(conn);
    while (!m.empty() && (m.back() == '\n' || m.back() == ' ')) m.pop_back();
    return Status::unavailable("usage ledger (postgres): cannot connect: " + m +
                               "; check the --store URL and that the server is running");
  }
  PQsetNoticeProcessor(conn, [](void*, const char*) {}, nullptr);
  auto store = std::make_unique<PostgresStore>(conn);
  KOI_RETURN_IF_ERROR(store->exec(kSchema, "create schema"));
  KOI_RETURN_IF_ERROR(store->exec(kAdminSchema, "add the admin tables"));
  return std::unique_ptr<UsageStore>(std::move(store));
}

}  // namespace koi::gateway
