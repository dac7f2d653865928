#include "store/database.h"

#include <cstdlib>
#include <string>

#include <fmt/format.h>

#include "base/check.h"

namespace koi::store {

namespace {

constexpr std::string_view kMigrationsTable =
    "CREATE TABLE IF NOT EXISTS schema_migrations(schema_name TEXT NOT NULL, version INTEGER NOT NULL, "
    "PRIMARY KEY(schema_name, version))";

}  // namespace

int64_t Row::int64(size_t i) const {
  const Value& v = values.at(i);
  if (const auto* n = std::get_if<int64_t>(&v)) return *n;
  if (const auto* d = std::get_if<double>(&v)) return static_cast<int64_t>(*d);
  if (const auto* s = std::get_if<std::string>(&v)) return std::strtoll(s->c_str(), nullptr, 10);
  return 0;
}

double Row::real(size_t i) const {
  const Value& v = values.at(i);
  if (const auto* n = std::get_if<int64_t>(&v)) return static_cast<double>(*n);
  if (const auto* d = std::get_if<double>(&v)) return *d;
  if (const auto* s = std::get_if<std::string>(&v)) return std::strtod(s->c_str(), nullptr);
  return 0.0;
}

std::string Row::text(size_t i) const {
  const Value& v = values.at(i);
  if (const auto* n = std::get_if<int64_t>(&v)) return std::to_string(*n);
  if (const auto* d = std::get_if<double>(&v)) return fmt::format("{}", *d);
  if (const auto* s = std::get_if<std::string>(&v)) return *s;
  return "";
}

Result<std::unique_ptr<Database>> Database::open(std::string_view name, const std::string& url,
                                                 const OpenOptions& options) {
  if (url.starts_with("postgres://") || url.starts_with("postgresql://")) return open_postgres(name, url, options);
  if (url.starts_with("sqlite:")) return open_sqlite(name, url.substr(7), options);
  return open_sqlite(name, url, options);
}

Status Database::error(std::string_view what, std::string_view message) const {
  std::string m(message);
  while (!m.empty() && (m.back() == '\n' || m.back() == ' ')) m.pop_back();
  return Status::io_error(fmt::format("{}: {}: {}", label_, what, m));
}

Status Database::transaction(const std::function<Status()>& fn) {
  std::lock_guard lock(mu_);
  if (transaction_depth_ > 0) return fn();
  KOI_RETURN_IF_ERROR(begin());
  ++transaction_depth_;
  Status s = fn();
  --transaction_depth_;
  if (s.ok()) s = commit();
  if (!s.ok()) rollback();
  return s;
}

Result<int64_t> Database::schema_version(std::string_view schema) {
  const std::string_view tables = backend() == Backend::kSqlite
                                      ? "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?"
                                      : "SELECT count(*) FROM information_schema.tables WHERE table_name = ? AND "
                                        "table_schema = current_schema()";
  KOI_ASSIGN_OR_RETURN(const std::vector<Row> found, query("read schema version", tables, {"schema_migrations"}));
  if (found.at(0).int64(0) == 0) return int64_t{0};
  KOI_ASSIGN_OR_RETURN(const std::vector<Row> rows,
                       query("read schema version", "SELECT MAX(version) FROM schema_migrations WHERE schema_name = ?",
                             {std::string(schema)}));
  return rows.at(0).int64(0);  // NULL (no row yet) reads 0
}

Status Database::migrate(std::string_view schema, std::span<const Migration> migrations) {
  KOI_CHECK(!migrations.empty());
  for (size_t i = 1; i < migrations.size(); ++i) KOI_CHECK(migrations[i - 1].version < migrations[i].version);
  std::lock_guard lock(mu_);
  const int latest = migrations.back().version;
  auto refuse_newer = [&](int64_t current) -> Status {
    if (current <= latest) return ok_status();
    return Status::failed_precondition(fmt::format(
        "{}: schema '{}' is at version {}, newer than this koi knows ({}); run a newer koi, or use another database",
        label_, schema, current, latest));
  };
  if (read_only_) {
    KOI_ASSIGN_OR_RETURN(const int64_t current, schema_version(schema));
    return refuse_newer(current);
  }
  KOI_RETURN_IF_ERROR(exec("create schema_migrations", kMigrationsTable));
  for (const Migration& m : migrations) {
    // Each step reads the version inside its transaction: of two processes migrating at
    // once, the second finds the step done.
    KOI_RETURN_IF_ERROR(transaction([&]() -> Status {
      KOI_ASSIGN_OR_RETURN(const int64_t current, schema_version(schema));
      KOI_RETURN_IF_ERROR(refuse_newer(current));
      if (m.version <= current) return ok_status();
      KOI_RETURN_IF_ERROR(exec_script(fmt::format("migrate schema '{}' to version {}", schema, m.version), m.sql));
      return exec("record migration", "INSERT INTO schema_migrations(schema_name, version) VALUES(?, ?)",
                  {std::string(schema), int64_t{m.version}});
    }));
  }
  return ok_status();
}

std::string postgres_placeholders(std::string_view sql) {
  std::string out;
  char quote = 0;
  int n = 0;
  for (char c : sql) {
    if (quote != 0) {
      if (c == quote) quote = 0;
    } else if (c == '\'' || c == '"') {
      quote = c;
    } else if (c == '?') {
      out += "$" + std::to_string(++n);
      continue;
    }
    out += c;
  }
  return out;
}

}  // namespace koi::store
