// The SQLite implementation of UsageStore (see usage_store.h).
#include <sqlite3.h>

#include <mutex>

#include "gateway/usage_store.h"

namespace koi::gateway {
namespace {

constexpr const char* kSchema = R"sql(
PRAGMA journal_mode=WAL;
PRAGMA synchronous=NORMAL;
CREATE TABLE IF NOT EXISTS usage(
  request_id TEXT PRIMARY KEY, tenant TEXT NOT NULL, key_id TEXT NOT NULL, model TEXT NOT NULL,
  version TEXT NOT NULL, replica TEXT NOT NULL, prompt_tokens INTEGER NOT NULL,
  completion_tokens INTEGER NOT NULL, cached_tokens INTEGER NOT NULL, status INTEGER NOT NULL,
  stream INTEGER NOT NULL, start_unix_ms INTEGER NOT NULL, ttft_ms REAL NOT NULL, latency_ms REAL NOT NULL);
CREATE INDEX IF NOT EXISTS usage_tenant_start ON usage(tenant, start_unix_ms);
CREATE TABLE IF NOT EXISTS api_keys(
  id TEXT PRIMARY KEY, tenant TEXT NOT NULL, hash TEXT NOT NULL, revoked INTEGER NOT NULL DEFAULT 0);
)sql";

// Migration 2: the admin API's changes (additive; an older ledger gets the tables on open).
constexpr const char* kAdminSchema = R"sql(
CREATE TABLE IF NOT EXISTS admin_tenants(
  name TEXT PRIMARY KEY, rpm REAL NOT NULL, tpm REAL NOT NULL, max_concurrency INTEGER NOT NULL,
  priority TEXT NOT NULL, models TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS admin_weights(
  model TEXT NOT NULL, version TEXT NOT NULL, weight REAL NOT NULL, PRIMARY KEY(model, version));
CREATE TABLE IF NOT EXISTS admin_replicas(
  model TEXT NOT NULL, version TEXT NOT NULL, url TEXT NOT NULL, removed INTEGER NOT NULL,
  PRIMARY KEY(model, version, url));
)sql";

class Stmt {
 public:
  Stmt(sqlite3* db, const char* sql) { sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr); }
  ~Stmt() { sqlite3_finalize(stmt_); }
  sqlite3_stmt* get() { return stmt_; }
  void text(int i, const std::string& s) { sqlite3_bind_text(stmt_, i, s.data(), static_cast<int>(s.size()), SQLITE_TRANSIENT); }
  void i64(int i, int64_t v) { sqlite3_bind_int64(stmt_, i, v); }
  void f64(int i, double v) { sqlite3_bind_double(stmt_, i, v); }
  std::string col_text(int i) {
    const unsigned char* p = sqlite3_column_text(stmt_, i);
    return p ? reinterpret_cast<const char*>(p) : "";
  }

 private:
  sqlite3_stmt* stmt_ = nullptr;
};

class SqliteStore final : public UsageStore {
 public:
  SqliteStore(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}
  ~SqliteStore() override { sqlite3_close(db_); }

  Status exec(const char* sql, const char* what) {
    char* err = nullptr;
    if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
      std::string m = err ? err : sqlite3_errmsg(db_);
      sqlite3_free(err);
      return Status::io_error("usage ledger " + path_ + ": " + what + ": " + m);
    }
    return ok_status();
  }
  Status error(const char* what) { return Status::io_error("usage ledger " + path_ + ": " + what + ": " + sqlite3_errmsg(db_)); }

  Status append(std::span<const UsageRecord> records) override {
    std::lock_guard<std::mutex> lock(mu_);
    KOI_RETURN_IF_ERROR(exec("BEGIN IMMEDIATE", "begin"));
    Stmt st(db_, "INSERT INTO usage VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?) ON CONFLICT(request_id) DO NOTHING");
    for (const UsageRecord& r : records) {
      sqlite3_reset(st.get());
      st.text(1, r.request_id), st.text(2, r.tenant), st.text(3, r.key_id), st.text(4, r.model);
      st.text(5, r.version), st.text(6, r.replica), st.i64(7, r.prompt_tokens), st.i64(8, r.completion_tokens);
      st.i64(9, r.cached_tokens), st.i64(10, r.status), st.i64(11, r.stream), st.i64(12, r.start_unix_ms);
      st.f64(13, r.ttft_ms), st.f64(14, r.latency_ms);
      if (sqlite3_step(st.get()) != SQLITE_DONE) {
        Status s = error("insert");
        (void)exec("ROLLBACK", "rollback");
        return s;
      }
    }
    return exec("COMMIT", "commit");
  }

  Result<std::vector<UsageRecord>> query(const std::string& tenant, int64_t since_unix_ms) override {
    std::lock_guard<std::mutex> lock(mu_);
    Stmt st(db_, "SELECT * FROM usage WHERE (?1 = '' OR tenant = ?1) AND start_unix_ms >= ?2 ORDER BY start_unix_ms, request_id");
    st.text(1, tenant), st.i64(2, since_unix_ms);
    std::vector<UsageRecord> out;
    int rc;
    while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) {
      sqlite3_stmt* s = st.get();
      UsageRecord r;
      r.request_id = st.col_text(0), r.tenant = st.col_text(1), r.key_id = st.col_text(2), r.model = st.col_text(3);
      r.version = st.col_text(4), r.replica = st.col_text(5);
      r.prompt_tokens = sqlite3_column_int64(s, 6), r.completion_tokens = sqlite3_column_int64(s, 7);
      r.cached_tokens = sqlite3_column_int64(s, 8), r.status = sqlite3_column_int(s, 9);
      r.stream = sqlite3_column_int(s, 10) != 0, r.start_unix_ms = sqlite3_column_int64(s, 11);
      r.ttft_ms = sqlite3_column_double(s, 12), r.latency_ms = sqlite3_column_double(s, 13);
      out.push_back(std::move(r));
    }
    if (rc != SQLITE_DONE) return error("query");
    return out;
  }

  Status put_key(const KeyRecord& key) override {
    std::lock_guard<std::mutex> lock(mu_);
    Stmt st(db_, "INSERT INTO api_keys(id, tenant, hash) VALUES(?,?,?) ON CONFLICT(id) DO UPDATE SET tenant=excluded.tenant, hash=excluded.hash, revoked=0");
    st.text(1, key.id), st.text(2, key.tenant), st.text(3, key.hash);
    return sqlite3_step(st.get()) == SQLITE_DONE ? ok_status() : error("put key");
  }

  Status revoke_key(const std::string& id) override {
    std::lock_guard<std::mutex> lock(mu_);
    Stmt st(db_, "INSERT INTO api_keys(id, tenant, hash, revoked) VALUES(?, '', '', 1) ON CONFLICT(id) DO UPDATE SET revoked=1");
    st.text(1, id);
    return sqlite3_step(st.get()) == SQLITE_DONE ? ok_status() : error("revoke key");
  }

  Result<std::vector<StoredKey>> load_keys() override {
    std::lock_guard<std::mutex> lock(mu_);
    Stmt st(db_, "SELECT id, tenant, hash, revoked FROM api_keys ORDER BY id");
    std::vector<StoredKey> out;
    int rc;
    while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) {
      out.push_back({{st.col_text(0), st.col_text(1), st.col_text(2)}, sqlite3_column_int(st.get(), 3) != 0});
    }
    if (rc != SQLITE_DONE) return error("load keys");
    return out;
  }

  Status put_tenant(const TenantConfig& t) override {
    std::lock_guard<std::mutex> lock(mu_);
    Stmt st(db_, "INSERT INTO admin_tenants VALUES(?,?,?,?,?,?) ON CONFLICT(name) DO UPDATE SET rpm=excluded.rpm, "
                 "tpm=excluded.tpm, max_concurrency=excluded.max_concurrency, priority=excluded.priority, models=excluded.models");
    st.text(1, t.name), st.f64(2, t.rpm), st.f64(3, t.tpm), st.i64(4, t.max_concurrency);
    st.text(5, std::string(priority_name(t.priority))), st.text(6, models_to_json(t.models));
    return sqlite3_step(st.get()) == SQLITE_DONE ? ok_status() : error("put tenant");
  }

  Status put_weights(std::span<const StoredWeight> weights) override {
    std::lock_guard<std::mutex> lock(mu_);
    KOI_RETURN_IF_ERROR(exec("BEGIN IMMEDIATE", "begin"));
    Stmt st(db_, "INSERT INTO admin_weights VALUES(?,?,?) ON CONFLICT(model, version) DO UPDATE SET weight=excluded.weight");
    for (const StoredWeight& w : weights) {
      sqlite3_reset(st.get());
      st.text(1, w.model), st.text(2, w.version), st.f64(3, w.weight);
      if (sqlite3_step(st.get()) != SQLITE_DONE) {
        Status s = error("put weights");
        (void)exec("ROLLBACK", "rollback");
        return s;
      }
    }
    return exec("COMMIT", "commit");
  }

  Status put_replica(const StoredReplica& r) override {
    std::lock_guard<std::mutex> lock(mu_);
    Stmt st(db_, "INSERT INTO admin_replicas VALUES(?,?,?,?) ON CONFLICT(model, version, url) DO UPDATE SET removed=excluded.removed");
    st.text(1, r.model), st.text(2, r.version), st.text(3, r.url), st.i64(4, r.removed);
    return sqlite3_step(st.get()) == SQLITE_DONE ? ok_status() : error("put replica");
  }

  Result<AdminState> load_admin_state() override {
    std::lock_guard<std::mutex> lock(mu_);
    AdminState out;
    int rc;
    Stmt replicas(db_, "SELECT model, version, url, removed FROM admin_replicas ORDER BY model, version, url");
    while ((rc = sqlite3_step(replicas.get())) == SQLITE_ROW) {
      out.replicas.push_back({replicas.col_text(0), replicas.col_text(1), replicas.col_text(2),
                              sqlite3_column_int(replicas.get(), 3) != 0});
    }
    if (rc != SQLITE_DONE) return error("load replicas");
    Stmt weights(db_, "SELECT model, version, weight FROM admin_weights ORDER BY model, version");
    while ((rc = sqlite3_step(weights.get())) == SQLITE_ROW) {
      out.weights.push_back({weights.col_text(0), weights.col_text(1), sqlite3_column_double(weights.get(), 2)});
    }
    if (rc != SQLITE_DONE) return error("load weights");
    Stmt tenants(db_, "SELECT name, rpm, tpm, max_concurrency, priority, models FROM admin_tenants ORDER BY name");
    while ((rc = sqlite3_step(tenants.get())) == SQLITE_ROW) {
      TenantConfig t;
      t.name = tenants.col_text(0);
      t.rpm = sqlite3_column_double(tenants.get(), 1), t.tpm = sqlite3_column_double(tenants.get(), 2);
      t.max_concurrency = sqlite3_column_int(tenants.get(), 3);
      auto priority = parse_priority(tenants.col_text(4));
      auto models = models_from_json(tenants.col_text(5));
      if (!priority.ok() || !models.ok()) {
        return Status::corrupt("usage ledger " + path_ + ": admin_tenants row '" + t.name + "' is unreadable; fix or delete it");
      }
      t.priority = *priority, t.models = std::move(*models);
      out.tenants.push_back(std::move(t));
    }
    if (rc != SQLITE_DONE) return error("load tenants");
    return out;
  }

 private:
  std::mutex mu_;
  sqlite3* db_;
  std::string path_;
};

}  // namespace

Result<std::unique_ptr<UsageStore>> open_sqlite_store(const std::string& path) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, nullptr) != SQLITE_OK) {
    std::string m = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return Status::io_error("usage ledger " + path + ": cannot open: " + m + "; check that the directory exists and is writable");
  }
  sqlite3_busy_timeout(db, 5000);
  auto store = std::make_unique<SqliteStore>(db, path);
  KOI_RETURN_IF_ERROR(store->exec(kSchema, "create schema"));
  KOI_RETURN_IF_ERROR(store->exec(kAdminSchema, "add the admin tables"));
  return std::unique_ptr<UsageStore>(std::move(store));
}

}  // namespace koi::gateway
