// The PostgreSQL implementation of store::Database (see database.h), through libpq.
#include <libpq-fe.h>

#include <cmath>

#include <fmt/format.h>

#include "store/database.h"

namespace koi::store {
namespace {

// Type OIDs of the columns read as numbers (PostgreSQL's catalog/pg_type.h).
constexpr Oid kBoolOid = 16, kInt8Oid = 20, kInt2Oid = 21, kInt4Oid = 23, kFloat4Oid = 700, kFloat8Oid = 701,
              kNumericOid = 1700;

// One result, cleared on scope exit.
class PgResult {
 public:
  explicit PgResult(PGresult* r) : r_(r) {}
  ~PgResult() { PQclear(r_); }
  PGresult* get() const { return r_; }
  bool ok() const { return PQresultStatus(r_) == PGRES_COMMAND_OK || PQresultStatus(r_) == PGRES_TUPLES_OK; }

 private:
  PGresult* r_;
};

// A parameter in PostgreSQL's text input format; nullopt for NULL.
std::optional<std::string> param_text(const Value& v) {
  if (const auto* n = std::get_if<int64_t>(&v)) return std::to_string(*n);
  if (const auto* d = std::get_if<double>(&v)) {
    if (std::isnan(*d)) return "NaN";
    if (std::isinf(*d)) return *d > 0 ? "Infinity" : "-Infinity";
    return fmt::format("{}", *d);
  }
  if (const auto* s = std::get_if<std::string>(&v)) return *s;
  return std::nullopt;
}

Value column(const PGresult* r, int row, int col) {
  if (PQgetisnull(r, row, col)) return Null{};
  const std::string text = PQgetvalue(r, row, col);
  switch (PQftype(r, col)) {
    case kBoolOid: return int64_t{text == "t" ? 1 : 0};
    case kInt2Oid:
    case kInt4Oid:
    case kInt8Oid: return int64_t{std::strtoll(text.c_str(), nullptr, 10)};
    case kFloat4Oid:
    case kFloat8Oid:
    case kNumericOid: return std::strtod(text.c_str(), nullptr);
    default: return text;
  }
}

class PostgresDatabase final : public Database {
 public:
  PostgresDatabase(PGconn* conn, std::string label, bool read_only)
      : Database(std::move(label), read_only), conn_(conn) {}
  ~PostgresDatabase() override { PQfinish(conn_); }

  Backend backend() const override { return Backend::kPostgres; }

  // Makes the session read-only when it should be; again after a reconnect.
  Status configure() {
    if (!read_only_) return ok_status();
    PgResult r(PQexec(conn_, "SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY"));
    return r.ok() ? ok_status() : pg_error("configure");
  }

  Status exec(std::string_view what, std::string_view sql, const std::vector<Value>& params) override {
    std::lock_guard lock(mu_);
    KOI_RETURN_IF_ERROR(reconnect_if_needed());
    PgResult r(run(sql, params));
    return r.ok() ? ok_status() : pg_error(what);
  }

  Result<std::vector<Row>> query(std::string_view what, std::string_view sql,
                                 const std::vector<Value>& params) override {
    std::lock_guard lock(mu_);
    KOI_RETURN_IF_ERROR(reconnect_if_needed());
    PgResult r(run(sql, params));
    if (!r.ok()) return pg_error(what);
    std::vector<Row> rows(static_cast<size_t>(PQntuples(r.get())));
    for (int i = 0; i < PQntuples(r.get()); ++i) {
      for (int c = 0; c < PQnfields(r.get()); ++c) rows[i].values.push_back(column(r.get(), i, c));
    }
    return rows;
  }

  Status exec_script(std::string_view what, std::string_view sql) override {
    std::lock_guard lock(mu_);
    KOI_RETURN_IF_ERROR(reconnect_if_needed());
    PgResult r(PQexec(conn_, std::string(sql).c_str()));
    return r.ok() ? ok_status() : pg_error(what);
  }

 private:
  Status begin() override { return exec_script("begin", "BEGIN"); }
  Status commit() override { return exec_script("commit", "COMMIT"); }
  void rollback() override { PQclear(PQexec(conn_, "ROLLBACK")); }
  Status pg_error(std::string_view what) const { return error(what, PQerrorMessage(conn_)); }

  // A dropped connection is re-established between transactions, never inside one (its
  // work is gone with the connection; the commit reports that).
  Status reconnect_if_needed() {
    if (transaction_depth_ > 0 || PQstatus(conn_) == CONNECTION_OK) return ok_status();
    PQreset(conn_);
    if (PQstatus(conn_) != CONNECTION_OK) return pg_error("reconnect");
    return configure();
  }

  PGresult* run(std::string_view sql, const std::vector<Value>& params) {
    std::vector<std::optional<std::string>> texts;
    for (const Value& v : params) texts.push_back(param_text(v));
    std::vector<const char*> values;
    for (const auto& t : texts) values.push_back(t ? t->c_str() : nullptr);
    return PQexecParams(conn_, postgres_placeholders(sql).c_str(), static_cast<int>(values.size()), nullptr,
                        values.data(), nullptr, nullptr, 0);
  }

  PGconn* conn_;
};

}  // namespace

Result<std::unique_ptr<Database>> open_postgres(std::string_view name, const std::string& conninfo,
                                                const OpenOptions& options) {
  const std::string label = std::string(name) + " (postgres)";
  PGconn* conn = PQconnectdb(conninfo.c_str());
  if (PQstatus(conn) != CONNECTION_OK) {
    std::string m = PQerrorMessage(conn);
    PQfinish(conn);
    while (!m.empty() && (m.back() == '\n' || m.back() == ' ')) m.pop_back();
    return Status::unavailable(label + ": cannot connect: " + m + "; check the URL and that the server is running");
  }
  PQsetNoticeProcessor(conn, [](void*, const char*) {}, nullptr);
  auto database = std::make_unique<PostgresDatabase>(conn, label, options.read_only);
  KOI_RETURN_IF_ERROR(database->configure());
  return std::unique_ptr<Database>(std::move(database));
}

}  // namespace koi::store
