#include "cluster/control_plane/pipeline_controller.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "base/file.h"
#include "cluster/control_plane/local_executor.h"

namespace koi::cluster {
namespace {

// Rounds of the controller by hand against a real store; jobs end when a test says so (the
// reconciler, which would run them, is not running).
class PipelineControllerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = *make_temp_dir("koi-pipeline-controller");
    store_ = std::move(StateStore::open("sqlite:" + dir_ + "/cp.db")).value();
    NodeSpec node;
    node.name = "n0", node.cpu_milli = 8000, node.memory_mib = 16384;
    QueueSpec q;
    q.name = "alpha-q", q.tenant = "alpha";
    executor_ = std::make_unique<LocalExecutor>("/bin/koi", std::vector<NodeSpec>{node});
    reconciler_ = std::make_unique<Reconciler>(*store_, *executor_, make_cluster({node}, {q}), registry_,
                                               ReconcilerOptions{dir_ + "/work", "/bin/koi", *policy_by_name("koi"), 0.1});
    models_ = std::make_unique<ModelRegistry>(*store_, *executor_, dir_ + "/work");
    controller_ = std::make_unique<PipelineController>(*store_, *models_, *executor_, *reconciler_, dir_ + "/work");
  }
  void TearDown() override {
    controller_.reset(), reconciler_.reset(), store_.reset();
    remove_all(dir_);
  }

  PipelineObject submit(const std::string& name, const std::string& steps) {
    const PipelineContext ctx{dir_ + "/work", "/bin/koi", false};
    auto p = parse_pipeline_manifest("apiVersion: koi/v1\nkind: Pipeline\nmetadata: {name: " + name + "}\nspec:\n  steps:\n" + steps,
                                     "alpha", ctx);
    EXPECT_TRUE(p.ok()) << p.status().message();
    StoredObject o = to_stored(*p);
    EXPECT_TRUE(store_->create(&o, {}).ok());
    return *pipeline_from_stored(o);
  }
  PipelineObject get(const std::string& name) { return *pipeline_from_stored(**store_->get("Pipeline", "alpha", name)); }
  // Ends a job as the reconciler would, with `log` as replica 0's output.
  void end_job(const std::string& name, JobPhase phase, const std::string& log) {
    JobObject j = **store_->get_job("alpha", name);
    j.status.phase = phase;
    j.status.attempts = 1;
    ASSERT_TRUE(store_->update_job(&j, {}).ok());
    const std::string d = replica_dir(dir_ + "/work", "alpha", name, 1, 0);
    ASSERT_EQ(system(("mkdir -p " + d).c_str()), 0);
    ASSERT_TRUE(write_file_atomic(d + "/log", log).ok());
  }
  std::vector<std::string> reasons(const std::string& name) {
    std::vector<std::string> out;
    auto events = store_->events("Pipeline", "alpha", name);  // named: the loop must not outlive it
    for (const Event& e : *events) out.push_back(e.reason);
    return out;
  }

  std::string dir_;
  std::unique_ptr<StateStore> store_;
  metrics::Registry registry_;
  std::unique_ptr<LocalExecutor> executor_;
  std::unique_ptr<Reconciler> reconciler_;
  std::unique_ptr<ModelRegistry> models_;
  std::unique_ptr<PipelineController> controller_;
};

TEST_F(PipelineControllerTest, JobStepsThenAGateThatHoldsOrFails) {
  const std::string steps = "    - {name: eval, job: {command: ['true']}}\n"
                            "    - {name: gate, gate: {condition: 'perplexity <= 6'}}\n";
  submit("good", steps);
  submit("bad", steps);
  ASSERT_TRUE(controller_->reconcile(100).ok());
  for (const char* p : {"good", "bad"}) {
    PipelineObject o = get(p);
    EXPECT_EQ(o.status.phase, PipelinePhase::kRunning);
    EXPECT_EQ(o.status.steps[0].phase, StepPhase::kRunning);
    EXPECT_EQ(o.status.steps[1].phase, StepPhase::kPending);
    auto job = store_->get_job("alpha", std::string(p) + "-eval");
    ASSERT_TRUE(job.ok() && *job);
    EXPECT_EQ((*job)->metadata.labels.at("pipelineUid"), o.metadata.uid);
    EXPECT_EQ((*job)->spec.queue, "alpha-q");  // through submit_job
  }
  const int64_t rv = get("good").metadata.resource_version;
  ASSERT_TRUE(controller_->reconcile(101).ok());  // nothing ended: nothing written
  EXPECT_EQ(get("good").metadata.resource_version, rv);
  end_job("good-eval", JobPhase::kSucceeded, "tokens 10 | loss 1.5 | perplexity 4.5\n");
  end_job("bad-eval", JobPhase::kSucceeded, "tokens 10 | loss 2.5 | perplexity 12.2\n");
  ASSERT_TRUE(controller_->reconcile(102).ok());
  PipelineObject good = get("good"), bad = get("bad");
  EXPECT_EQ(good.status.phase, PipelinePhase::kSucceeded);
  EXPECT_EQ(good.status.steps[0].metrics.at("perplexity").as_double(), 4.5);
  EXPECT_EQ(good.status.steps[1].message, "passed: perplexity 4.5 <= 6");
  EXPECT_EQ(bad.status.phase, PipelinePhase::kFailed);
  EXPECT_EQ(bad.status.reason, "GateFailed");
  EXPECT_EQ(bad.status.message, "step gate failed: perplexity of step eval is 12.2, which fails 'perplexity <= 6' (condition: perplexity <= 6)");
  EXPECT_EQ(reasons("good"), (std::vector<std::string>{"Started", "StepStarted", "StepSucceeded", "GatePassed", "Succeeded"}));
  EXPECT_EQ(reasons("bad").back(), "GateFailed");
  ASSERT_TRUE(controller_->reconcile(103).ok());  // ended pipelines are left alone
  EXPECT_EQ(get("bad").metadata.resource_version, bad.metadata.resource_version);
}

TEST_F(PipelineControllerTest, AFailedJobFailsThePipelineAndSkipsTheRest) {
  submit("p", "    - {name: a, job: {command: ['false']}}\n    - {name: b, job: {command: ['true']}}\n");
  ASSERT_TRUE(controller_->reconcile(100).ok());
  end_job("p-a", JobPhase::kFailed, "boom\n");
  ASSERT_TRUE(controller_->reconcile(101).ok());
  PipelineObject p = get("p");
  EXPECT_EQ(p.status.phase, PipelinePhase::kFailed);
  EXPECT_EQ(p.status.reason, "StepFailed");
  EXPECT_EQ(p.status.steps[1].phase, StepPhase::kSkipped);
  EXPECT_FALSE(*store_->get_job("alpha", "p-b"));
}

TEST_F(PipelineControllerTest, CancelStopsTheJobOfALostWriteAndEndsWhenItHasStopped) {
  PipelineObject p = submit("p", "    - {name: a, job: {command: [sleep, '100']}}\n    - {name: b, job: {command: ['true']}}\n");
  // The job was submitted in a round whose pipeline write was lost: the pipeline still says
  // Pending for step a, and a cancel arrives.
  JobObject orphan;
  orphan.metadata.ns = "alpha", orphan.metadata.name = "p-a";
  orphan.metadata.labels = {{"pipeline", "p"}, {"pipelineUid", p.metadata.uid}, {"step", "a"}};
  orphan.spec = p.spec.steps[0].job;
  orphan.spec.queue = "alpha-q";
  ASSERT_TRUE(store_->create_job(&orphan, {}).ok());
  StoredObject o = **store_->get("Pipeline", "alpha", "p");
  o.metadata.deletion_timestamp = "2026-12-01T00:00:00Z";
  ASSERT_TRUE(store_->update(&o, {}).ok());
  ASSERT_TRUE(controller_->reconcile(100).ok());
  EXPECT_FALSE((**store_->get_job("alpha", "p-a")).metadata.deletion_timestamp.empty());
  p = get("p");
  EXPECT_EQ(p.status.phase, PipelinePhase::kRunning);  // until the job has stopped
  EXPECT_EQ(p.status.steps[1].phase, StepPhase::kCancelled);
  end_job("p-a", JobPhase::kCancelled, "");
  ASSERT_TRUE(controller_->reconcile(101).ok());
  p = get("p");
  EXPECT_EQ(p.status.phase, PipelinePhase::kCancelled);
  EXPECT_EQ(p.status.steps[0].phase, StepPhase::kCancelled);
  EXPECT_FALSE(*store_->get_job("alpha", "p-b"));
}

TEST_F(PipelineControllerTest, AJobOfTheSameNameFromElsewhereFailsTheStep) {
  JobObject other;
  other.metadata.ns = "alpha", other.metadata.name = "p-a";
  other.spec.command = {"true"};
  other.spec.queue = "alpha-q";
  ASSERT_TRUE(store_->create_job(&other, {}).ok());
  submit("p", "    - {name: a, job: {command: ['true']}}\n");
  ASSERT_TRUE(controller_->reconcile(100).ok());
  EXPECT_EQ(get("p").status.message, "step a failed: a job named p-a exists and is not this pipeline's");
}

}  // namespace
}  // namespace koi::cluster
