#include "cluster/control_plane/pipeline_controller.h"

#include <fmt/format.h>

#include <boost/json.hpp>
#include <filesystem>

#include "base/logging.h"
#include "cluster/control_plane/job_metrics.h"
#include "cluster/control_plane/job_submit.h"

namespace koi::cluster {
namespace json = boost::json;

struct PipelineController::Round {
  PipelineObject& p;
  double now;
  std::vector<Event> events;
  bool changed = false;
  bool failed = false;

  StepStatus& st(size_t i) { return p.status.steps[i]; }
  const PipelineStep& step(size_t i) const { return p.spec.steps[i]; }
  std::string by() const { return "pipeline/" + p.metadata.name; }
  int index(const std::string& name) const {
    for (size_t i = 0; i < p.spec.steps.size(); ++i) {
      if (p.spec.steps[i].name == name) return static_cast<int>(i);
    }
    return -1;
  }

  void event(const std::string& type, const std::string& reason, const std::string& message) {
    Event e;
    e.kind = "Pipeline", e.ns = p.metadata.ns, e.name = p.metadata.name, e.time = now;
    e.type = type, e.reason = reason, e.message = message;
    events.push_back(std::move(e));
    changed = true;
  }
  void set_step(size_t i, StepPhase phase, const std::string& message) {
    StepStatus& s = st(i);
    if (phase == StepPhase::kRunning || s.start_time == 0) s.start_time = now;
    if (phase != StepPhase::kRunning && phase != StepPhase::kPending) s.finish_time = now;
    s.phase = phase;
    s.message = message;
    changed = true;
  }
  void succeed(size_t i, const std::string& reason, const std::string& message) {
    set_step(i, StepPhase::kSucceeded, message);
    event("Normal", reason, "step " + step(i).name + ": " + message);
  }
  // The step failed, so the pipeline does: the steps not run are Skipped.
  void fail(size_t i, const std::string& reason, const std::string& message) {
    set_step(i, StepPhase::kFailed, message);
    p.status.phase = PipelinePhase::kFailed;
    p.status.reason = reason;
    p.status.message = "step " + step(i).name + " failed: " + message;
    p.status.finish_time = now;
    for (StepStatus& s : p.status.steps) {
      if (s.phase == StepPhase::kPending) s.phase = StepPhase::kSkipped, s.message = "not run: step " + step(i).name + " failed";
    }
    event("Warning", reason, p.status.message);
    failed = true;
  }
};

namespace {

std::string metrics_text(const json::object& m) {
  std::string out;
  for (const auto& [k, v] : m) {
    if (!v.is_number()) continue;
    out += fmt::format("{}{} {:g}", out.empty() ? "" : ", ", std::string(k), v.to_number<double>());
  }
  return out.empty() ? "no metrics" : out;
}

bool deps_succeeded(const PipelineObject& p, const PipelineStep& s) {
  for (const std::string& d : s.depends_on) {
    for (size_t i = 0; i < p.spec.steps.size(); ++i) {
      if (p.spec.steps[i].name == d && p.status.steps[i].phase != StepPhase::kSucceeded) return false;
    }
  }
  return true;
}

// Whether `a` depends on `b`, directly or through others.
bool depends_on(const PipelineSpec& spec, const std::string& a, const std::string& b) {
  const PipelineStep* s = spec.step(a);
  if (!s) return false;
  for (const std::string& d : s->depends_on) {
    if (d == b || depends_on(spec, d, b)) return true;
  }
  return false;
}

const json::object& obj_at(const json::object& o, std::string_view k) {
  static const json::object empty;
  const json::value* v = o.if_contains(k);
  return v && v->is_object() ? v->as_object() : empty;
}

}  // namespace

PipelineController::PipelineController(StateStore& store, ModelRegistry& models, const Executor& executor,
                                       const Reconciler& reconciler, std::string work_dir)
    : store_(store), models_(models), executor_(executor), reconciler_(reconciler), work_dir_(std::move(work_dir)) {}

Status PipelineController::reconcile(double now) {
  KOI_ASSIGN_OR_RETURN(std::vector<StoredObject> active, store_.list("Pipeline", "", {"Succeeded", "Failed", "Cancelled"}));
  for (const StoredObject& o : active) {
    auto p = pipeline_from_stored(o);
    if (!p.ok()) {
      log::warn("pipeline {}/{}: {}", o.metadata.ns, o.metadata.name, p.status().message());
      continue;
    }
    if (Status s = advance(*p, now); !s.ok()) log::warn("pipeline {}/{}: {}", o.metadata.ns, o.metadata.name, s.message());
  }
  return ok_status();
}

Status PipelineController::advance(PipelineObject& p, double now) {
  Round r{p, now, {}};
  if (p.status.phase == PipelinePhase::kPending) {
    p.status.phase = PipelinePhase::kRunning;
    p.status.start_time = now;
    p.status.reason = "Started";
    std::error_code ec;
    std::filesystem::create_directories(pipeline_dir(work_dir_, p.metadata.ns, p.metadata.name), ec);
    r.event("Normal", "Started", fmt::format("{} steps", p.spec.steps.size()));
  }
  if (!p.metadata.deletion_timestamp.empty()) {
    cancel(r);
  } else {
    for (size_t i = 0; i < p.spec.steps.size() && !r.failed; ++i) {
      if (r.st(i).phase == StepPhase::kRunning && r.step(i).kind == StepKind::kJob) finish_job_step(r, i);
    }
    // In order: steps depend only on earlier ones, so a step that ends at once unblocks the next.
    for (size_t i = 0; i < p.spec.steps.size() && !r.failed; ++i) {
      if (r.st(i).phase == StepPhase::kPending && deps_succeeded(p, r.step(i))) start_step(r, i);
    }
    bool all = true;
    std::string running;
    for (const StepStatus& s : p.status.steps) {
      all = all && s.phase == StepPhase::kSucceeded;
      if (s.phase == StepPhase::kRunning) running += (running.empty() ? "" : ", ") + s.name;
    }
    if (!r.failed && all) {
      p.status.phase = PipelinePhase::kSucceeded;
      p.status.reason = "Succeeded";
      p.status.message = fmt::format("all {} steps succeeded", p.spec.steps.size());
      p.status.finish_time = now;
      r.event("Normal", "Succeeded", p.status.message);
    } else if (!r.failed && !running.empty() && p.status.message != "running: " + running) {
      p.status.message = "running: " + running;
      r.changed = true;
    }
  }
  if (!r.changed) return ok_status();
  StoredObject o = to_stored(p);
  Status s = store_.update(&o, r.events);
  // A cancel written meanwhile: this round's changes are redone next round (every start adopts).
  if (s.code() == StatusCode::kFailedPrecondition) return ok_status();
  return s;
}

void PipelineController::cancel(Round& r) {
  bool stopping = false;
  for (size_t i = 0; i < r.p.spec.steps.size(); ++i) {
    StepStatus& st = r.st(i);
    // A pending job step may have submitted its Job in a round whose pipeline write was lost
    // (to this very cancel): a Job of its name that carries this pipeline's uid is stopped too.
    if (st.phase != StepPhase::kPending && st.phase != StepPhase::kRunning) continue;
    if (r.step(i).kind != StepKind::kJob) {
      if (st.phase == StepPhase::kPending) r.set_step(i, StepPhase::kCancelled, "not run: the pipeline was cancelled");
      continue;
    }
    auto job = store_.get_job(r.p.metadata.ns, st.job);
    if (!job.ok()) {
      stopping = true;
      continue;
    }
    const bool ours = *job && (*job)->metadata.labels.count("pipelineUid") &&
                      (*job)->metadata.labels.at("pipelineUid") == r.p.metadata.uid;
    if (st.phase == StepPhase::kPending && (!ours || is_terminal((*job)->status.phase))) {
      r.set_step(i, StepPhase::kCancelled, "not run: the pipeline was cancelled");
      continue;
    }
    if (st.phase == StepPhase::kPending) r.set_step(i, StepPhase::kRunning, "job " + st.job + " found; cancelling it");
    if (!*job || is_terminal((*job)->status.phase)) {
      const std::string phase = *job ? std::string(phase_name((*job)->status.phase)) : "gone";
      r.set_step(i, *job && (*job)->status.phase == JobPhase::kSucceeded ? StepPhase::kSucceeded : StepPhase::kCancelled,
                 "job " + st.job + " " + phase);
      continue;
    }
    stopping = true;
    if (!(*job)->metadata.deletion_timestamp.empty()) continue;
    (*job)->metadata.deletion_timestamp = rfc3339(r.now);
    Event e;
    e.ns = r.p.metadata.ns, e.name = st.job, e.time = r.now, e.reason = "CancelRequested";
    e.message = "cancel requested by " + r.by() + " (the pipeline was cancelled)";
    if (Status s = store_.update_job(&**job, {e}); !s.ok()) log::warn("cancel job {}: {}", st.job, s.message());
  }
  if (stopping) return;
  r.p.status.phase = PipelinePhase::kCancelled;
  r.p.status.reason = "Cancelled";
  r.p.status.message = "cancelled; every running step has stopped";
  r.p.status.finish_time = r.now;
  r.event("Normal", "Cancelled", r.p.status.message);
}

void PipelineController::finish_job_step(Round& r, size_t i) {
  const std::string& name = r.st(i).job;
  auto job = store_.get_job(r.p.metadata.ns, name);
  if (!job.ok()) return;  // the store will answer next round
  if (!*job) return r.fail(i, "StepFailed", "job " + name + " disappeared");
  const JobObject& j = **job;
  if (!is_terminal(j.status.phase)) return;
  if (j.status.phase != JobPhase::kSucceeded) {
    return r.fail(i, "StepFailed", fmt::format("job {} {}: {}", name, phase_name(j.status.phase), j.status.message));
  }
  auto metrics = job_metrics(j, work_dir_, executor_);
  if (!metrics.ok()) return r.fail(i, "StepFailed", "job " + name + " Succeeded but its metrics: " + metrics.status().message());
  r.st(i).metrics = *metrics;
  r.succeed(i, "StepSucceeded", "job " + name + " Succeeded (" + metrics_text(*metrics) + ")");
}

void PipelineController::start_step(Round& r, size_t i) {
  switch (r.step(i).kind) {
    case StepKind::kJob: return start_job(r, i);
    case StepKind::kGate: return run_gate(r, i);
    case StepKind::kRegister: return run_register(r, i);
    case StepKind::kPromote: return run_promote(r, i);
    case StepKind::kDeploy: return run_deploy(r, i);
  }
}

void PipelineController::start_job(Round& r, size_t i) {
  JobObject job;
  job.metadata.ns = r.p.metadata.ns;
  job.metadata.name = r.st(i).job;
  job.metadata.labels = {{"pipeline", r.p.metadata.name}, {"pipelineUid", r.p.metadata.uid}, {"step", r.step(i).name}};
  job.spec = r.step(i).job;
  Status s = submit_job(store_, *reconciler_.cluster(), &job, r.by());
  if (s.code() == StatusCode::kAlreadyExists) {
    // Submitted in a round whose pipeline write was lost: adopt it if it is ours.
    auto existing = store_.get_job(job.metadata.ns, job.metadata.name);
    if (!existing.ok()) return;
    const bool ours = *existing && (*existing)->metadata.labels.count("pipelineUid") &&
                      (*existing)->metadata.labels.at("pipelineUid") == r.p.metadata.uid;
    if (!ours) return r.fail(i, "StepFailed", "a job named " + job.metadata.name + " exists and is not this pipeline's");
  } else if (!s.ok()) {
    return r.fail(i, "StepFailed", "job " + job.metadata.name + " was refused: " + s.message());
  }
  r.set_step(i, StepPhase::kRunning, "job " + job.metadata.name + " submitted");
  r.event("Normal", "StepStarted", "step " + r.step(i).name + ": job " + job.metadata.name + " submitted");
}

void PipelineController::run_gate(Round& r, size_t i) {
  const PipelineStep& s = r.step(i);
  const json::object& metrics = r.st(r.index(s.metrics_from)).metrics;
  std::string seen;
  for (const GateCondition& c : s.conditions) {
    const json::value* v = metrics.if_contains(c.metric);
    if (!v || !v->is_number()) {
      return r.fail(i, "GateFailed", fmt::format("metric '{}' was not reported by step {} (it reported: {})", c.metric,
                                                 s.metrics_from, metrics_text(metrics)));
    }
    const double x = v->to_number<double>();
    if (!c.holds(x)) {
      return r.fail(i, "GateFailed", fmt::format("{} of step {} is {:g}, which fails '{} {} {:g}' (condition: {})", c.metric,
                                                 s.metrics_from, x, c.metric, c.op, c.value, s.condition));
    }
    seen += fmt::format("{}{} {:g} {} {:g}", seen.empty() ? "" : ", ", c.metric, x, c.op, c.value);
  }
  r.succeed(i, "GatePassed", "passed: " + seen);
}

void PipelineController::run_register(Round& r, size_t i) {
  const PipelineStep& s = r.step(i);
  const std::string& ns = r.p.metadata.ns;
  auto existing = models_.versions(ns, s.model);
  if (!existing.ok()) return;
  for (const StoredObject& v : *existing) {
    const json::object& origin = obj_at(obj_at(obj_at(v.body, "spec"), "lineage"), "pipeline");
    const json::value* uid = origin.if_contains("uid");
    const json::value* step = origin.if_contains("step");
    if (uid && uid->is_string() && uid->as_string() == r.p.metadata.uid && step && step->is_string() &&
        step->as_string() == s.name) {
      auto mv = model_version_from_spec(obj_at(v.body, "spec"));
      if (!mv.ok()) return r.fail(i, "RegisterFailed", mv.status().message());
      r.st(i).version = mv->version;
      return r.succeed(i, "Registered", fmt::format("{} version {} (registered before a restart)", s.model, mv->version));
    }
  }
  RegisterRequest req;
  req.from_job = r.st(r.index(s.from)).job;
  req.artifact = s.artifact;
  req.checkpoint = s.checkpoint;
  req.format = s.format;
  if (!s.metrics_from.empty()) req.eval_job = r.st(r.index(s.metrics_from)).job;
  req.origin = json::object{{"name", r.p.metadata.name}, {"uid", r.p.metadata.uid}, {"step", s.name}};
  auto v = models_.register_version(ns, s.model, req, r.by(), r.now);
  if (!v.ok()) return r.fail(i, "RegisterFailed", v.status().message());
  auto mv = model_version_from_spec(obj_at(v->body, "spec"));
  if (!mv.ok()) return r.fail(i, "RegisterFailed", mv.status().message());
  r.st(i).version = mv->version;
  r.succeed(i, "Registered", fmt::format("{} version {} from job {} ({}, {} bytes, sha256 {})", s.model, mv->version,
                                         req.from_job, mv->artifact.format, mv->artifact.size_bytes, mv->artifact.sha256));
}

void PipelineController::run_promote(Round& r, size_t i) {
  const PipelineStep& s = r.step(i);
  const int version = r.st(r.index(s.from)).version;
  auto m = models_.move_alias(r.p.metadata.ns, s.model, s.alias, version, 0, r.by(), r.now);
  if (!m.ok()) return r.fail(i, "PromoteFailed", m.status().message());
  r.st(i).version = version;
  r.succeed(i, "Promoted", fmt::format("{}@{} -> version {}", s.model, s.alias, version));
}

void PipelineController::run_deploy(Round& r, size_t i) {
  const PipelineStep& s = r.step(i);
  if (!deploy_) return r.fail(i, "DeployFailed", "deploy steps are not connected in this control plane");
  // The version this pipeline made: through the nearest alias it moved, else the version it registered.
  std::string ref;
  for (int j = static_cast<int>(i) - 1; j >= 0 && ref.empty(); --j) {
    const PipelineStep& e = r.step(j);
    if (!depends_on(r.p.spec, s.name, e.name)) continue;
    if (e.kind == StepKind::kPromote) ref = e.model + "@" + e.alias;
    if (e.kind == StepKind::kRegister) ref = fmt::format("{}@{}", e.model, r.st(j).version);
  }
  if (ref.empty()) return r.fail(i, "DeployFailed", "no register or promote step before it names a model version");
  auto applied = deploy_(r.p.metadata.ns, s.deploy, ref, r.by());
  if (!applied.ok()) return r.fail(i, "DeployFailed", applied.status().message());
  r.succeed(i, "Deployed", ref + (applied->empty() ? "" : ": " + *applied));
}

}  // namespace koi::cluster
