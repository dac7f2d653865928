// store::Database against SQLite always, and against PostgreSQL when KOI_TEST_POSTGRES_URL
// names a server (tests/store_postgres.py starts one and runs this binary with it).
#include "store/database.h"

#include <cstdlib>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "base/file.h"

namespace koi::store {
namespace {

class DatabaseTest : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    dir_ = *make_temp_dir("koi-store");
    if (GetParam() == Backend::kSqlite) {
      url_ = "sqlite:" + path_join(dir_, "test.db");
    } else {
      url_ = std::getenv("KOI_TEST_POSTGRES_URL");
      // A clean database for every test.
      auto db = Database::open("test store", url_);
      ASSERT_TRUE(db.ok()) << db.status().message();
      ASSERT_TRUE((*db)->exec_script("reset", "DROP TABLE IF EXISTS t; DROP TABLE IF EXISTS u; DROP TABLE IF EXISTS "
                                              "other_t; DROP TABLE IF EXISTS schema_migrations").ok());
    }
    db_ = open();
  }
  void TearDown() override { remove_all(dir_); }

  std::unique_ptr<Database> open(const OpenOptions& options = {}) {
    auto db = Database::open("test store", url_, options);
    EXPECT_TRUE(db.ok()) << db.status().message();
    return db.ok() ? std::move(*db) : nullptr;
  }
  // The one column of every row of sql, as text.
  std::vector<std::string> column(Database& db, const std::string& sql) {
    auto rows = db.query("read", sql);
    EXPECT_TRUE(rows.ok()) << rows.status().message();
    std::vector<std::string> out;
    for (const Row& r : rows.ok() ? *rows : std::vector<Row>{}) out.push_back(r.text(0));
    return out;
  }
  std::string label() const { return GetParam() == Backend::kSqlite ? "test store " + url_.substr(7) : "test store (postgres)"; }

  std::string dir_, url_;
  std::unique_ptr<Database> db_;
};

TEST_P(DatabaseTest, BoundParametersOfEveryTypeRoundTrip) {
  ASSERT_TRUE(db_->exec("create", "CREATE TABLE t(i BIGINT, d DOUBLE PRECISION, s TEXT, n TEXT)").ok());
  ASSERT_TRUE(db_->exec("insert", "INSERT INTO t VALUES(?, ?, ?, ?)",
                        {int64_t{1} << 40, 2.5, std::string("it's ? 'quoted'"), Null{}}).ok());
  auto rows = db_->query("select", "SELECT i, d, s, n FROM t WHERE s = ? AND i > ?",
                         {std::string("it's ? 'quoted'"), int64_t{0}});
  ASSERT_TRUE(rows.ok()) << rows.status().message();
  ASSERT_EQ(rows->size(), 1u);
  const Row& r = (*rows)[0];
  EXPECT_EQ(r.values[0], Value(int64_t{1} << 40));
  EXPECT_EQ(r.values[1], Value(2.5));
  EXPECT_EQ(r.values[2], Value(std::string("it's ? 'quoted'")));
  EXPECT_TRUE(r.is_null(3));
  EXPECT_EQ(r.int64(0), int64_t{1} << 40);
  EXPECT_EQ(r.real(0), static_cast<double>(int64_t{1} << 40));
  EXPECT_EQ(r.text(1), "2.5");
  EXPECT_EQ(r.text(3), "");
  EXPECT_EQ(r.int64(3), 0);
  // A '?' inside a literal is not a placeholder.
  EXPECT_EQ(column(*db_, "SELECT count(*) FROM t WHERE s <> 'x?y'"), std::vector<std::string>{"1"});
}

TEST_P(DatabaseTest, BooleansReadAsIntegers) {
  const char* type = GetParam() == Backend::kSqlite ? "INTEGER" : "BOOLEAN";
  ASSERT_TRUE(db_->exec("create", std::string("CREATE TABLE t(b ") + type + ")").ok());
  ASSERT_TRUE(db_->exec("insert", "INSERT INTO t VALUES(?)", {int64_t{1}}).ok());
  ASSERT_TRUE(db_->exec("insert", "INSERT INTO t VALUES(?)", {int64_t{0}}).ok());
  auto rows = db_->query("select", "SELECT b FROM t ORDER BY b");
  ASSERT_TRUE(rows.ok()) << rows.status().message();
  EXPECT_EQ((*rows)[0].values[0], Value(int64_t{0}));
  EXPECT_EQ((*rows)[1].values[0], Value(int64_t{1}));
}

TEST_P(DatabaseTest, TransactionCommitsOrRollsBackWhole) {
  ASSERT_TRUE(db_->exec("create", "CREATE TABLE t(k TEXT PRIMARY KEY)").ok());
  ASSERT_TRUE(db_->transaction([&] {
    KOI_RETURN_IF_ERROR(db_->exec("insert", "INSERT INTO t VALUES(?)", {std::string("a")}));
    return db_->exec("insert", "INSERT INTO t VALUES(?)", {std::string("b")});
  }).ok());
  // The second insert breaks the key: the first is rolled back with it.
  Status s = db_->transaction([&] {
    KOI_RETURN_IF_ERROR(db_->exec("insert c", "INSERT INTO t VALUES(?)", {std::string("c")}));
    return db_->exec("insert a again", "INSERT INTO t VALUES(?)", {std::string("a")});
  });
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.message().rfind(label() + ": insert a again: ", 0), 0u) << s.message();
  // A failure of the function's own rolls back too.
  s = db_->transaction([&] {
    KOI_RETURN_IF_ERROR(db_->exec("insert", "INSERT INTO t VALUES(?)", {std::string("d")}));
    return Status::cancelled("changed my mind");
  });
  EXPECT_EQ(s.message(), "changed my mind");
  // Nested: joins the outer transaction.
  ASSERT_TRUE(db_->transaction([&] {
    return db_->transaction([&] { return db_->exec("insert", "INSERT INTO t VALUES(?)", {std::string("e")}); });
  }).ok());
  EXPECT_EQ(column(*db_, "SELECT k FROM t ORDER BY k"), (std::vector<std::string>{"a", "b", "e"}));
}

TEST_P(DatabaseTest, ErrorsNameTheStoreAndTheOperation) {
  Status s = db_->exec("count widgets", "SELECT count(*) FROM no_such_table");
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_EQ(s.message().rfind(label() + ": count widgets: ", 0), 0u) << s.message();
  EXPECT_NE(s.message().find("no_such_table"), std::string::npos) << s.message();
}

const Migration kV1[] = {{1, "CREATE TABLE t(k TEXT PRIMARY KEY)"}};
const Migration kV2[] = {{1, "CREATE TABLE t(k TEXT PRIMARY KEY)"},
                         {2, "CREATE TABLE u(k TEXT); INSERT INTO u VALUES('from v2')"}};

TEST_P(DatabaseTest, MigrationsApplyOnceInOrder) {
  ASSERT_TRUE(db_->migrate("app", kV1).ok());
  ASSERT_TRUE(db_->exec("insert", "INSERT INTO t VALUES('kept')").ok());
  ASSERT_TRUE(db_->migrate("app", kV1).ok());  // applied already: nothing runs again
  db_ = open();
  ASSERT_TRUE(db_->migrate("app", kV2).ok());  // only version 2 runs
  ASSERT_TRUE(db_->migrate("app", kV2).ok());
  EXPECT_EQ(column(*db_, "SELECT k FROM t"), std::vector<std::string>{"kept"});
  EXPECT_EQ(column(*db_, "SELECT k FROM u"), std::vector<std::string>{"from v2"});
  EXPECT_EQ(column(*db_, "SELECT version FROM schema_migrations WHERE schema_name = 'app' ORDER BY version"),
            (std::vector<std::string>{"1", "2"}));
  // Another schema in the same database has its own versions.
  const Migration other[] = {{1, "CREATE TABLE other_t(x TEXT)"}};
  ASSERT_TRUE(db_->migrate("other", other).ok());
  EXPECT_EQ(column(*db_, "SELECT version FROM schema_migrations WHERE schema_name = 'other'"),
            std::vector<std::string>{"1"});
}

TEST_P(DatabaseTest, DatabaseNewerThanTheCodeIsRefused) {
  ASSERT_TRUE(db_->migrate("app", kV2).ok());
  Status s = open()->migrate("app", kV1);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(), label() + ": schema 'app' is at version 2, newer than this koi knows (1); run a newer "
                                   "koi, or use another database");
}

TEST_P(DatabaseTest, FailedMigrationLeavesNoTrace) {
  const Migration broken[] = {{1, "CREATE TABLE t(k TEXT); THIS IS NOT SQL"}};
  Status s = db_->migrate("app", broken);
  EXPECT_EQ(s.message().rfind(label() + ": migrate schema 'app' to version 1: ", 0), 0u) << s.message();
  EXPECT_EQ(column(*db_, "SELECT count(*) FROM schema_migrations"), std::vector<std::string>{"0"});
  ASSERT_TRUE(db_->migrate("app", kV1).ok());  // t did not survive the rollback
}

TEST_P(DatabaseTest, ReadOnlyRefusesWritesAndNeverMigrates) {
  ASSERT_TRUE(db_->migrate("app", kV1).ok());
  auto ro = open({.read_only = true, .must_exist = true});
  ASSERT_NE(ro, nullptr);
  EXPECT_FALSE(ro->exec("insert", "INSERT INTO t VALUES('x')").ok());
  EXPECT_TRUE(ro->migrate("app", kV1).ok());
  EXPECT_TRUE(ro->migrate("app", kV2).ok());  // older than the code: checked, not changed
  EXPECT_EQ(column(*ro, "SELECT count(*) FROM schema_migrations"), std::vector<std::string>{"1"});
}

TEST_P(DatabaseTest, StatementsOfManyThreadsAllLand) {
  ASSERT_TRUE(db_->exec("create", "CREATE TABLE t(k BIGINT)").ok());
  constexpr int kThreads = 4, kPerThread = 50;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        EXPECT_TRUE(db_->transaction([&] {
          return db_->exec("insert", "INSERT INTO t VALUES(?)", {int64_t{t * kPerThread + i}});
        }).ok());
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(column(*db_, "SELECT count(DISTINCT k) FROM t"), std::vector<std::string>{"200"});
}

// The PostgreSQL cases exist only when a server is named, so the unit tier (run without
// one) neither skips nor fakes them: tests/store_postgres.py runs them against a real server.
std::vector<Backend> backends() {
  if (std::getenv("KOI_TEST_POSTGRES_URL") == nullptr) return {Backend::kSqlite};
  return {Backend::kSqlite, Backend::kPostgres};
}

INSTANTIATE_TEST_SUITE_P(Backends, DatabaseTest, ::testing::ValuesIn(backends()),
                         [](const auto& info) { return info.param == Backend::kSqlite ? "Sqlite" : "Postgres"; });

class SqliteOpenTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = *make_temp_dir("koi-store"); }
  void TearDown() override { remove_all(dir_); }
  std::string dir_;
};

TEST_F(SqliteOpenTest, MustExistDoesNotCreateAMissingFile) {
  const std::string path = path_join(dir_, "typo.db");
  auto db = Database::open("usage ledger", path, {.read_only = true, .must_exist = true});
  ASSERT_FALSE(db.ok());
  EXPECT_EQ(db.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(db.status().message(), "usage ledger " + path + ": no such database file; check the path");
  EXPECT_FALSE(file_exists(path));
}

TEST_F(SqliteOpenTest, PlainPathAndSqliteUrlAreTheSameFileInWalMode) {
  const std::string path = path_join(dir_, "a.db");
  {
    auto db = Database::open("s", path);
    ASSERT_TRUE(db.ok());
    EXPECT_EQ((*db)->backend(), Backend::kSqlite);
    EXPECT_EQ((*db)->label(), "s " + path);
    ASSERT_TRUE((*db)->exec("create", "CREATE TABLE t(x INTEGER)").ok());
    auto mode = (*db)->query("mode", "PRAGMA journal_mode");
    ASSERT_TRUE(mode.ok());
    EXPECT_EQ((*mode)[0].text(0), "wal");
    auto sync = (*db)->query("sync", "PRAGMA synchronous");
    EXPECT_EQ((*sync)[0].int64(0), 1);  // NORMAL
  }
  auto db = Database::open("s", "sqlite:" + path);
  ASSERT_TRUE(db.ok());
  EXPECT_TRUE((*db)->exec("insert", "INSERT INTO t VALUES(1)").ok());
}

TEST_F(SqliteOpenTest, UnopenablePathNamesIt) {
  auto db = Database::open("usage ledger", "/nonexistent-dir/ledger.db");
  EXPECT_EQ(db.status().message(),
            "usage ledger /nonexistent-dir/ledger.db: cannot open: unable to open database file; check that the "
            "directory exists and is writable");
}

TEST(PostgresOpen, UnreachableServerIsUnavailable) {
  // Port 1 on localhost: nothing listens there.
  auto db = Database::open("usage ledger", "postgres://koi@127.0.0.1:1/postgres?connect_timeout=5");
  ASSERT_FALSE(db.ok());
  EXPECT_EQ(db.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(db.status().message().rfind("usage ledger (postgres): cannot connect: ", 0), 0u) << db.status().message();
}

TEST(Placeholders, QuestionMarksBecomeNumberedOutsideQuotes) {
  EXPECT_EQ(postgres_placeholders("SELECT ? , '?', \"a?\", 'it''s ?' WHERE x = ?"),
            "SELECT $1 , '?', \"a?\", 'it''s ?' WHERE x = $2");
}

}  // namespace
}  // namespace koi::store
