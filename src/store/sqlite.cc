// The SQLite implementation of store::Database (see database.h).
#include <sqlite3.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include "base/check.h"
#include "base/file.h"
#include "store/database.h"

namespace koi::store {
namespace {

// Resets a cached statement (and its bindings) when its use is over.
struct StatementUse {
  sqlite3_stmt* stmt;
  ~StatementUse() {
    sqlite3_reset(stmt);
    sqlite3_clear_bindings(stmt);
  }
};

Value column(sqlite3_stmt* stmt, int i) {
  switch (sqlite3_column_type(stmt, i)) {
    case SQLITE_INTEGER: return int64_t{sqlite3_column_int64(stmt, i)};
    case SQLITE_FLOAT: return sqlite3_column_double(stmt, i);
    case SQLITE_NULL: return Null{};
    default: {  // text or blob
      const auto* p = static_cast<const char*>(sqlite3_column_blob(stmt, i));
      return std::string(p != nullptr ? p : "", static_cast<size_t>(sqlite3_column_bytes(stmt, i)));
    }
  }
}

// Checkpoints a WAL database from its own connection and thread, once a second, so that the
// fsyncs of checkpointing never stall a commit (with synchronous=NORMAL a WAL commit itself
// does not fsync; SQLite's automatic checkpoint would run inside whichever commit crosses
// 1,000 pages). PASSIVE: it never blocks writers or readers. Durability is unchanged.
class Checkpointer {
 public:
  explicit Checkpointer(const std::string& path) : thread_([this, path] { run(path); }) {}
  ~Checkpointer() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_one();
    thread_.join();
  }

 private:
  void run(const std::string& path) {
    sqlite3* db = nullptr;
    if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_FULLMUTEX, nullptr) != SQLITE_OK) {
      sqlite3_close(db);
      return;  // the owner's connection still checkpoints when it closes
    }
    sqlite3_busy_timeout(db, 100);
    std::unique_lock lock(mu_);
    for (bool last = false; !last;) {
      last = cv_.wait_for(lock, std::chrono::seconds(1), [this] { return stop_; });
      lock.unlock();
      sqlite3_wal_checkpoint_v2(db, nullptr, SQLITE_CHECKPOINT_PASSIVE, nullptr, nullptr);
      lock.lock();
    }
    sqlite3_close(db);
  }

  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

class SqliteDatabase final : public Database {
 public:
  SqliteDatabase(sqlite3* db, std::string label, bool read_only) : Database(std::move(label), read_only), db_(db) {}
  ~SqliteDatabase() override {
    checkpointer_.reset();  // before the last connection closes (which checkpoints what is left)
    for (auto& [sql, stmt] : statements_) sqlite3_finalize(stmt);
    sqlite3_close(db_);
  }
  void checkpoint_in_background(const std::string& path) { checkpointer_ = std::make_unique<Checkpointer>(path); }

  Backend backend() const override { return Backend::kSqlite; }

  Status exec(std::string_view what, std::string_view sql, const std::vector<Value>& params) override {
    std::lock_guard lock(mu_);
    KOI_ASSIGN_OR_RETURN(sqlite3_stmt* stmt, prepare(what, sql, params));
    StatementUse use{stmt};
    int rc;
    while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
    }
    return rc == SQLITE_DONE ? ok_status() : sqlite_error(what);
  }

  Result<std::vector<Row>> query(std::string_view what, std::string_view sql,
                                 const std::vector<Value>& params) override {
    std::lock_guard lock(mu_);
    KOI_ASSIGN_OR_RETURN(sqlite3_stmt* stmt, prepare(what, sql, params));
    StatementUse use{stmt};
    std::vector<Row> rows;
    const int columns = sqlite3_column_count(stmt);
    int rc;
    while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
      Row& row = rows.emplace_back();
      for (int i = 0; i < columns; ++i) row.values.push_back(column(stmt, i));
    }
    if (rc != SQLITE_DONE) return sqlite_error(what);
    return rows;
  }

  Status exec_script(std::string_view what, std::string_view sql) override {
    std::lock_guard lock(mu_);
    char* err = nullptr;
    if (sqlite3_exec(db_, std::string(sql).c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
      const std::string m = err != nullptr ? err : sqlite3_errmsg(db_);
      sqlite3_free(err);
      return error(what, m);
    }
    return ok_status();
  }

 private:
  Status begin() override { return exec_script("begin", "BEGIN IMMEDIATE"); }
  Status commit() override { return exec_script("commit", "COMMIT"); }
  void rollback() override {
    if (!sqlite3_get_autocommit(db_)) (void)exec_script("rollback", "ROLLBACK");
  }
  Status sqlite_error(std::string_view what) const { return error(what, sqlite3_errmsg(db_)); }

  // The cached statement for sql with params bound. Caller holds mu_.
  Result<sqlite3_stmt*> prepare(std::string_view what, std::string_view sql, const std::vector<Value>& params) {
    auto it = statements_.find(sql);
    if (it == statements_.end()) {
      sqlite3_stmt* stmt = nullptr;
      if (sqlite3_prepare_v2(db_, sql.data(), static_cast<int>(sql.size()), &stmt, nullptr) != SQLITE_OK) {
        return sqlite_error(what);
      }
      it = statements_.emplace(std::string(sql), stmt).first;
    }
    sqlite3_stmt* stmt = it->second;
    KOI_CHECK(sqlite3_bind_parameter_count(stmt) == static_cast<int>(params.size()));
    for (size_t i = 0; i < params.size(); ++i) {
      const int slot = static_cast<int>(i) + 1;
      const Value& v = params[i];
      if (const auto* n = std::get_if<int64_t>(&v)) {
        sqlite3_bind_int64(stmt, slot, *n);
      } else if (const auto* d = std::get_if<double>(&v)) {
        sqlite3_bind_double(stmt, slot, *d);
      } else if (const auto* s = std::get_if<std::string>(&v)) {
        sqlite3_bind_text(stmt, slot, s->data(), static_cast<int>(s->size()), SQLITE_TRANSIENT);
      } else {
        sqlite3_bind_null(stmt, slot);
      }
    }
    return stmt;
  }

  sqlite3* db_;
  std::unique_ptr<Checkpointer> checkpointer_;
  std::map<std::string, sqlite3_stmt*, std::less<>> statements_;  // by SQL; guarded by mu_
};

}  // namespace

Result<std::unique_ptr<Database>> open_sqlite(std::string_view name, const std::string& path,
                                              const OpenOptions& options) {
  const std::string label = std::string(name) + " " + path;
  if (options.must_exist && !file_exists(path)) {
    return Status::not_found(label + ": no such database file; check the path");
  }
  int flags = SQLITE_OPEN_FULLMUTEX;
  if (options.read_only) {
    flags |= SQLITE_OPEN_READONLY;
  } else {
    flags |= SQLITE_OPEN_READWRITE | (options.must_exist ? 0 : SQLITE_OPEN_CREATE);
  }
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, flags, nullptr) != SQLITE_OK) {
    const std::string m = db != nullptr ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return Status::io_error(label + ": cannot open: " + m + "; check that the directory exists and is writable");
  }
  sqlite3_busy_timeout(db, 5000);
  auto database = std::make_unique<SqliteDatabase>(db, label, options.read_only);
  if (!options.read_only) {
    KOI_RETURN_IF_ERROR(database->exec_script(
        "configure", "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA wal_autocheckpoint=0;"));
    database->checkpoint_in_background(path);
  }
  return std::unique_ptr<Database>(std::move(database));
}

}  // namespace koi::store
