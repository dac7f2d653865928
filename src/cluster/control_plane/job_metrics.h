// What a finished job reports, read from what it left on disk, for pipeline gates and the
// model registry (ModelVersion metrics and lineage):
//   train / finetune   the run directory's metrics.jsonl (docs/train.md): the latest value of
//                      every number (step, loss, val_loss, ...; a later line wins, as after a
//                      resume)
//   eval / command     the last result line of replica 0's log in `koi eval`'s form, segments
//                      "NAME NUMBER ..." joined by " | ":
//                      "tokens 5120 | windows 79 of 128 (stride 64) | loss 1.8 | perplexity 6.1"
//                      -> {tokens, windows, loss, perplexity}; a command step reports metrics
//                      by printing such a line.
// For charts (the console's loss curves), metric_series_from_jsonl() gives every numeric
// field but `step` as [[step, value], ...] in step order, thinned to at most `max_points`
// per field: every k-th point is kept (k the smallest power of two that fits, so one reading keeps
// the points of the last until k doubles) and always the last.
// The newest complete checkpoint of a run directory follows the trainer's on-disk contract
// (ckpt-<step>/ with its COMPLETE marker); the cluster module does not link the trainer.
// Plain functions; the file reads are the only side effects.
#pragma once

#include <boost/json/object.hpp>
#include <string>
#include <string_view>

#include "base/status.h"
#include "cluster/control_plane/executor.h"
#include "cluster/control_plane/object.h"

namespace koi::cluster {

boost::json::object metrics_from_jsonl(std::string_view text);
boost::json::object metrics_from_log(std::string_view log);
boost::json::object metric_series_from_jsonl(std::string_view text, size_t max_points);

// RUN/ckpt-<step> with the highest step and a COMPLETE marker; "" when there is none.
std::string newest_checkpoint(const std::string& run_dir);
// The step of a checkpoint directory named ckpt-<step>; -1 when the name is not one.
int64_t checkpoint_step(const std::string& checkpoint_dir);

// The metrics of `job` (any phase) as above; an empty object when it reported none.
Result<boost::json::object> job_metrics(const JobObject& job, const std::string& work_dir, const Executor& executor);
// The series of a train or finetune job's metrics.jsonl as above (so far, while it runs); an
// empty object for other kinds and before the first step.
Result<boost::json::object> job_metric_series(const JobObject& job, const std::string& work_dir, size_t max_points);

}  // namespace koi::cluster
