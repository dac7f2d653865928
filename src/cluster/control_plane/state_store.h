// StateStore: the control plane's durable state in a store::Database (SQLite by default,
// PostgreSQL by URL), schema "cluster":
//   cluster_objects  (kind, namespace, name) -> uid, resource_version, phase, body (the JSON)
//   cluster_events   one row per event: object, time, type (Normal | Warning), reason, message
//   cluster_changes  the watch log: every object write and every event, by resource version
//   cluster_meta     the resource-version counter (one sequence for all objects and events,
//                    as etcd's revision)
//   cluster_tokens   SHA-256 of each token -> principal (from the config; never the token)
// Every write is one transaction: the object, its change record and its events commit
// together or not at all, so an event is never lost nor recorded for a write that failed.
// Optimistic concurrency: update() names the resourceVersion it read; a different current
// one is FailedPrecondition ("conflict"), which the API answers with 409.
// Thread-safe (the Database serialises calls; transactions hold its lock).
#pragma once

#include <boost/json/object.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "cluster/control_plane/config.h"
#include "cluster/control_plane/object.h"
#include "store/database.h"

namespace koi::cluster {

struct Event {
  int64_t resource_version = 0;
  std::string kind = "Job", ns, name;
  double time = 0;
  std::string type = "Normal";  // Normal | Warning
  std::string reason;
  std::string message;
};

struct Change {
  int64_t resource_version = 0;
  std::string type;  // ADDED, MODIFIED, DELETED, EVENT
  std::string kind, ns, name;
  std::string body;  // the object's (or event's) JSON
};

std::string event_json(const Event& e);

// An object of a kind beyond Job and the config's (Model, ModelVersion, Deployment, Pipeline)
// as the store keeps it: its metadata and the rest of its JSON (spec, status). Each kind's
// own file turns that into its typed form; the store only keeps, versions and watches it.
struct StoredObject {
  std::string kind;
  ObjectMeta metadata;
  boost::json::object body;  // every top-level field but apiVersion, kind and metadata
  std::string phase;         // indexed for list(active_only); "" when the kind has none

  // The whole object: {apiVersion, kind, metadata, ...body}.
  boost::json::object to_json() const;
  static Result<StoredObject> from_json(const boost::json::value& v);
};

class StateStore {
 public:
  static Result<std::unique_ptr<StateStore>> open(const std::string& url);
  explicit StateStore(std::unique_ptr<store::Database> db) : db_(std::move(db)) {}

  store::Database& db() { return *db_; }

  // Creates a job (AlreadyExists if the name is taken in its namespace); sets its uid,
  // resourceVersion and creationTimestamp.
  Status create_job(JobObject* job, const std::vector<Event>& events);
  // Writes `job` if the stored resourceVersion still equals job->metadata.resource_version
  // (FailedPrecondition otherwise); sets the new one. Events commit with it.
  Status update_job(JobObject* job, const std::vector<Event>& events);
  Result<std::optional<JobObject>> get_job(const std::string& ns, const std::string& name);
  // ns "" = all namespaces; active_only: not Succeeded/Failed/Cancelled.
  Result<std::vector<JobObject>> list_jobs(const std::string& ns, bool active_only);
  // (namespace, name, resourceVersion) of every active job, in resourceVersion order: what
  // changed since a read, without reading the bodies.
  struct Version {
    std::string ns, name;
    int64_t resource_version = 0;
  };
  Result<std::vector<Version>> active_job_versions();
  Result<std::vector<Event>> events(const std::string& kind, const std::string& ns, const std::string& name);
  // Changes after `after`, at most `limit`; ns "" = every namespace.
  Result<std::vector<Change>> changes(int64_t after, const std::string& ns, int limit);
  Result<int64_t> current_version();

  // The same for any StoredObject kind: create() sets uid, resourceVersion and
  // creationTimestamp (AlreadyExists if the name is taken); update() checks the
  // resourceVersion it read (FailedPrecondition otherwise); remove() deletes the object
  // (a DELETED change; FailedPrecondition if `expected_version` is non-zero and stale).
  Status create(StoredObject* obj, const std::vector<Event>& events);
  Status update(StoredObject* obj, const std::vector<Event>& events);
  Status remove(const StoredObject& obj, int64_t expected_version, const std::vector<Event>& events);
  Result<std::optional<StoredObject>> get(const std::string& kind, const std::string& ns, const std::string& name);
  // In creation order; ns "" = all namespaces; `phases_excluded` filters on the phase column.
  Result<std::vector<StoredObject>> list(const std::string& kind, const std::string& ns,
                                         const std::vector<std::string>& phases_excluded = {});

  // Writes a Queue object (replacing one of that name) with its event.
  Status put_queue(const QueueSpec& queue, const Event& event);
  // Writes a Node object (replacing one of that name) with its event: a state the executor
  // reported (down, drained, back).
  Status put_node(const NodeSpec& node, const Event& event);
  // Writes a cluster-wide settings object (namespace "", replacing one of that kind and name;
  // the Admission setting) with its event.
  Status put_setting(const std::string& kind, const std::string& name, boost::json::value body, const Event& event);
  // Replaces the token table with the config's; the declared Queue and Node objects likewise.
  Status sync_config(const ControlPlaneConfig& config);
  Result<std::vector<TokenEntry>> tokens();

 private:
  Result<int64_t> next_version();  // inside a transaction
  Status record_events(const std::vector<Event>& events);
  // The transaction bodies every kind shares: `text` renders the body once the new
  // resourceVersion (and for inserts uid and creation time) are set on `meta`.
  Status insert_object(const std::string& kind, ObjectMeta* meta, const std::string& phase,
                       const std::function<std::string()>& text, const std::vector<Event>& events);
  Status update_object(const std::string& kind, ObjectMeta* meta, const std::string& phase,
                       const std::function<std::string()>& text, const std::vector<Event>& events);
  Result<std::vector<std::string>> bodies(const std::string& kind, const std::string& ns,
                                          const std::vector<std::string>& phases_excluded);
  // Inside a transaction: a Node or Queue object (declared, versionless in the API's sense)
  // written as `body` with a new resourceVersion, and its change.
  Status insert_config_object(const std::string& kind, const std::string& ns, const std::string& name,
                              boost::json::value body);
  // Object `kind`/`name` replaced by `body` (its resourceVersion set), a change and the event.
  Status replace_object(const std::string& kind, const std::string& ns, const std::string& name,
                        boost::json::value body, const Event& event);

  std::unique_ptr<store::Database> db_;
};

}  // namespace koi::cluster
