// Pipeline: steps with dependencies that carry a model from training to the registry (and, once
// the deployment controller is connected, to a deployment). Kept in the store as a
// StoredObject of kind "Pipeline" in the tenant's namespace; PipelineController
// (pipeline_controller.h) advances it; all of its progress is on the object, so a control
// plane restarted at any moment continues where it was.
//
//   apiVersion: koi/v1
//   kind: Pipeline
//   metadata: {name: fortunes}
//   spec:
//     steps:
//       - name: train                     # a job step: an embedded Job spec, run as the Job
//         job: {kind: train, recipe: /abs/fortunes.yaml, ...}        # <pipeline>-<step>
//       - name: export
//         job: {kind: command, command: ["${koi}", train, export, "${steps.train.checkpointDir}",
//                                        -o, "${dir}/model.gguf"]}
//       - name: eval
//         job: {kind: eval, args: [-m, "${dir}/model.gguf", -d, /abs/valid.txt]}
//       - name: quality                   # a gate: every condition on a step's metrics holds
//         gate: {metricsFrom: eval, condition: "perplexity <= 12.5 && loss < 3"}
//       - name: register                  # a ModelVersion from a job step's checkpoint or export
//         register: {model: fortunes, from: train, artifact: "${dir}/model.gguf", format: gguf,
//                    metricsFrom: eval}
//       - name: promote                   # moves an alias to the version `from` registered
//         promote: {alias: production, from: register}
//       - name: serve                     # a deploy step: the seam for the deployment controller
//         deploy: {...}
//
// dependsOn names earlier steps (so there are no cycles); without it a step depends on the one
// before it (none for the first). A step starts when all its dependencies have Succeeded; a
// failed step (a job that Failed or was cancelled, a gate whose condition does not hold, a
// registration or alias move refused) fails the pipeline with the reason in status and a
// Warning event, and the steps not yet run are Skipped. Substitutions in any string of a step,
// done once at submit: ${koi} (the control plane's koi binary), ${dir} (the pipeline's own
// directory, <work-dir>/<ns>/<name>.pipeline, created when it starts), ${steps.S.checkpointDir}
// and ${steps.S.job} (job step S's run directory and job name). Gates read the metrics a job
// step reported (job_metrics.h).
#pragma once

#include <boost/json/object.hpp>
#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "cluster/control_plane/object.h"
#include "cluster/control_plane/state_store.h"

namespace koi::cluster {

enum class StepKind { kJob, kGate, kRegister, kPromote, kDeploy };
std::string_view step_kind_name(StepKind kind);

struct GateCondition {
  std::string metric;
  std::string op;  // <= < >= > == !=
  double value = 0;
  bool holds(double x) const;
};

struct PipelineStep {
  std::string name;
  std::vector<std::string> depends_on;
  StepKind kind = StepKind::kJob;
  JobSpec job;                               // job
  std::string metrics_from;                  // gate, register: a job step
  std::string condition;                     // gate, as written
  std::vector<GateCondition> conditions;     // gate, all must hold
  std::string model, from, artifact, checkpoint, format;  // register (from: a job step)
  std::string alias;                         // promote (from: a register step)
  boost::json::object deploy;                // deploy: the step's map, for the deployment seam
};

struct PipelineSpec {
  std::vector<PipelineStep> steps;
  const PipelineStep* step(const std::string& name) const;
};

enum class PipelinePhase { kPending, kRunning, kSucceeded, kFailed, kCancelled };
enum class StepPhase { kPending, kRunning, kSucceeded, kFailed, kCancelled, kSkipped };
std::string_view pipeline_phase_name(PipelinePhase p);
std::string_view step_phase_name(StepPhase p);
bool is_terminal(PipelinePhase p);

struct StepStatus {
  std::string name;
  StepPhase phase = StepPhase::kPending;
  std::string job;               // job steps: the Job's name
  std::string message;
  boost::json::object metrics;   // job steps: what the job reported
  std::string model;             // register, promote
  int version = 0;               // register: the version made; promote: the one the alias got
  double start_time = 0, finish_time = 0;
};

struct PipelineStatus {
  PipelinePhase phase = PipelinePhase::kPending;
  std::string reason, message;
  std::vector<StepStatus> steps;  // one per spec step, same order
  double start_time = 0, finish_time = 0;
};

struct PipelineObject {
  ObjectMeta metadata;
  PipelineSpec spec;
  PipelineStatus status;
};

// What substitutions and checks need from the control plane.
struct PipelineContext {
  std::string work_dir;
  std::string koi_binary;
  bool deploy_available = false;  // a deploy step is refused (400) until the seam is connected
};

// The pipeline's own directory: <work_dir>/<ns>/<name>.pipeline.
std::string pipeline_dir(const std::string& work_dir, const std::string& ns, const std::string& name);
// <pipeline>-<step>
std::string step_job_name(const std::string& pipeline, const std::string& step);

// A manifest (YAML or JSON) -> a Pending pipeline; errors name the field
// ("spec.steps[2].gate.condition: ..."). `ns` is the request's namespace.
Result<PipelineObject> parse_pipeline_manifest(const std::string& text, const std::string& ns, const PipelineContext& ctx);
// Parses "perplexity <= 12.5 && loss < 3"; errors name `field`.
Result<std::vector<GateCondition>> parse_gate_condition(const std::string& text, const std::string& field);

StoredObject to_stored(const PipelineObject& p);
Result<PipelineObject> pipeline_from_stored(const StoredObject& o);

}  // namespace koi::cluster
