#include "cluster/control_plane/state_store.h"

#include <fmt/format.h>

#include <boost/json.hpp>
#include <algorithm>
#include <random>

namespace koi::cluster {
namespace json = boost::json;

namespace {

constexpr std::string_view kSchemaV1 = R"sql(
CREATE TABLE cluster_objects (
  kind TEXT NOT NULL, namespace TEXT NOT NULL, name TEXT NOT NULL,
  uid TEXT NOT NULL, resource_version BIGINT NOT NULL, phase TEXT NOT NULL, body TEXT NOT NULL,
  PRIMARY KEY (kind, namespace, name));
CREATE INDEX cluster_objects_phase ON cluster_objects (kind, phase);
CREATE TABLE cluster_events (
  resource_version BIGINT PRIMARY KEY, kind TEXT NOT NULL, namespace TEXT NOT NULL, name TEXT NOT NULL,
  time DOUBLE PRECISION NOT NULL, type TEXT NOT NULL, reason TEXT NOT NULL, message TEXT NOT NULL);
CREATE INDEX cluster_events_object ON cluster_events (kind, namespace, name);
CREATE TABLE cluster_changes (
  resource_version BIGINT PRIMARY KEY, type TEXT NOT NULL, kind TEXT NOT NULL, namespace TEXT NOT NULL,
  name TEXT NOT NULL, body TEXT NOT NULL);
CREATE TABLE cluster_meta (key TEXT PRIMARY KEY, value BIGINT NOT NULL);
INSERT INTO cluster_meta (key, value) VALUES ('resource_version', 0);
CREATE TABLE cluster_tokens (sha256 TEXT PRIMARY KEY, principal TEXT NOT NULL, admin BIGINT NOT NULL);
)sql";

constexpr store::Migration kMigrations[] = {{1, kSchemaV1}};

std::string new_uid() {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  const uint64_t a = rng(), b = rng();
  return fmt::format("{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}", a >> 32, (a >> 16) & 0xffff, a & 0xfff,
                     0x8000 | (b >> 48 & 0x3fff), b & 0xffffffffffffULL);
}

Status conflict(const JobObject& job, int64_t current) {
  return Status::failed_precondition(fmt::format(
      "conflict: job {}/{} is at resourceVersion {}, the write was based on {}; read it again and retry",
      job.metadata.ns, job.metadata.name, current, job.metadata.resource_version));
}

}  // namespace

std::string event_json(const Event& e) {
  return json::serialize(json::object{{"resourceVersion", std::to_string(e.resource_version)},
                                      {"involvedObject", json::object{{"kind", e.kind}, {"namespace", e.ns}, {"name", e.name}}},
                                      {"time", rfc3339(e.time)},
                                      {"timestamp", e.time},
                                      {"type", e.type},
                                      {"reason", e.reason},
                                      {"message", e.message}});
}

Result<std::unique_ptr<StateStore>> StateStore::open(const std::string& url) {
  KOI_ASSIGN_OR_RETURN(std::unique_ptr<store::Database> db, store::Database::open("cluster store", url));
  KOI_RETURN_IF_ERROR(db->migrate("cluster", kMigrations));
  return std::make_unique<StateStore>(std::move(db));
}

Result<int64_t> StateStore::next_version() {
  KOI_RETURN_IF_ERROR(db_->exec("bump resource version",
                                "UPDATE cluster_meta SET value = value + 1 WHERE key = 'resource_version'"));
  KOI_ASSIGN_OR_RETURN(auto rows, db_->query("read resource version",
                                             "SELECT value FROM cluster_meta WHERE key = 'resource_version'"));
  if (rows.empty()) return Status::corrupt("cluster store: the resource version counter is missing");
  return rows[0].int64(0);
}

Result<int64_t> StateStore::current_version() {
  KOI_ASSIGN_OR_RETURN(auto rows, db_->query("read resource version",
                                             "SELECT value FROM cluster_meta WHERE key = 'resource_version'"));
  return rows.empty() ? 0 : rows[0].int64(0);
}

Status StateStore::record_events(const std::vector<Event>& events) {
  for (Event e : events) {
    KOI_ASSIGN_OR_RETURN(e.resource_version, next_version());
    KOI_RETURN_IF_ERROR(db_->exec("insert event",
                                  "INSERT INTO cluster_events (resource_version, kind, namespace, name, time, type, "
                                  "reason, message) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                                  {e.resource_version, e.kind, e.ns, e.name, e.time, e.type, e.reason, e.message}));
    KOI_RETURN_IF_ERROR(db_->exec("insert change",
                                  "INSERT INTO cluster_changes (resource_version, type, kind, namespace, name, body) "
                                  "VALUES (?, 'EVENT', 'Event', ?, ?, ?)",
                                  {e.resource_version, e.ns, e.name, event_json(e)}));
  }
  return ok_status();
}

Status StateStore::create_job(JobObject* job, const std::vector<Event>& events) {
  return db_->transaction([&]() -> Status {
    KOI_ASSIGN_OR_RETURN(auto rows, db_->query("find job",
                                               "SELECT resource_version FROM cluster_objects WHERE kind = 'Job' AND "
                                               "namespace = ? AND name = ?",
                                               {job->metadata.ns, job->metadata.name}));
    if (!rows.empty()) {
      return Status::already_exists(fmt::format("job {} already exists in namespace {}; pick another name or delete it first",
                                                job->metadata.name, job->metadata.ns));
    }
    KOI_ASSIGN_OR_RETURN(job->metadata.resource_version, next_version());
    job->metadata.uid = new_uid();
    job->metadata.creation_time = wall_seconds();
    job->metadata.creation_timestamp = rfc3339(job->metadata.creation_time);
    const std::string body = job_json_text(*job);
    KOI_RETURN_IF_ERROR(db_->exec("insert job",
                                  "INSERT INTO cluster_objects (kind, namespace, name, uid, resource_version, phase, body) "
                                  "VALUES ('Job', ?, ?, ?, ?, ?, ?)",
                                  {job->metadata.ns, job->metadata.name, job->metadata.uid,
                                   job->metadata.resource_version, std::string(phase_name(job->status.phase)), body}));
    KOI_RETURN_IF_ERROR(db_->exec("insert change",
                                  "INSERT INTO cluster_changes (resource_version, type, kind, namespace, name, body) "
                                  "VALUES (?, 'ADDED', 'Job', ?, ?, ?)",
                                  {job->metadata.resource_version, job->metadata.ns, job->metadata.name, body}));
    return record_events(events);
  });
}

Status StateStore::update_job(JobObject* job, const std::vector<Event>& events) {
  const int64_t expected = job->metadata.resource_version;
  Status s = db_->transaction([&]() -> Status {
    const char* sql = db_->backend() == store::Backend::kPostgres
                          ? "SELECT resource_version FROM cluster_objects WHERE kind = 'Job' AND namespace = ? AND name = ? FOR UPDATE"
                          : "SELECT resource_version FROM cluster_objects WHERE kind = 'Job' AND namespace = ? AND name = ?";
    KOI_ASSIGN_OR_RETURN(auto rows, db_->query("read job version", sql, {job->metadata.ns, job->metadata.name}));
    if (rows.empty()) return Status::not_found(fmt::format("job {} not found in namespace {}", job->metadata.name, job->metadata.ns));
    if (rows[0].int64(0) != expected) return conflict(*job, rows[0].int64(0));
    KOI_ASSIGN_OR_RETURN(job->metadata.resource_version, next_version());
    const std::string body = job_json_text(*job);
    KOI_RETURN_IF_ERROR(db_->exec("update job",
                                  "UPDATE cluster_objects SET resource_version = ?, phase = ?, body = ? WHERE kind = 'Job' "
                                  "AND namespace = ? AND name = ?",
                                  {job->metadata.resource_version, std::string(phase_name(job->status.phase)), body,
                                   job->metadata.ns, job->metadata.name}));
    KOI_RETURN_IF_ERROR(db_->exec("insert change",
                                  "INSERT INTO cluster_changes (resource_version, type, kind, namespace, name, body) "
                                  "VALUES (?, 'MODIFIED', 'Job', ?, ?, ?)",
                                  {job->metadata.resource_version, job->metadata.ns, job->metadata.name, body}));
    return record_events(events);
  });
  if (!s.ok()) job->metadata.resource_version = expected;
  return s;
}

Result<std::optional<JobObject>> StateStore::get_job(const std::string& ns, const std::string& name) {
  KOI_ASSIGN_OR_RETURN(auto rows, db_->query("get job",
                                             "SELECT body FROM cluster_objects WHERE kind = 'Job' AND namespace = ? AND name = ?",
                                             {ns, name}));
  if (rows.empty()) return std::optional<JobObject>();
  KOI_ASSIGN_OR_RETURN(JobObject job, job_from_text(rows[0].text(0)));
  return std::optional<JobObject>(std::move(job));
}

Result<std::vector<JobObject>> StateStore::list_jobs(const std::string& ns, bool active_only) {
  std::string sql = "SELECT body FROM cluster_objects WHERE kind = 'Job'";
  std::vector<store::Value> params;
  if (!ns.empty()) sql += " AND namespace = ?", params.push_back(ns);
  if (active_only) sql += " AND phase NOT IN ('Succeeded', 'Failed', 'Cancelled')";
  sql += " ORDER BY resource_version";
  KOI_ASSIGN_OR_RETURN(auto rows, db_->query("list jobs", sql, params));
  std::vector<JobObject> out;
  for (const auto& r : rows) {
    KOI_ASSIGN_OR_RETURN(JobObject job, job_from_text(r.text(0)));
    out.push_back(std::move(job));
  }
  std::stable_sort(out.begin(), out.end(), [](const JobObject& a, const JobObject& b) {
    return a.metadata.creation_time < b.metadata.creation_time;
  });
  return out;
}

Result<std::vector<Event>> StateStore::events(const std::string& kind, const std::string& ns, const std::string& name) {
  KOI_ASSIGN_OR_RETURN(auto rows, db_->query("list events",
                                             "SELECT resource_version, time, type, reason, message FROM cluster_events "
                                             "WHERE kind = ? AND namespace = ? AND name = ? ORDER BY resource_version",
                                             {kind, ns, name}));
  std::vector<Event> out;
  for (const auto& r : rows) {
    out.push_back({r.int64(0), kind, ns, name, r.real(1), r.text(2), r.text(3), r.text(4)});
  }
  return out;
}

Result<std::vector<Change>> StateStore::changes(int64_t after, const std::string& ns, int limit) {
  std::string sql = "SELECT resource_version, type, kind, namespace, name, body FROM cluster_changes WHERE resource_version > ?";
  std::vector<store::Value> params{after};
  if (!ns.empty()) sql += " AND namespace = ?", params.push_back(ns);
  sql += " ORDER BY resource_version LIMIT ?";
  params.push_back(static_cast<int64_t>(limit));
  KOI_ASSIGN_OR_RETURN(auto rows, db_->query("list changes", sql, params));
  std::vector<Change> out;
  for (const auto& r : rows) out.push_back({r.int64(0), r.text(1), r.text(2), r.text(3), r.text(4), r.text(5)});
  return out;
}

Status StateStore::sync_config(const ControlPlaneConfig& config) {
  return db_->transaction([&]() -> Status {
    KOI_RETURN_IF_ERROR(db_->exec("clear tokens", "DELETE FROM cluster_tokens"));
    for (const TokenEntry& t : config.tokens) {
      KOI_RETURN_IF_ERROR(db_->exec("insert token", "INSERT INTO cluster_tokens (sha256, principal, admin) VALUES (?, ?, ?)",
                                    {t.sha256_hex, t.principal.name, int64_t{t.principal.admin ? 1 : 0}}));
    }
    KOI_RETURN_IF_ERROR(db_->exec("clear inventory", "DELETE FROM cluster_objects WHERE kind IN ('Node', 'Queue')"));
    auto put = [&](const char* kind, const std::string& ns, const std::string& name, const json::value& v) -> Status {
      KOI_ASSIGN_OR_RETURN(int64_t rv, next_version());
      json::value body = v;
      body.as_object()["metadata"].as_object()["resourceVersion"] = std::to_string(rv);
      const std::string text = json::serialize(body);
      KOI_RETURN_IF_ERROR(db_->exec("insert object",
                                    "INSERT INTO cluster_objects (kind, namespace, name, uid, resource_version, phase, body) "
                                    "VALUES (?, ?, ?, ?, ?, '', ?)",
                                    {std::string(kind), ns, name, new_uid(), rv, text}));
      return db_->exec("insert change",
                       "INSERT INTO cluster_changes (resource_version, type, kind, namespace, name, body) VALUES (?, 'MODIFIED', ?, ?, ?, ?)",
                       {rv, std::string(kind), ns, name, text});
    };
    for (const NodeSpec& n : config.nodes) KOI_RETURN_IF_ERROR(put("Node", "", n.name, node_object_json(n)));
    for (const QueueSpec& q : config.queues) KOI_RETURN_IF_ERROR(put("Queue", q.tenant, q.name, queue_object_json(q)));
    return ok_status();
  });
}

Status StateStore::replace_object(const std::string& kind, const std::string& ns, const std::string& name,
                                  json::value body, const Event& event) {
  return db_->transaction([&]() -> Status {
    KOI_RETURN_IF_ERROR(db_->exec("delete object", "DELETE FROM cluster_objects WHERE kind = ? AND name = ?", {kind, name}));
    KOI_ASSIGN_OR_RETURN(int64_t rv, next_version());
    body.as_object()["metadata"].as_object()["resourceVersion"] = std::to_string(rv);
    const std::string text = json::serialize(body);
    KOI_RETURN_IF_ERROR(db_->exec("insert object",
                                  "INSERT INTO cluster_objects (kind, namespace, name, uid, resource_version, phase, body) "
                                  "VALUES (?, ?, ?, ?, ?, '', ?)",
                                  {kind, ns, name, new_uid(), rv, text}));
    KOI_RETURN_IF_ERROR(db_->exec("insert change",
                                  "INSERT INTO cluster_changes (resource_version, type, kind, namespace, name, body) "
                                  "VALUES (?, 'MODIFIED', ?, ?, ?, ?)",
                                  {rv, kind, ns, name, text}));
    return record_events({event});
  });
}

Status StateStore::put_queue(const QueueSpec& queue, const Event& event) {
  return replace_object("Queue", queue.tenant, queue.name, queue_object_json(queue), event);
}

Status StateStore::put_node(const NodeSpec& node, const Event& event) {
  return replace_object("Node", "", node.name, node_object_json(node), event);
}

Result<std::vector<TokenEntry>> StateStore::tokens() {
  KOI_ASSIGN_OR_RETURN(auto rows, db_->query("list tokens", "SELECT sha256, principal, admin FROM cluster_tokens"));
  std::vector<TokenEntry> out;
  for (const auto& r : rows) out.push_back({r.text(0), {r.text(1), r.int64(2) != 0}});
  return out;
}

}  // namespace koi::cluster
