// ModelRegistry: the writes of the model registry (model_registry.h has the object shapes).
//
// register_version() makes a ModelVersion from a job that has Succeeded: its checkpoint (the
// newest complete one unless named) or an artifact exported from it (`koi train export`). The
// control plane reads the artifact itself: its size and SHA-256 (a file's bytes; for a
// directory, every regular file in path order as "PATH\0BYTES"), its format (gguf: a file with
// the GGUF magic; hf: a directory with config.json; koi: a checkpoint directory with its
// COMPLETE marker), the lineage (job, uid, kind, the checkpoint and its step, the recipe and its
// SHA-256, the recipe's data, args or command) and the metrics (of an eval job when one is
// named, else of the job itself: job_metrics.h; explicit ones override). Version numbers
// increase per model from 1; the Model is created at its first version. Two registrations at
// once get two numbers: the version object is created first (AlreadyExists -> the next
// number), then the Model's latestVersion is raised under optimistic concurrency.
//
// move_alias() points an alias at a version and appends {alias, version, previous, time,
// timestamp, by} to status.aliasHistory, so alias_version_at() answers which version held an
// alias at any time. With expected_version != 0 a Model changed since that resourceVersion is
// a conflict (409); without, a concurrent writer is retried.
//
// Every error names its field (fromJob, artifact, format, version, alias, ...). Thread-safe
// as the store is; called from API threads and from the pipeline controller.
#pragma once

#include <boost/json/object.hpp>
#include <string>

#include "base/status.h"
#include "cluster/control_plane/executor.h"
#include "cluster/control_plane/model_registry.h"
#include "cluster/control_plane/state_store.h"

namespace koi::cluster {

struct RegisterRequest {
  std::string from_job;    // the job the weights come from (lineage)
  std::string checkpoint;  // a checkpoint of it (absolute, or ckpt-<step> in its run directory)
  std::string artifact;    // or an exported file/directory (absolute)
  std::string format;      // gguf | hf | koi; "" = found from the artifact
  std::string eval_job;    // metrics from this job's output
  boost::json::object metrics;  // explicit metrics (numbers)
  std::string description;      // the Model's, at its first version
  boost::json::object origin;   // {pipeline, uid, step} when a pipeline registers
};

// A register request body (JSON or YAML): {fromJob, checkpoint, artifact, format, evalJob,
// metrics, description}; unknown fields are errors.
Result<RegisterRequest> parse_register_request(const std::string& text);

// The version `alias` pointed at, at unix time `t` (from aliasHistory); 0 when none yet.
int alias_version_at(const boost::json::object& model_status, const std::string& alias, double t);
// "2026-12-01T18:30:00Z" (fractions allowed) or unix seconds; InvalidArgument naming `field`.
Result<double> parse_time(const std::string& text, const std::string& field);

// Size, SHA-256 and format of an artifact (format "" = found from its content).
Result<ModelArtifact> read_artifact(const std::string& path, const std::string& format);

class ModelRegistry {
 public:
  ModelRegistry(StateStore& store, const Executor& executor, std::string work_dir)
      : store_(store), executor_(executor), work_dir_(std::move(work_dir)) {}

  // The new ModelVersion object.
  Result<StoredObject> register_version(const std::string& ns, const std::string& model, const RegisterRequest& req,
                                        const std::string& by, double now);
  // The Model object after the move.
  Result<StoredObject> move_alias(const std::string& ns, const std::string& model, const std::string& alias,
                                  int version, int64_t expected_version, const std::string& by, double now);
  // The model's versions, oldest first.
  Result<std::vector<StoredObject>> versions(const std::string& ns, const std::string& model);

 private:
  Result<JobObject> finished_job(const std::string& ns, const std::string& name, const std::string& field);
  Result<boost::json::object> lineage(const JobObject& job, const std::string& checkpoint);
  Result<int> claim_version(const std::string& ns, const std::string& model, const ModelVersion& v,
                            const std::string& by, double now, StoredObject* out);
  Status raise_latest(const std::string& ns, const std::string& model, int version, const std::string& description,
                      const std::string& by, double now);

  StateStore& store_;
  const Executor& executor_;
  const std::string work_dir_;
};

}  // namespace koi::cluster
