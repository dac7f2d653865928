#include "cluster/control_plane/state_store.h"

#include <fmt/format.h>

#include <boost/json.hpp>
#include <algorithm>
#include <cctype>
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

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}


Status conflict(const std::string& kind, const ObjectMeta& meta, int64_t current) {
  return Status::failed_precondition(fmt::format(
      "conflict: {} {}/{} is at resourceVersion {}, the write was based on {}; read it again and retry",
      lower(kind), meta.ns, meta.name, current, meta.resource_version));
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

Status StateStore::insert_object(const std::string& kind, ObjectMeta* meta, const std::string& phase,
                                 const std::function<std::string()>& text, const std::vector<Event>& events) {
  return db_->transaction([&]() -> Status {
    KOI_ASSIGN_OR_RETURN(auto rows, db_->query("find object",
                                               "SELECT resource_version FROM cluster_objects WHERE kind = ? AND "
                                               "namespace = ? AND name = ?",
                                               {kind, meta->ns, meta->name}));
    if (!rows.empty()) {
      return Status::already_exists(fmt::format("{} {} already exists in namespace {}; pick another name or delete it first",
                                                lower(kind), meta->name, meta->ns));
    }
    KOI_ASSIGN_OR_RETURN(meta->resource_version, next_version());
    meta->uid = new_uid();
    meta->creation_time = wall_seconds();
    meta->creation_timestamp = rfc3339(meta->creation_time);
    const std::string body = text();
    KOI_RETURN_IF_ERROR(db_->exec("insert object",
                                  "INSERT INTO cluster_objects (kind, namespace, name, uid, resource_version, phase, body) "
                                  "VALUES (?, ?, ?, ?, ?, ?, ?)",
                                  {kind, meta->ns, meta->name, meta->uid, meta->resource_version, phase, body}));
    KOI_RETURN_IF_ERROR(db_->exec("insert change",
                                  "INSERT INTO cluster_changes (resource_version, type, kind, namespace, name, body) "
                                  "VALUES (?, 'ADDED', ?, ?, ?, ?)",
                                  {meta->resource_version, kind, meta->ns, meta->name, body}));
    return record_events(events);
  });
}

Status StateStore::update_object(const std::string& kind, ObjectMeta* meta, const std::string& phase,
                                 const std::function<std::string()>& text, const std::vector<Event>& events) {
  const int64_t expected = meta->resource_version;
  Status s = db_->transaction([&]() -> Status {
    const char* sql = db_->backend() == store::Backend::kPostgres
                          ? "SELECT resource_version FROM cluster_objects WHERE kind = ? AND namespace = ? AND name = ? FOR UPDATE"
                          : "SELECT resource_version FROM cluster_objects WHERE kind = ? AND namespace = ? AND name = ?";
    KOI_ASSIGN_OR_RETURN(auto rows, db_->query("read object version", sql, {kind, meta->ns, meta->name}));
    if (rows.empty()) return Status::not_found(fmt::format("{} {} not found in namespace {}", lower(kind), meta->name, meta->ns));
    if (rows[0].int64(0) != expected) return conflict(kind, *meta, rows[0].int64(0));
    KOI_ASSIGN_OR_RETURN(meta->resource_version, next_version());
    const std::string body = text();
    KOI_RETURN_IF_ERROR(db_->exec("update object",
                                  "UPDATE cluster_objects SET resource_version = ?, phase = ?, body = ? WHERE kind = ? "
                                  "AND namespace = ? AND name = ?",
                                  {meta->resource_version, phase, body, kind, meta->ns, meta->name}));
    KOI_RETURN_IF_ERROR(db_->exec("insert change",
                                  "INSERT INTO cluster_changes (resource_version, type, kind, namespace, name, body) "
                                  "VALUES (?, 'MODIFIED', ?, ?, ?, ?)",
                                  {meta->resource_version, kind, meta->ns, meta->name, body}));
    return record_events(events);
  });
  if (!s.ok()) meta->resource_version = expected;
  return s;
}

Result<std::vector<std::string>> StateStore::bodies(const std::string& kind, const std::string& ns,
                                                    const std::vector<std::string>& phases_excluded) {
  std::string sql = "SELECT body FROM cluster_objects WHERE kind = ?";
  std::vector<store::Value> params{kind};
  if (!ns.empty()) sql += " AND namespace = ?", params.push_back(ns);
  if (!phases_excluded.empty()) {
    sql += " AND phase NOT IN (";
    for (size_t i = 0; i < phases_excluded.size(); ++i) {
      sql += i ? ", ?" : "?";
      params.push_back(phases_excluded[i]);
    }
    sql += ")";
  }
  sql += " ORDER BY resource_version";
  KOI_ASSIGN_OR_RETURN(auto rows, db_->query("list " + lower(kind) + "s", sql, params));
  std::vector<std::string> out;
  out.reserve(rows.size());
  for (const auto& r : rows) out.push_back(r.text(0));
  return out;
}

Result<std::vector<StateStore::Version>> StateStore::active_job_versions() {
  KOI_ASSIGN_OR_RETURN(auto rows, db_->query("list job versions",
                                             "SELECT namespace, name, resource_version FROM cluster_objects WHERE kind = "
                                             "'Job' AND phase NOT IN ('Succeeded', 'Failed', 'Cancelled') ORDER BY "
                                             "resource_version"));
  std::vector<Version> out;
  out.reserve(rows.size());
  for (const auto& r : rows) out.push_back({r.text(0), r.text(1), r.int64(2)});
  return out;
}

Status StateStore::create_job(JobObject* job, const std::vector<Event>& events) {
  return insert_object("Job", &job->metadata, std::string(phase_name(job->status.phase)),
                       [&] { return job_json_text(*job); }, events);
}

Status StateStore::update_job(JobObject* job, const std::vector<Event>& events) {
  return update_object("Job", &job->metadata, std::string(phase_name(job->status.phase)),
                       [&] { return job_json_text(*job); }, events);
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
  std::vector<std::string> excluded;
  if (active_only) excluded = {"Succeeded", "Failed", "Cancelled"};
  KOI_ASSIGN_OR_RETURN(std::vector<std::string> texts, bodies("Job", ns, excluded));
  std::vector<JobObject> out;
  for (const std::string& t : texts) {
    KOI_ASSIGN_OR_RETURN(JobObject job, job_from_text(t));
    out.push_back(std::move(job));
  }
  std::stable_sort(out.begin(), out.end(), [](const JobObject& a, const JobObject& b) {
    return a.metadata.creation_time < b.metadata.creation_time;
  });
  return out;
}

json::object StoredObject::to_json() const {
  json::object o{{"apiVersion", kApiVersion}, {"kind", kind}, {"metadata", meta_json(metadata)}};
  for (const auto& [k, v] : body) o[k] = v;
  return o;
}

Result<StoredObject> StoredObject::from_json(const json::value& v) {
  if (!v.is_object()) return Status::corrupt("stored object is not a JSON object");
  StoredObject obj;
  for (const auto& [k, val] : v.as_object()) {
    if (k == "apiVersion") continue;
    if (k == "kind") {
      if (!val.is_string()) return Status::corrupt("stored object: kind is not a string");
      obj.kind = std::string(val.as_string());
    } else if (k == "metadata") {
      if (!val.is_object()) return Status::corrupt("stored object: metadata is not an object");
      obj.metadata = meta_from_json(val.as_object());
    } else {
      obj.body[k] = val;
    }
  }
  if (const json::value* st = obj.body.if_contains("status"); st && st->is_object()) {
    if (const json::value* ph = st->as_object().if_contains("phase"); ph && ph->is_string()) {
      obj.phase = std::string(ph->as_string());
    }
  }
  return obj;
}

Status StateStore::create(StoredObject* obj, const std::vector<Event>& events) {
  return insert_object(obj->kind, &obj->metadata, obj->phase, [&] { return json::serialize(obj->to_json()); }, events);
}

Status StateStore::update(StoredObject* obj, const std::vector<Event>& events) {
  return update_object(obj->kind, &obj->metadata, obj->phase, [&] { return json::serialize(obj->to_json()); }, events);
}

Status StateStore::remove(const StoredObject& obj, int64_t expected_version, const std::vector<Event>& events) {
  return db_->transaction([&]() -> Status {
    KOI_ASSIGN_OR_RETURN(auto rows, db_->query("read object version",
                                               "SELECT resource_version FROM cluster_objects WHERE kind = ? AND "
                                               "namespace = ? AND name = ?",
                                               {obj.kind, obj.metadata.ns, obj.metadata.name}));
    if (rows.empty()) {
      return Status::not_found(fmt::format("{} {} not found in namespace {}", lower(obj.kind), obj.metadata.name, obj.metadata.ns));
    }
    if (expected_version != 0 && rows[0].int64(0) != expected_version) {
      ObjectMeta m = obj.metadata;
      m.resource_version = expected_version;
      return conflict(obj.kind, m, rows[0].int64(0));
    }
    KOI_ASSIGN_OR_RETURN(int64_t rv, next_version());
    KOI_RETURN_IF_ERROR(db_->exec("delete object", "DELETE FROM cluster_objects WHERE kind = ? AND namespace = ? AND name = ?",
                                  {obj.kind, obj.metadata.ns, obj.metadata.name}));
    KOI_RETURN_IF_ERROR(db_->exec("insert change",
                                  "INSERT INTO cluster_changes (resource_version, type, kind, namespace, name, body) "
                                  "VALUES (?, 'DELETED', ?, ?, ?, ?)",
                                  {rv, obj.kind, obj.metadata.ns, obj.metadata.name, json::serialize(obj.to_json())}));
    return record_events(events);
  });
}

Result<std::optional<StoredObject>> StateStore::get(const std::string& kind, const std::string& ns, const std::string& name) {
  KOI_ASSIGN_OR_RETURN(auto rows, db_->query("get " + lower(kind),
                                             "SELECT body FROM cluster_objects WHERE kind = ? AND namespace = ? AND name = ?",
                                             {kind, ns, name}));
  if (rows.empty()) return std::optional<StoredObject>();
  boost::system::error_code ec;
  json::value v = json::parse(rows[0].text(0), ec);
  if (ec) return Status::corrupt(fmt::format("{} {}/{}: stored JSON does not parse: {}", lower(kind), ns, name, ec.message()));
  KOI_ASSIGN_OR_RETURN(StoredObject obj, StoredObject::from_json(v));
  return std::optional<StoredObject>(std::move(obj));
}

Result<std::vector<StoredObject>> StateStore::list(const std::string& kind, const std::string& ns,
                                                   const std::vector<std::string>& phases_excluded) {
  KOI_ASSIGN_OR_RETURN(std::vector<std::string> texts, bodies(kind, ns, phases_excluded));
  std::vector<StoredObject> out;
  for (const std::string& t : texts) {
    boost::system::error_code ec;
    json::value v = json::parse(t, ec);
    if (ec) return Status::corrupt(fmt::format("a stored {} does not parse: {}", lower(kind), ec.message()));
    KOI_ASSIGN_OR_RETURN(StoredObject obj, StoredObject::from_json(v));
    out.push_back(std::move(obj));
  }
  std::stable_sort(out.begin(), out.end(), [](const StoredObject& a, const StoredObject& b) {
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
    for (const NodeSpec& n : config.nodes) KOI_RETURN_IF_ERROR(insert_config_object("Node", "", n.name, node_object_json(n)));
    for (const QueueSpec& q : config.queues) {
      KOI_RETURN_IF_ERROR(insert_config_object("Queue", q.tenant, q.name, queue_object_json(q)));
    }
    return ok_status();
  });
}

Status StateStore::insert_config_object(const std::string& kind, const std::string& ns, const std::string& name,
                                        json::value body) {
  KOI_ASSIGN_OR_RETURN(int64_t rv, next_version());
  body.as_object()["metadata"].as_object()["resourceVersion"] = std::to_string(rv);
  const std::string text = json::serialize(body);
  KOI_RETURN_IF_ERROR(db_->exec("insert object",
                                "INSERT INTO cluster_objects (kind, namespace, name, uid, resource_version, phase, body) "
                                "VALUES (?, ?, ?, ?, ?, '', ?)",
                                {kind, ns, name, new_uid(), rv, text}));
  return db_->exec("insert change",
                   "INSERT INTO cluster_changes (resource_version, type, kind, namespace, name, body) "
                   "VALUES (?, 'MODIFIED', ?, ?, ?, ?)",
                   {rv, kind, ns, name, text});
}

Status StateStore::replace_object(const std::string& kind, const std::string& ns, const std::string& name,
                                  json::value body, const Event& event) {
  return db_->transaction([&]() -> Status {
    KOI_RETURN_IF_ERROR(db_->exec("delete object", "DELETE FROM cluster_objects WHERE kind = ? AND name = ?", {kind, name}));
    KOI_RETURN_IF_ERROR(insert_config_object(kind, ns, name, std::move(body)));
    return record_events({event});
  });
}

Status StateStore::put_queue(const QueueSpec& queue, const Event& event) {
  return replace_object("Queue", queue.tenant, queue.name, queue_object_json(queue), event);
}

Status StateStore::put_setting(const std::string& kind, const std::string& name, json::value body, const Event& event) {
  return replace_object(kind, "", name, std::move(body), event);
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
