// API keys, the SQLite ledger and its batching writer, and the usage report.
#include <gtest/gtest.h>

#include <sqlite3.h>

#include <future>

#include "base/file.h"
#include "gateway/api_keys.h"
#include "gateway/usage_report.h"
#include "gateway/usage_store.h"

namespace koi::gateway {
namespace {

TEST(ApiKeys, IssuedKeyVerifiesAndWrongOrMalformedKeysDoNot) {
  IssuedKey k = issue_key("acme");
  ASSERT_TRUE(validate_key_hash(k.record.hash).ok());
  EXPECT_EQ(k.key.find(k.record.id), 4u);
  EXPECT_EQ(k.record.hash.find(k.key.substr(13)), std::string::npos);  // the secret is not stored
  KeyRing ring;
  ring.put(k.record);
  ASSERT_TRUE(ring.verify(k.key).has_value());
  EXPECT_EQ(ring.verify(k.key)->tenant, "acme");
  std::string wrong = k.key;
  wrong.back() = wrong.back() == '0' ? '1' : '0';
  EXPECT_FALSE(ring.verify(wrong).has_value());
  EXPECT_FALSE(ring.verify("koi-short").has_value());
  EXPECT_FALSE(ring.verify("").has_value());
  EXPECT_TRUE(ring.revoke(k.record.id));
  EXPECT_FALSE(ring.verify(k.key).has_value());
}

TEST(ApiKeys, HashIsSaltedSha256) {
  // sha256("00112233445566778899aabbccddeeff" "secret"), computed with sha256sum.
  EXPECT_EQ(hash_secret("00112233445566778899aabbccddeeff", "secret"),
            "sha256:00112233445566778899aabbccddeeff:"
            "a646118b31dc9839381df254dd210eedac8fb69a7207c3946ed58a9d8d0320a0");
}

UsageRecord record(std::string id, std::string tenant, int64_t prompt, int64_t completion, int64_t start_ms, int status = 200) {
  UsageRecord r;
  r.request_id = std::move(id), r.tenant = std::move(tenant), r.key_id = "k1", r.model = "m", r.version = "v1";
  r.replica = "http://127.0.0.1:1", r.prompt_tokens = prompt, r.completion_tokens = completion, r.status = status;
  r.start_unix_ms = start_ms, r.ttft_ms = 1.5, r.latency_ms = 2.5;
  return r;
}

class SqliteStoreTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = *make_temp_dir("koi-ledger"); }
  void TearDown() override { remove_all(dir_); }
  std::string path() const { return path_join(dir_, "ledger.db"); }
  std::string dir_;
};

TEST_F(SqliteStoreTest, AppendIsIdempotentByRequestIdAndQueriesFilter) {
  auto store = open_store("sqlite:" + path());
  ASSERT_TRUE(store.ok()) << store.status().message();
  std::vector<UsageRecord> batch{record("r1", "acme", 10, 5, 1000), record("r2", "beta", 7, 3, 2000)};
  ASSERT_TRUE((*store)->append(batch).ok());
  ASSERT_TRUE((*store)->append(batch).ok());  // a retried batch: no duplicates
  auto all = (*store)->query("", 0);
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].request_id, "r1");
  EXPECT_EQ((*all)[0].completion_tokens, 5);
  EXPECT_DOUBLE_EQ((*all)[0].ttft_ms, 1.5);
  EXPECT_EQ((*store)->query("beta", 0)->size(), 1u);
  EXPECT_EQ((*store)->query("", 1500)->size(), 1u);
}

TEST_F(SqliteStoreTest, RecordsAndKeysSurviveReopening) {
  {
    auto store = open_store(path());
    ASSERT_TRUE(store.ok());
    ASSERT_TRUE((*store)->append(std::vector<UsageRecord>{record("r1", "acme", 1, 2, 3)}).ok());
    ASSERT_TRUE((*store)->put_key({"aa", "acme", "sha256:x"}).ok());
    ASSERT_TRUE((*store)->revoke_key("bb").ok());
  }
  auto store = open_store(path());
  ASSERT_TRUE(store.ok());
  EXPECT_EQ((*store)->query("acme", 0)->size(), 1u);
  auto keys = (*store)->load_keys();
  ASSERT_TRUE(keys.ok());
  ASSERT_EQ(keys->size(), 2u);
  EXPECT_EQ((*keys)[0].record.tenant, "acme");
  EXPECT_FALSE((*keys)[0].revoked);
  EXPECT_TRUE((*keys)[1].revoked);
}

TEST_F(SqliteStoreTest, AnOlderLedgerGainsTheAdminTablesAndTheyRoundTrip) {
  {  // a ledger from before the admin tables, with one key
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path().c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db, "CREATE TABLE api_keys(id TEXT PRIMARY KEY, tenant TEXT NOT NULL, hash TEXT NOT NULL, "
                               "revoked INTEGER NOT NULL DEFAULT 0); INSERT INTO api_keys VALUES('aa', 'acme', 'sha256:x', 0);",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(db);
  }
  {
    auto store = open_store(path());
    ASSERT_TRUE(store.ok()) << store.status().message();
    auto empty = (*store)->load_admin_state();
    ASSERT_TRUE(empty.ok()) << empty.status().message();
    EXPECT_TRUE(empty->tenants.empty() && empty->weights.empty() && empty->replicas.empty());
    TenantConfig t{"acme", 2.5, 1000, 3, Priority::kLow, {"m", "n"}, {}};
    ASSERT_TRUE((*store)->put_tenant(t).ok());
    t.rpm = 7;  // replaces the row
    ASSERT_TRUE((*store)->put_tenant(t).ok());
    ASSERT_TRUE((*store)->put_weights(std::vector<StoredWeight>{{"m", "v1", 0.1}, {"m", "v2", 99.9}}).ok());
    ASSERT_TRUE((*store)->put_replica({"m", "v1", "http://127.0.0.1:9001", true}).ok());
    ASSERT_TRUE((*store)->put_replica({"m", "v3", "http://127.0.0.1:9004", false}).ok());
  }
  auto store = open_store(path());
  ASSERT_TRUE(store.ok());
  EXPECT_EQ((*store)->load_keys()->size(), 1u);
  auto state = (*store)->load_admin_state();
  ASSERT_TRUE(state.ok());
  ASSERT_EQ(state->tenants.size(), 1u);
  const TenantConfig& t = state->tenants[0];
  EXPECT_EQ(t.name, "acme");
  EXPECT_EQ(t.rpm, 7);
  EXPECT_EQ(t.tpm, 1000);
  EXPECT_EQ(t.max_concurrency, 3);
  EXPECT_EQ(t.priority, Priority::kLow);
  EXPECT_EQ(t.models, (std::vector<std::string>{"m", "n"}));
  ASSERT_EQ(state->weights.size(), 2u);
  EXPECT_EQ(state->weights[0].weight, 0.1);
  EXPECT_EQ(state->weights[1].weight, 99.9);
  ASSERT_EQ(state->replicas.size(), 2u);
  EXPECT_TRUE(state->replicas[0].removed);
  EXPECT_EQ(state->replicas[1].url, "http://127.0.0.1:9004");
  EXPECT_FALSE(state->replicas[1].removed);
}

TEST_F(SqliteStoreTest, OpenFailureNamesThePath) {
  auto store = open_store("/nonexistent-dir/ledger.db");
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().message(),
            "usage ledger /nonexistent-dir/ledger.db: cannot open: unable to open database file; check that the "
            "directory exists and is writable");
}

// `koi gateway usage --store typo.db` used to create an empty ledger and report nothing.
TEST_F(SqliteStoreTest, ReadOnlyOpenOfAMissingLedgerFailsAndCreatesNothing) {
  auto store = open_store(path(), {.read_only = true, .must_exist = true});
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().message(), "usage ledger " + path() + ": no such database file; check the path");
  EXPECT_FALSE(file_exists(path()));
  ASSERT_TRUE(open_store(path()).ok());
  store = open_store(path(), {.read_only = true, .must_exist = true});
  ASSERT_TRUE(store.ok()) << store.status().message();
  EXPECT_TRUE((*store)->query("", 0)->empty());
  EXPECT_FALSE((*store)->append(std::vector<UsageRecord>{record("r1", "acme", 1, 2, 3)}).ok());
}

// A ledger written before schema versions existed (its tables, no schema_migrations) is
// adopted as version 1 with its rows.
TEST_F(SqliteStoreTest, LedgerFromBeforeSchemaVersionsIsAdopted) {
  {
    auto db = store::Database::open("old ledger", path());
    ASSERT_TRUE(db.ok());
    ASSERT_TRUE((*db)->exec_script("old schema", R"sql(
      CREATE TABLE usage(
        request_id TEXT PRIMARY KEY, tenant TEXT NOT NULL, key_id TEXT NOT NULL, model TEXT NOT NULL,
        version TEXT NOT NULL, replica TEXT NOT NULL, prompt_tokens INTEGER NOT NULL,
        completion_tokens INTEGER NOT NULL, cached_tokens INTEGER NOT NULL, status INTEGER NOT NULL,
        stream INTEGER NOT NULL, start_unix_ms INTEGER NOT NULL, ttft_ms REAL NOT NULL, latency_ms REAL NOT NULL);
      CREATE TABLE api_keys(id TEXT PRIMARY KEY, tenant TEXT NOT NULL, hash TEXT NOT NULL, revoked INTEGER NOT NULL DEFAULT 0);
      INSERT INTO usage VALUES('old', 'acme', 'k', 'm', 'v1', 'r', 1, 2, 0, 200, 1, 5, 1.5, 2.5);)sql").ok());
  }
  auto store = open_store(path());
  ASSERT_TRUE(store.ok()) << store.status().message();
  auto all = (*store)->query("", 0);
  ASSERT_EQ(all->size(), 1u);
  EXPECT_EQ((*all)[0].request_id, "old");
  EXPECT_TRUE((*all)[0].stream);
  auto db = store::Database::open("ledger", path());
  auto versions = (*db)->query("read", "SELECT schema_name, version FROM schema_migrations ORDER BY version");
  ASSERT_EQ(versions->size(), 2u);  // adopted as v1, then v2 (the admin tables) applied
  EXPECT_EQ((*versions)[0].text(0), "gateway");
  EXPECT_EQ((*versions)[0].int64(1), 1);
  EXPECT_EQ((*versions)[1].int64(1), 2);
}

TEST_F(SqliteStoreTest, LedgerCommitsEveryRecordOnceAndCallsBack) {
  std::atomic<int> done{0};
  {
    Ledger ledger(std::move(open_store(path()).value()));
    for (int i = 0; i < 500; ++i) {
      ledger.submit(record("r" + std::to_string(i % 400), "acme", 1, 1, i), [&](const Status& s) { done += s.ok(); });
    }
  }  // the destructor drains the queue
  EXPECT_EQ(done.load(), 500);
  EXPECT_EQ((*open_store(path()))->query("", 0)->size(), 400u);
}

TEST(UsageReport, SumsPerTenantModelVersionAndPrices) {
  ModelConfig m;
  m.name = "m", m.prompt_price_per_1k = 1.0, m.completion_price_per_1k = 2.0;
  auto rows = summarize_usage({record("a", "acme", 1000, 500, 0), record("b", "acme", 500, 0, 0, 429)}, {m});
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].requests, 2);
  EXPECT_EQ(rows[0].errors, 1);
  EXPECT_EQ(rows[0].prompt_tokens, 1500);
  EXPECT_DOUBLE_EQ(rows[0].cost, 1.5 + 1.0);
  EXPECT_NE(format_usage(rows).find("total"), std::string::npos);
}

TEST(UsageReport, ParseSince) {
  EXPECT_EQ(*parse_since("2026-01-02", 0), 1767312000000);
  EXPECT_EQ(*parse_since("2026-01-02T00:00:10", 0), 1767312010000);
  EXPECT_EQ(*parse_since("2h", 10000000), 10000000 - 7200000);
  EXPECT_EQ(*parse_since("12345", 0), 12345);
  EXPECT_EQ(parse_since("yesterday", 0).status().message(),
            "--since 'yesterday' is not a date (2026-11-29, 2026-11-29T10:00:00), a duration (90s, 15m, 2h, 7d) or Unix ms");
}

}  // namespace
}  // namespace koi::gateway
