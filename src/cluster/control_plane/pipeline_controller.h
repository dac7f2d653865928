// PipelineController: advances every active Pipeline (pipeline.h) at the end of each reconcile
// round, on the reconciler's thread. Per pipeline and round: a cancel (metadata.deletionTimestamp,
// set by the API) cancels the running job steps and ends the pipeline Cancelled once they have
// stopped; a running job step ends with its Job (Succeeded: its metrics recorded; Failed or
// Cancelled: the pipeline fails); then every pending step whose dependencies have Succeeded
// starts: a job step submits its Job through submit_job(), a gate, register or promote step runs
// at once. One write of the Pipeline per round (optimistic: a conflicting API write defers the
// round's changes to the next); everything it starts is idempotent on a retry or a restart: a
// job step adopts the Job of its name if it carries the pipeline's uid, a register step adopts
// the ModelVersion whose lineage names this pipeline and step, an alias already at its version
// is left.
//
// Deploy steps go through DeployStep, the seam to the deployment controller: unset, the API
// refuses pipelines with a deploy step (PipelineContext::deploy_available).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "cluster/control_plane/executor.h"
#include "cluster/control_plane/model_register.h"
#include "cluster/control_plane/pipeline.h"
#include "cluster/control_plane/reconciler.h"
#include "cluster/control_plane/state_store.h"

namespace koi::cluster {

// Applies the deploy step `deploy` (the step's map) of a pipeline in `ns` for the model version
// `model_ref` ("fortunes@production" through the alias the pipeline moved, else
// "fortunes@3", the version it registered): a line for the step's message once the Deployment is
// applied (the step Succeeded), else the error that fails the step.
using DeployStep = std::function<Result<std::string>(const std::string& ns, const boost::json::object& deploy,
                                                     const std::string& model_ref, const std::string& by)>;

class PipelineController : public Controller {
 public:
  PipelineController(StateStore& store, ModelRegistry& models, const Executor& executor, const Reconciler& reconciler,
                     std::string work_dir);

  std::string name() const override { return "pipelines"; }
  Status reconcile(double now) override;

  // Connects deploy steps (before the control plane starts).
  void set_deploy_step(DeployStep deploy) { deploy_ = std::move(deploy); }
  bool deploy_available() const { return static_cast<bool>(deploy_); }

 private:
  struct Round;  // one pipeline's changes in one round
  Status advance(PipelineObject& p, double now);
  void cancel(Round& r);
  void finish_job_step(Round& r, size_t i);
  void start_step(Round& r, size_t i);
  void start_job(Round& r, size_t i);
  void run_gate(Round& r, size_t i);
  void run_register(Round& r, size_t i);
  void run_promote(Round& r, size_t i);
  void run_deploy(Round& r, size_t i);

  StateStore& store_;
  ModelRegistry& models_;
  const Executor& executor_;
  const Reconciler& reconciler_;
  const std::string work_dir_;
  DeployStep deploy_;
};

}  // namespace koi::cluster
