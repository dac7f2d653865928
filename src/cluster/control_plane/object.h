// The control plane's objects in Kubernetes' shape: apiVersion koi/v1, kind, metadata
// {name, namespace (= tenant), labels, resourceVersion, uid, creationTimestamp}, spec and
// status {phase, reason, message, conditions, restarts, ...}. A JobObject is plain data;
// the store (state_store.h) keeps it as JSON, the API serves that JSON, the reconciler
// (reconciler.h) is the only writer of status.
//
// Job phases:  Pending -> Admitted -> Running -> Succeeded | Failed | Cancelled, with
//   Preempted (evicted by a higher-priority job; pending again, resumes from its checkpoint)
//   Restarting (failed or lost; waits for its backoff, then pending again).
// Every transition is recorded as an event with its cause (state_store.h: Event).
//
// parse_job_manifest() is the one place user input becomes a JobSpec: it rejects unknown
// fields and bad values with the field's path ("spec.replicas: must be >= 1").
#pragma once

#include <boost/json/value.hpp>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "cluster/control_plane/yaml_reader.h"
#include "cluster/types.h"

namespace koi::cluster {

inline constexpr const char* kApiVersion = "koi/v1";

enum class JobKind { kTrain, kFinetune, kEval, kCommand };
std::string_view job_kind_name(JobKind kind);

enum class JobPhase { kPending, kAdmitted, kRunning, kSucceeded, kFailed, kCancelled, kPreempted, kRestarting };
std::string_view phase_name(JobPhase phase);
std::optional<JobPhase> phase_from_name(std::string_view name);
bool is_terminal(JobPhase phase);

struct ObjectMeta {
  std::string name;
  std::string ns;  // the tenant
  std::map<std::string, std::string> labels;
  int64_t resource_version = 0;
  std::string uid;
  std::string creation_timestamp;  // RFC 3339, UTC
  double creation_time = 0;        // the same in unix seconds, exact (FIFO order)
  std::string deletion_timestamp;  // set by a cancel; the reconciler stops the job
};

struct RestartPolicy {
  int max_restarts = 3;              // failures that may be retried (the budget)
  double backoff_seconds = 10;       // first retry delay; doubles per spent restart
  double max_backoff_seconds = 600;  // the cap
  std::vector<int64_t> retry_exit_codes;        // always retried, budget untouched
  std::vector<int64_t> never_retry_exit_codes;  // fail at once
};

// GPUs per replica: `gpu` whole devices; or a share of one device (`gpu` 1 with gpu_milli
// < 1000, written "gpu: 0.25"); or `mig_slices` MIG slices of one device (on MIG nodes only).
struct JobResources {
  int64_t cpu_milli = 1000;
  int64_t memory_mib = 1024;
  int gpu = 0;
  int gpu_milli = 1000;
  int mig_slices = 0;
  std::string gpu_type;  // "" = any
};

struct JobSpec {
  JobKind kind = JobKind::kCommand;
  std::vector<std::string> command;  // command, eval: argv
  std::string recipe;                // train, finetune: koi train --config RECIPE
  std::vector<std::string> args;     // extra arguments to koi train / koi eval
  int replicas = 1;                  // a gang: all start or none
  Topology topology = Topology::kNone;  // a domain all replicas must share (nvlinkDomain, leafSwitch, spine)
  JobResources resources;            // per replica
  std::string queue;                 // "" = the tenant's first queue
  int priority = 0;
  bool preemptible = true;
  double max_runtime_seconds = 0;    // 0 = unlimited; the reconciler kills it beyond
  RestartPolicy restart;
  std::string checkpoint_dir;        // "" = <work-dir>/<ns>/<job>/checkpoints
  std::map<std::string, std::string> env;
  double hang_timeout_seconds = 0;   // 0 = off; no log or metrics progress this long = hung
  double termination_grace_seconds = 30;  // SIGTERM -> SIGKILL
};

// One launched replica as the executor named it (executor.h: ReplicaHandle).
struct ReplicaRecord {
  std::string id;   // executor's handle ("pid:starttime" for local)
  std::string dir;  // working directory with its log
  int node = 0;     // index into the inventory
  std::vector<int> gpus;
  bool exited = false;
  int exit_code = 0;
  int signal = 0;
  bool lost = false;  // vanished without an exit record (infrastructure)
  bool oom_killed = false;        // the OOM killer ended it at its memory limit
  int64_t peak_memory_bytes = 0;  // as its limit group saw it; 0 = unknown
  std::string lost_detail;  // the executor's word on how ("Slurm job 12 ended NODE_FAIL ...")
};

struct Condition {
  std::string type;  // Admitted, Running, Finished, ...
  std::string status = "True";
  std::string reason;
  std::string message;
  std::string last_transition_time;
};

struct JobStatus {
  JobPhase phase = JobPhase::kPending;
  std::string reason;   // machine word of the last transition or of the wait (plan()'s reason)
  std::string message;  // in words
  std::vector<Condition> conditions;
  int restarts = 0;        // budget spent
  int attempts = 0;        // launches so far
  int infra_restarts = 0;  // restarts that did not spend the budget
  std::optional<int> last_exit_code;
  std::optional<int> last_signal;
  std::string log_tail;
  double next_attempt_time = 0;  // Restarting: not before (unix seconds)
  double start_time = 0;         // this attempt's
  double finish_time = 0;
  std::vector<ReplicaRecord> replicas;
  std::string terminating;  // "" or why it is being stopped: Preempted, Cancelled, DeadlineExceeded, ReplicaFailed, Hung, Lost
  std::string terminating_message;
  double kill_time = 0;     // SIGKILL after this
  bool killed = false;
  std::string preempted_by;
};

struct JobObject {
  ObjectMeta metadata;
  JobSpec spec;
  JobStatus status;
};

class YamlReader;
// A Job's spec.resources (cpu cores, memoryMiB, gpu, gpuType), also a Deployment's per replica.
void parse_job_resources(YamlReader& res, JobResources* r);
boost::json::object job_resources_json(const JobResources& r);

// Reads and checks a Job's spec (errors go to the reader, naming the field); a Pipeline's job
// steps embed the same spec.
void parse_job_spec(YamlReader& spec, JobSpec* s);

// What every kind's manifest shares, read once: the text as one YAML map (JSON is YAML), then
// apiVersion koi/v1, `kind`, and metadata {name (valid_name), namespace (must be `ns`, the
// request's, when given), labels} into `meta`. Errors of the fields go to `top` (naming them,
// reported by its finish()); a text that is not a map at all is the Status. `what` names the
// document in messages ("job manifest"). Returns the metadata's reader, for a kind that
// reads more of it.
Result<YAML::Node> manifest_document(const std::string& text, const std::string& what);
YamlReader read_manifest_header(YamlReader& top, const std::string& kind, const std::string& ns, ObjectMeta* meta);

// Parses and validates a Job manifest (YAML or JSON). `ns` is the namespace of the request:
// a manifest naming another one is refused.
Result<JobObject> parse_job_manifest(const std::string& text, const std::string& ns);

// metadata as JSON and back (every kind's; resourceVersion as a string, as Kubernetes).
boost::json::object meta_json(const ObjectMeta& meta);
ObjectMeta meta_from_json(const boost::json::object& meta);

boost::json::value to_json(const JobObject& job);
Result<JobObject> job_from_json(const boost::json::value& v);
std::string job_json_text(const JobObject& job);
Result<JobObject> job_from_text(const std::string& text);

// The declared inventory and queues as objects (kind Node, kind Queue; the spec in the
// config's units: cores, MiB, GPUs).
boost::json::value node_object_json(const NodeSpec& node);
boost::json::value queue_object_json(const QueueSpec& queue);

// "2026-12-01T18:30:00Z"
std::string rfc3339(double unix_seconds);
double wall_seconds();
// Valid object names: 1-63 of [a-z0-9-], starting and ending alphanumeric.
bool valid_name(std::string_view name);

}  // namespace koi::cluster
