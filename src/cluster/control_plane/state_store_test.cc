#include "cluster/control_plane/state_store.h"

#include <boost/json.hpp>
#include <vector>

#include <gtest/gtest.h>

#include <cstdlib>

#include "base/file.h"

namespace koi::cluster {
namespace {

// Against SQLite always, and against PostgreSQL when KOI_TEST_POSTGRES_URL names a server
// (tests/store_postgres.py starts one; cluster.cmake runs this binary under it).
class StateStoreTest : public ::testing::TestWithParam<store::Backend> {
 protected:
  void SetUp() override {
    dir_ = *make_temp_dir("koi-cp-store");
    url_ = "sqlite:" + dir_ + "/cp.db";
    if (GetParam() == store::Backend::kPostgres) {
      url_ = std::getenv("KOI_TEST_POSTGRES_URL");
      auto db = store::Database::open("reset", url_);
      ASSERT_TRUE(db.ok()) << db.status().message();
      ASSERT_TRUE((*db)->exec_script("reset", "DROP TABLE IF EXISTS cluster_objects; DROP TABLE IF EXISTS cluster_events; "
                                              "DROP TABLE IF EXISTS cluster_changes; DROP TABLE IF EXISTS cluster_meta; "
                                              "DROP TABLE IF EXISTS cluster_tokens; DROP TABLE IF EXISTS schema_migrations")
                      .ok());
    }
    auto s = StateStore::open(url_);
    ASSERT_TRUE(s.ok()) << s.status().message();
    store_ = std::move(*s);
  }
  void TearDown() override {
    store_.reset();
    remove_all(dir_);
  }
  JobObject job(const std::string& name) {
    auto j = parse_job_manifest("apiVersion: koi/v1\nkind: Job\nmetadata: {name: " + name + "}\nspec: {command: [true]}\n",
                                "alpha");
    return *j;
  }
  Event ev(const std::string& name, const std::string& reason) {
    Event e;
    e.ns = "alpha", e.name = name, e.time = 1, e.reason = reason, e.message = reason + " message";
    return e;
  }
  std::string dir_, url_;
  std::unique_ptr<StateStore> store_;
};

TEST_P(StateStoreTest, RoundTripWithEventsAndChanges) {
  JobObject j = job("a");
  ASSERT_TRUE(store_->create_job(&j, {ev("a", "Submitted")}).ok());
  EXPECT_EQ(j.metadata.resource_version, 1);
  EXPECT_FALSE(j.metadata.uid.empty());
  j.status.phase = JobPhase::kRunning;
  j.status.restarts = 2;
  ASSERT_TRUE(store_->update_job(&j, {ev("a", "Started"), ev("a", "Other")}).ok());
  EXPECT_EQ(j.metadata.resource_version, 3);  // the submit event took 2

  auto got = store_->get_job("alpha", "a");
  ASSERT_TRUE(got.ok() && got->has_value());
  // (Through JSON text: Boost.JSON 1.81 parses doubles to within an ulp, not exactly.)
  EXPECT_EQ(job_json_text(**got), job_json_text(*job_from_text(job_json_text(j))));
  auto events = store_->events("Job", "alpha", "a");
  ASSERT_TRUE(events.ok());
  ASSERT_EQ(events->size(), 3u);
  EXPECT_EQ((*events)[0].reason, "Submitted");
  EXPECT_EQ((*events)[2].reason, "Other");
  EXPECT_EQ((*events)[2].resource_version, 5);

  auto changes = store_->changes(0, "alpha", 100);
  ASSERT_TRUE(changes.ok());
  std::vector<std::string> types;
  for (const Change& c : *changes) types.push_back(c.type + ":" + std::to_string(c.resource_version));
  EXPECT_EQ(types, (std::vector<std::string>{"ADDED:1", "EVENT:2", "MODIFIED:3", "EVENT:4", "EVENT:5"}));
  auto later = store_->changes(3, "", 100);
  ASSERT_TRUE(later.ok());
  EXPECT_EQ(later->size(), 2u);
  EXPECT_TRUE(store_->changes(0, "beta", 100)->empty());
}

TEST_P(StateStoreTest, StaleWriteIsAConflictAndChangesNothing) {
  JobObject j = job("a");
  ASSERT_TRUE(store_->create_job(&j, {}).ok());
  JobObject stale = j;
  j.status.message = "first";
  ASSERT_TRUE(store_->update_job(&j, {}).ok());
  stale.status.message = "second";
  Status s = store_->update_job(&stale, {ev("a", "Lost")});
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(),
            "conflict: job alpha/a is at resourceVersion 2, the write was based on 1; read it again and retry");
  EXPECT_EQ(stale.metadata.resource_version, 1);  // unchanged on failure
  EXPECT_EQ((*store_->get_job("alpha", "a"))->status.message, "first");
  EXPECT_TRUE(store_->events("Job", "alpha", "a")->empty());  // the failed write's event did not commit
}

TEST_P(StateStoreTest, DuplicateNamesAndMissingJobs) {
  JobObject a = job("a"), again = job("a");
  ASSERT_TRUE(store_->create_job(&a, {}).ok());
  EXPECT_EQ(store_->create_job(&again, {}).code(), StatusCode::kAlreadyExists);
  JobObject missing = job("zz");
  EXPECT_EQ(store_->update_job(&missing, {}).code(), StatusCode::kNotFound);
  EXPECT_FALSE(store_->get_job("beta", "a")->has_value());
}

TEST_P(StateStoreTest, ListsActiveJobsInSubmissionOrderAndSurvivesReopen) {
  for (const char* n : {"c", "a", "b"}) {
    JobObject j = job(n);
    ASSERT_TRUE(store_->create_job(&j, {}).ok());
  }
  JobObject a = **store_->get_job("alpha", "a");
  a.status.phase = JobPhase::kSucceeded;
  ASSERT_TRUE(store_->update_job(&a, {}).ok());
  store_.reset();
  auto opened = StateStore::open(url_);
    store_ = std::move(opened).value();
  auto active = store_->list_jobs("alpha", true);
  ASSERT_TRUE(active.ok());
  ASSERT_EQ(active->size(), 2u);
  EXPECT_EQ((*active)[0].metadata.name, "c");
  EXPECT_EQ((*active)[1].metadata.name, "b");
  EXPECT_EQ(store_->list_jobs("", false)->size(), 3u);
  EXPECT_EQ(*store_->current_version(), 4);
}

TEST_P(StateStoreTest, ActiveJobVersionsFollowEveryWrite) {
  for (const char* n : {"c", "a", "b"}) {
    JobObject j = job(n);
    ASSERT_TRUE(store_->create_job(&j, {}).ok());
  }
  JobObject c = **store_->get_job("alpha", "c");
  c.metadata.deletion_timestamp = "2026-12-01T00:00:00Z";  // a cancel: a new resourceVersion
  ASSERT_TRUE(store_->update_job(&c, {}).ok());
  JobObject a = **store_->get_job("alpha", "a");
  a.status.phase = JobPhase::kFailed;  // no longer active
  ASSERT_TRUE(store_->update_job(&a, {}).ok());
  auto versions = store_->active_job_versions();
  ASSERT_TRUE(versions.ok()) << versions.status().message();
  ASSERT_EQ(versions->size(), 2u);  // in resourceVersion order
  EXPECT_EQ((*versions)[0].name, "b");
  EXPECT_EQ((*versions)[1].name, "c");
  EXPECT_EQ((*versions)[1].ns, "alpha");
  EXPECT_EQ((*versions)[1].resource_version, c.metadata.resource_version);
  auto listed = store_->list_jobs("", true);  // in submission order
  EXPECT_EQ((*listed)[0].metadata.name, "c");
  EXPECT_EQ((*listed)[0].metadata.resource_version, (*versions)[1].resource_version);
}

// The PostgreSQL cases exist only when a server is named (cluster_store_postgres runs them
// against a real one), so the unit tier neither skips nor fakes them.
std::vector<store::Backend> backends() {
  if (std::getenv("KOI_TEST_POSTGRES_URL") == nullptr) return {store::Backend::kSqlite};
  return {store::Backend::kSqlite, store::Backend::kPostgres};
}

TEST_P(StateStoreTest, AnyKindIsKeptVersionedAndWatched) {
  StoredObject m;
  m.kind = "Model";
  m.metadata.name = "fortunes";
  m.metadata.ns = "alpha";
  m.body["spec"] = boost::json::object{{"description", "small"}};
  m.body["status"] = boost::json::object{{"phase", "Ready"}};
  m.phase = "Ready";
  ASSERT_TRUE(store_->create(&m, {}).ok());
  EXPECT_EQ(m.metadata.resource_version, 1);
  StoredObject again = m;
  EXPECT_EQ(store_->create(&again, {}).code(), StatusCode::kAlreadyExists);

  auto got = store_->get("Model", "alpha", "fortunes");
  ASSERT_TRUE(got.ok() && got->has_value());
  EXPECT_EQ((*got)->metadata.uid, m.metadata.uid);
  EXPECT_EQ((*got)->phase, "Ready");
  EXPECT_EQ((*got)->body.at("spec").at("description").as_string(), "small");
  EXPECT_FALSE(store_->get("Model", "beta", "fortunes")->has_value());
  EXPECT_FALSE(store_->get("Deployment", "alpha", "fortunes")->has_value());  // kinds do not mix

  StoredObject stale = **got;
  (*got)->body["status"] = boost::json::object{{"phase", "Retired"}};
  (*got)->phase = "Retired";
  ASSERT_TRUE(store_->update(&**got, {}).ok());
  EXPECT_EQ((*got)->metadata.resource_version, 2);
  EXPECT_EQ(store_->update(&stale, {}).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(stale.metadata.resource_version, 1);  // unchanged by the refused write

  StoredObject other = m;
  other.metadata = {};
  other.metadata.name = "other";
  other.metadata.ns = "alpha";
  other.phase = "Ready";
  ASSERT_TRUE(store_->create(&other, {}).ok());
  auto active = store_->list("Model", "alpha", {"Retired"});
  ASSERT_TRUE(active.ok());
  ASSERT_EQ(active->size(), 1u);
  EXPECT_EQ((*active)[0].metadata.name, "other");
  EXPECT_EQ(store_->list("Model", "", {})->size(), 2u);

  EXPECT_EQ(store_->remove(**got, 1, {}).code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(store_->remove(**got, 2, {ev("fortunes", "Deleted")}).ok());
  EXPECT_FALSE(store_->get("Model", "alpha", "fortunes")->has_value());
  auto changes = store_->changes(0, "alpha", 100);
  ASSERT_TRUE(changes.ok());
  std::vector<std::string> types;
  for (const Change& c : *changes) types.push_back(c.type + " " + c.kind);
  EXPECT_EQ(types, (std::vector<std::string>{"ADDED Model", "MODIFIED Model", "ADDED Model", "DELETED Model", "EVENT Event"}));
}

INSTANTIATE_TEST_SUITE_P(Backends, StateStoreTest, ::testing::ValuesIn(backends()),
                         [](const ::testing::TestParamInfo<store::Backend>& info) {
                           return info.param == store::Backend::kSqlite ? "Sqlite" : "Postgres";
                         });

}  // namespace
}  // namespace koi::cluster
