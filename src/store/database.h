// store::Database: one SQL connection behind one interface, for every module that keeps
// durable tables (the gateway's usage ledger and keys, the cluster's control plane). Two
// implementations:
//   SQLite, the embedded default: "sqlite:PATH" or a plain path. WAL journal and
//     synchronous=NORMAL: a committed transaction survives a crash of the process (not a
//     power loss of the machine; use PostgreSQL for that).
//   PostgreSQL: "postgres://..." or "postgresql://..." (or any libpq conninfo through
//     open_postgres), through libpq. A dropped connection is re-established before the
//     next statement outside a transaction.
//
// SQL uses `?` placeholders, bound in order from a vector of Values (null, int64, double,
// text); the PostgreSQL implementation rewrites them to $1, $2, ... (a `?` inside a quoted
// literal is left alone). Rows come back as Values: SQLite's column types as stored;
// PostgreSQL's integer and boolean columns as int64 (true = 1), float and numeric as double,
// everything else as text.
//
// Every statement names its operation ("insert usage"): errors are Status values that read
// "<name> <where>: <operation>: <what the database said>", where name is the caller's
// ("usage ledger") and where the path or "(postgres)".
//
// Thread-safety: a Database is one connection; every call takes its (recursive) mutex, and
// transaction() holds it for the whole function, so statements of other threads never land
// inside another thread's transaction. Nested transaction() calls join the outer one.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "base/status.h"

namespace koi::store {

struct Null {
  bool operator==(const Null&) const = default;
};
using Value = std::variant<Null, int64_t, double, std::string>;

// One result row. The accessors convert as SQLite's sqlite3_column_* do: a null reads
// 0 or "", text reads as the number it starts with, numbers read as their decimal text.
struct Row {
  std::vector<Value> values;
  bool is_null(size_t i) const { return std::holds_alternative<Null>(values.at(i)); }
  int64_t int64(size_t i) const;
  double real(size_t i) const;
  std::string text(size_t i) const;
};

struct OpenOptions {
  // Statements that write fail; SQLite opens the file read-only, PostgreSQL sets the
  // session read-only.
  bool read_only = false;
  // SQLite: a missing file is a NotFound error instead of a new empty database.
  // (A PostgreSQL database always has to exist.)
  bool must_exist = false;
};

// One step of a schema: applied once, in its own transaction, in version order.
struct Migration {
  int version;
  std::string_view sql;  // one or more statements
};

enum class Backend { kSqlite, kPostgres };

class Database {
 public:
  // `name` names the store in every error ("usage ledger"); `url` picks the backend.
  static Result<std::unique_ptr<Database>> open(std::string_view name, const std::string& url,
                                                const OpenOptions& options = {});
  virtual ~Database() = default;

  virtual Backend backend() const = 0;
  // "usage ledger /var/lib/koi/ledger.db", "usage ledger (postgres)": how errors begin.
  const std::string& label() const { return label_; }

  // One statement with `?` parameters; `what` names the operation in errors.
  virtual Status exec(std::string_view what, std::string_view sql, const std::vector<Value>& params = {}) = 0;
  virtual Result<std::vector<Row>> query(std::string_view what, std::string_view sql,
                                         const std::vector<Value>& params = {}) = 0;
  // Several statements without parameters (a schema).
  virtual Status exec_script(std::string_view what, std::string_view sql) = 0;

  // Runs fn between BEGIN and COMMIT (SQLite: BEGIN IMMEDIATE, so the write lock is taken
  // up front). Rolls back and returns fn's error when fn fails, or the commit's error. Called
  // inside fn, it joins the running transaction (an inner failure rolls back only if the
  // outer fn returns it).
  Status transaction(const std::function<Status()>& fn);

  // Brings schema `schema` (a name: "gateway") up to the last of `migrations` (versions
  // ascending), recording each applied version in the table schema_migrations. A database
  // whose schema is newer than the last migration is refused (FailedPrecondition): this
  // code would misread it. Read-only databases are checked, never migrated.
  Status migrate(std::string_view schema, std::span<const Migration> migrations);

 protected:
  Database(std::string label, bool read_only) : label_(std::move(label)), read_only_(read_only) {}
  // The transaction primitives, called by transaction() with mu_ held.
  virtual Status begin() = 0;
  virtual Status commit() = 0;
  virtual void rollback() = 0;
  // "<label>: <what>: <message>" as an IoError.
  Status error(std::string_view what, std::string_view message) const;

  const std::string label_;
  const bool read_only_;
  std::recursive_mutex mu_;    // every call holds it; transaction() for its whole length
  int transaction_depth_ = 0;  // guarded by mu_

 private:
  Result<int64_t> schema_version(std::string_view schema);
};

Result<std::unique_ptr<Database>> open_sqlite(std::string_view name, const std::string& path,
                                              const OpenOptions& options = {});
Result<std::unique_ptr<Database>> open_postgres(std::string_view name, const std::string& conninfo,
                                                const OpenOptions& options = {});

// `?` placeholders as PostgreSQL's $1, $2, ... (outside '...' and "..." quotes).
std::string postgres_placeholders(std::string_view sql);

}  // namespace koi::store
