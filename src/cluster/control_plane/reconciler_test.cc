#include "cluster/control_plane/reconciler.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <set>

#include "base/file.h"
#include "cluster/control_plane/admission.h"
#include "cluster/simulator.h"

namespace koi::cluster {
namespace {

// Records what the reconciler asks for; replicas end when a test says so.
class FakeExecutor : public Executor {
 public:
  std::string name() const override { return "fake"; }
  std::vector<NodeSpec> inventory() const override { return nodes; }
  Result<std::vector<ReplicaHandle>> launch(const std::vector<ReplicaLaunch>& gang) override {
    if (fail_launch) return Status::unavailable("no slots");
    std::vector<ReplicaHandle> out;
    for (const ReplicaLaunch& r : gang) {
      ReplicaHandle h{"f" + std::to_string(next_++), r.dir};
      launched.push_back(r);
      states[h.id] = ReplicaStatus{};
      out.push_back(h);
    }
    return out;
  }
  bool adopt(const ReplicaHandle& r) override { return states.count(r.id) && states[r.id].state == ReplicaState::kRunning; }
  std::optional<ReplicaHandle> find(const std::string& dir) override {
    auto it = orphans.find(dir);
    return it == orphans.end() ? std::nullopt : std::optional<ReplicaHandle>(it->second);
  }
  ReplicaStatus status(const ReplicaHandle& r) override {
    auto it = states.find(r.id);
    if (it == states.end()) return ReplicaStatus{ReplicaState::kLost, 0, 0, "unknown"};
    return it->second;
  }
  Status signal(const ReplicaHandle& r, int sig) override {
    signals.push_back(r.id + ":" + std::to_string(sig));
    if (exit_on_signal && states.count(r.id)) states[r.id] = ReplicaStatus{ReplicaState::kExited, 0, sig, "signalled"};
    return ok_status();
  }
  Result<std::string> logs(const ReplicaHandle&, int64_t, int64_t) const override { return std::string("last words\n"); }
  void detach() override {}

  void exit_all(int code) {
    for (auto& [id, s] : states) {
      if (s.state == ReplicaState::kRunning) s = ReplicaStatus{ReplicaState::kExited, code, 0, "exited"};
    }
  }
  int running() const {
    int n = 0;
    for (const auto& [id, s] : states) n += s.state == ReplicaState::kRunning;
    return n;
  }

  std::vector<NodeSpec> nodes;  // what it reports each round (the fixture's cluster)
  std::vector<ReplicaLaunch> launched;
  std::map<std::string, ReplicaStatus> states;
  std::vector<std::string> signals;
  std::map<std::string, ReplicaHandle> orphans;  // dir -> a replica no record names
  bool fail_launch = false;
  bool exit_on_signal = false;

 private:
  int next_ = 0;
};

class ReconcilerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = *make_temp_dir("koi-cp-reconcile");
    auto opened = StateStore::open("sqlite:" + dir_ + "/cp.db");
    store_ = std::move(opened).value();
    NodeSpec node;
    node.name = "n0", node.gpu_type = "H100", node.gpu_count = 4, node.cpu_milli = 16000, node.memory_mib = 65536;
    QueueSpec qa, qb;
    qa.name = "qa", qa.tenant = "alpha", qb.name = "qb", qb.tenant = "beta";
    cluster_ = make_cluster({node}, {qa, qb});
  }
  void TearDown() override {
    reconciler_.reset();
    store_.reset();
    remove_all(dir_);
  }
  Reconciler& reconciler(const std::string& policy = "priority") {
    exec_.nodes = cluster_.nodes;
    reconciler_ = std::make_unique<Reconciler>(*store_, exec_, cluster_, registry_,
                                               ReconcilerOptions{dir_ + "/work", "/bin/koi", *policy_by_name(policy), 0.1});
    return *reconciler_;
  }
  void submit(const std::string& ns, const std::string& name, const std::string& spec, double t) {
    auto j = parse_job_manifest("apiVersion: koi/v1\nkind: Job\nmetadata: {name: " + name + "}\nspec: " + spec + "\n", ns);
    ASSERT_TRUE(j.ok()) << j.status().message();
    if (j->spec.queue.empty()) j->spec.queue = ns == "alpha" ? "qa" : "qb";
    ASSERT_TRUE(store_->create_job(&*j, {}).ok());
    // Submission order without waiting for the wall clock.
    j->metadata.creation_time = t;
    ASSERT_TRUE(store_->update_job(&*j, {}).ok());
  }
  JobObject get(const std::string& ns, const std::string& name) { return **store_->get_job(ns, name); }
  std::vector<std::string> reasons(const std::string& ns, const std::string& name) {
    std::vector<std::string> out;
    auto events = store_->events("Job", ns, name);
    for (const Event& e : *events) out.push_back(e.reason);
    return out;
  }

  std::string dir_;
  std::unique_ptr<StateStore> store_;
  Cluster cluster_;
  FakeExecutor exec_;
  metrics::Registry registry_;
  std::unique_ptr<Reconciler> reconciler_;

  void live_agrees_with_simulator(uint64_t seed);
};

TEST_F(ReconcilerTest, GangsStartWholeOrWaitWithTheReason) {
  Reconciler& r = reconciler();
  submit("alpha", "two", "{command: [x], replicas: 2, resources: {gpu: 1}}", 1);
  submit("alpha", "three", "{command: [x], replicas: 3, resources: {gpu: 1}}", 2);
  ASSERT_TRUE(r.reconcile_once(100).ok());
  EXPECT_EQ(get("alpha", "two").status.phase, JobPhase::kRunning);
  const JobObject three = get("alpha", "three");
  EXPECT_EQ(three.status.phase, JobPhase::kPending);
  EXPECT_EQ(three.status.reason, "gang");
  EXPECT_FALSE(three.status.message.empty());
  ASSERT_EQ(exec_.launched.size(), 2u);  // never a part of "three"
  EXPECT_EQ(exec_.launched[0].gpus, std::vector<int>{0});
  EXPECT_EQ(exec_.launched[1].gpus, std::vector<int>{1});
  EXPECT_EQ(exec_.launched[1].env.at("KOI_REPLICA"), "1");
  EXPECT_EQ(exec_.launched[1].env.at("KOI_NUM_REPLICAS"), "2");
  EXPECT_EQ(exec_.launched[1].dir, dir_ + "/work/alpha/two/1/1");

  exec_.exit_all(0);
  ASSERT_TRUE(r.reconcile_once(101).ok());
  EXPECT_EQ(get("alpha", "two").status.phase, JobPhase::kSucceeded);
  EXPECT_EQ(get("alpha", "three").status.phase, JobPhase::kRunning);
  EXPECT_EQ(exec_.launched.size(), 5u);
  EXPECT_EQ(reasons("alpha", "two"), (std::vector<std::string>{"Admitted", "Started", "Completed"}));
  EXPECT_EQ(reasons("alpha", "three"), (std::vector<std::string>{"Waiting", "Admitted", "Started"}));
}

TEST_F(ReconcilerTest, GpuSharesAndTopologyReachPlan) {
  NodeSpec a, b;
  a.name = "n0", a.gpu_type = "H100", a.gpu_count = 4, a.cpu_milli = 16000, a.memory_mib = 65536, a.leaf_switch = "leaf-1";
  b = a;
  b.name = "n1", b.leaf_switch = "leaf-2";
  QueueSpec qa;
  qa.name = "qa", qa.tenant = "alpha";
  cluster_ = make_cluster({a, b}, {qa});
  Reconciler& r = reconciler();
  submit("alpha", "wide", "{command: [x], replicas: 2, topology: leafSwitch, resources: {gpu: 3}}", 1);
  submit("alpha", "half-a", "{command: [x], resources: {gpu: 0.5}}", 2);
  submit("alpha", "half-b", "{command: [x], resources: {gpu: 0.5}}", 3);
  ASSERT_TRUE(r.reconcile_once(100).ok());
  // Two replicas of 3 GPUs fit the cluster (one per node) but not one leaf: it waits.
  const JobObject wide = get("alpha", "wide");
  EXPECT_EQ(wide.status.phase, JobPhase::kPending);
  EXPECT_FALSE(wide.status.reason.empty());
  EXPECT_FALSE(wide.status.message.empty());
  // Two halves share one device.
  const JobObject ha = get("alpha", "half-a"), hb = get("alpha", "half-b");
  ASSERT_EQ(ha.status.phase, JobPhase::kRunning);
  ASSERT_EQ(hb.status.phase, JobPhase::kRunning);
  EXPECT_EQ(ha.status.replicas[0].node, hb.status.replicas[0].node);
  EXPECT_EQ(ha.status.replicas[0].gpus, hb.status.replicas[0].gpus);
  ASSERT_EQ(ha.status.replicas[0].gpus.size(), 1u);

  // Once the halves are done, a gang that fits one leaf lands on one node.
  exec_.exit_all(0);
  submit("alpha", "narrow", "{command: [x], replicas: 2, topology: leafSwitch, resources: {gpu: 2}}", 4);
  ASSERT_TRUE(r.reconcile_once(101).ok());
  const JobObject narrow = get("alpha", "narrow");
  ASSERT_EQ(narrow.status.phase, JobPhase::kRunning);
  EXPECT_EQ(narrow.status.replicas[0].node, narrow.status.replicas[1].node);
  EXPECT_EQ(get("alpha", "wide").status.phase, JobPhase::kPending);
}

TEST_F(ReconcilerTest, FailuresBackOffExponentiallyThenFailWithTheExitCode) {
  Reconciler& r = reconciler();
  submit("alpha", "flaky", "{command: [x], restartPolicy: {maxRestarts: 2, backoffSeconds: 10}}", 1);
  ASSERT_TRUE(r.reconcile_once(100).ok());
  exec_.exit_all(3);
  ASSERT_TRUE(r.reconcile_once(101).ok());
  JobObject j = get("alpha", "flaky");
  EXPECT_EQ(j.status.phase, JobPhase::kRestarting);
  EXPECT_EQ(j.status.restarts, 1);
  EXPECT_EQ(j.status.next_attempt_time, 111);
  ASSERT_TRUE(r.reconcile_once(110).ok());
  EXPECT_EQ(exec_.launched.size(), 1u);  // still backing off
  ASSERT_TRUE(r.reconcile_once(111).ok());
  EXPECT_EQ(exec_.launched.size(), 2u);
  EXPECT_EQ(exec_.launched[1].dir, dir_ + "/work/alpha/flaky/2/0");
  exec_.exit_all(3);
  ASSERT_TRUE(r.reconcile_once(112).ok());
  EXPECT_EQ(get("alpha", "flaky").status.next_attempt_time, 132);  // 10 * 2^1
  ASSERT_TRUE(r.reconcile_once(132).ok());
  exec_.exit_all(3);
  ASSERT_TRUE(r.reconcile_once(133).ok());
  j = get("alpha", "flaky");
  EXPECT_EQ(j.status.phase, JobPhase::kFailed);
  EXPECT_EQ(j.status.reason, "RestartBudgetExhausted");
  EXPECT_EQ(j.status.last_exit_code, 3);
  EXPECT_EQ(j.status.restarts, 2);
  EXPECT_EQ(j.status.attempts, 3);
  EXPECT_EQ(j.status.log_tail, "last words\n");
  EXPECT_EQ(j.status.message, "replica 0 exited with status 3; restart budget spent (2 of maxRestarts 2)");
  EXPECT_EQ(registry_.value("koi_cluster_restarts_total", {{"cause", "failure"}}), 2);
}

TEST_F(ReconcilerTest, ExitCodeListsAndLostReplicasDoNotSpendTheBudget) {
  Reconciler& r = reconciler();
  submit("alpha", "never", "{command: [x], restartPolicy: {neverRetryExitCodes: [2]}}", 1);
  submit("alpha", "retry", "{command: [x], restartPolicy: {maxRestarts: 0, backoffSeconds: 0, retryExitCodes: [75]}}", 2);
  ASSERT_TRUE(r.reconcile_once(100).ok());
  exec_.states["f0"] = ReplicaStatus{ReplicaState::kExited, 2, 0, ""};
  exec_.states["f1"] = ReplicaStatus{ReplicaState::kExited, 75, 0, ""};
  ASSERT_TRUE(r.reconcile_once(101).ok());
  EXPECT_EQ(get("alpha", "never").status.phase, JobPhase::kFailed);
  EXPECT_EQ(get("alpha", "never").status.reason, "NeverRetryExitCode");
  // Backoff 0: requeued and started again in the same round, the budget (0) untouched.
  JobObject retry = get("alpha", "retry");
  EXPECT_EQ(retry.status.phase, JobPhase::kRunning);
  EXPECT_EQ(retry.status.attempts, 2);
  EXPECT_EQ(retry.status.restarts, 0);
  exec_.states.erase(retry.status.replicas[0].id);  // the executor no longer knows it: lost
  ASSERT_TRUE(r.reconcile_once(103).ok());
  retry = get("alpha", "retry");
  EXPECT_EQ(retry.status.phase, JobPhase::kRunning);
  EXPECT_EQ(retry.status.attempts, 3);
  EXPECT_EQ(retry.status.restarts, 0);
  EXPECT_EQ(retry.status.infra_restarts, 2);
  EXPECT_EQ(reasons("alpha", "retry"), (std::vector<std::string>{"Admitted", "Started", "RetryExitCode", "Admitted",
                                                                 "Started", "ReplicaLost", "Admitted",
                                                                 "Started"}));
}

TEST_F(ReconcilerTest, PreemptionStopsTheVictimGracefullyBeforeThePreemptorStarts) {
  Reconciler& r = reconciler();
  submit("beta", "low", "{command: [x], replicas: 4, resources: {gpu: 1}, priority: 0, terminationGracePeriodSeconds: 30}", 1);
  ASSERT_TRUE(r.reconcile_once(100).ok());
  submit("alpha", "high", "{command: [x], replicas: 2, resources: {gpu: 1}, priority: 10}", 2);
  ASSERT_TRUE(r.reconcile_once(101).ok());
  EXPECT_EQ(exec_.signals, (std::vector<std::string>{"f0:15", "f0:18", "f1:15", "f1:18", "f2:15", "f2:18", "f3:15",
                                                      "f3:18"}));  // SIGTERM, SIGCONT
  EXPECT_EQ(get("beta", "low").status.terminating, "Preempted");
  EXPECT_EQ(get("alpha", "high").status.reason, "Preempting");
  EXPECT_EQ(exec_.launched.size(), 4u);  // not before the victim is gone
  ASSERT_TRUE(r.reconcile_once(131).ok());  // grace over: SIGKILL
  EXPECT_EQ(exec_.signals.size(), 12u);
  EXPECT_EQ(exec_.signals[8], "f0:9");
  exec_.exit_all(0);
  ASSERT_TRUE(r.reconcile_once(132).ok());
  const JobObject low = get("beta", "low");
  EXPECT_EQ(low.status.phase, JobPhase::kPreempted);
  EXPECT_EQ(low.status.restarts, 0);
  EXPECT_EQ(low.status.preempted_by, "alpha/high");
  EXPECT_EQ(get("alpha", "high").status.phase, JobPhase::kRunning);
  EXPECT_EQ(exec_.launched.size(), 6u);
  EXPECT_EQ(registry_.value("koi_cluster_preemptions_total", {{"queue", "qb"}}), 1);
  exec_.exit_all(0);
  ASSERT_TRUE(r.reconcile_once(133).ok());
  ASSERT_TRUE(r.reconcile_once(134).ok());
  EXPECT_EQ(get("beta", "low").status.phase, JobPhase::kRunning);  // resumed
  EXPECT_EQ(get("beta", "low").status.attempts, 2);
}

TEST_F(ReconcilerTest, TrainRestartsPassResume) {
  Reconciler& r = reconciler();
  submit("alpha", "t", "{kind: train, recipe: /r.yaml, args: [--steps, '5'], checkpointDir: /ck}", 1);
  ASSERT_TRUE(r.reconcile_once(100).ok());
  EXPECT_EQ(exec_.launched[0].argv,
            (std::vector<std::string>{"/bin/koi", "train", "--config", "/r.yaml", "--out", "/ck", "--steps", "5"}));
  EXPECT_EQ(exec_.launched[0].env.at("KOI_CHECKPOINT_DIR"), "/ck");
  exec_.exit_all(1);
  ASSERT_TRUE(r.reconcile_once(101).ok());
  ASSERT_TRUE(r.reconcile_once(200).ok());
  ASSERT_EQ(exec_.launched.size(), 2u);
  EXPECT_EQ(exec_.launched[1].argv.back(), "--resume");
}

TEST_F(ReconcilerTest, CancelStopsRunningAndPendingJobs) {
  Reconciler& r = reconciler();
  submit("alpha", "run", "{command: [x], replicas: 4, resources: {gpu: 1}}", 1);
  submit("alpha", "wait", "{command: [x], resources: {gpu: 1}}", 2);
  ASSERT_TRUE(r.reconcile_once(100).ok());
  for (const char* n : {"run", "wait"}) {
    JobObject j = get("alpha", n);
    j.metadata.deletion_timestamp = "now";
    ASSERT_TRUE(store_->update_job(&j, {}).ok());
  }
  exec_.exit_on_signal = true;
  ASSERT_TRUE(r.reconcile_once(101).ok());
  EXPECT_EQ(get("alpha", "wait").status.phase, JobPhase::kCancelled);
  EXPECT_EQ(get("alpha", "run").status.phase, JobPhase::kCancelled);
  EXPECT_EQ(exec_.launched.size(), 4u);
}

TEST_F(ReconcilerTest, RecoverAdoptsLiveReplicasAndJudgesDeadOnesByTheirExit) {
  submit("alpha", "alive", "{command: [x]}", 1);
  submit("alpha", "done", "{command: [x]}", 2);
  ASSERT_TRUE(reconciler().reconcile_once(100).ok());
  exec_.states["f1"] = ReplicaStatus{ReplicaState::kExited, 0, 0, ""};  // ended while the control plane was down
  Reconciler& again = reconciler();  // a restarted control plane over the same store
  ASSERT_TRUE(again.recover(200).ok());
  ASSERT_TRUE(again.reconcile_once(200).ok());
  EXPECT_EQ(get("alpha", "alive").status.phase, JobPhase::kRunning);
  EXPECT_EQ(get("alpha", "done").status.phase, JobPhase::kSucceeded);
  EXPECT_EQ(reasons("alpha", "alive").back(), "Adopted");
  EXPECT_EQ(exec_.launched.size(), 2u);
}

TEST_F(ReconcilerTest, RecoverStopsWhatAnInterruptedLaunchStartedAndRequeues) {
  submit("alpha", "j", "{command: [x]}", 1);
  JobObject j = get("alpha", "j");
  j.status.phase = JobPhase::kAdmitted;  // the control plane died between Admitted and Running
  j.status.attempts = 1;
  j.status.replicas.push_back({"", dir_ + "/work/alpha/j/1/0", 0, {}, false, 0, 0, false, ""});
  ASSERT_TRUE(store_->update_job(&j, {}).ok());
  exec_.orphans[dir_ + "/work/alpha/j/1/0"] = ReplicaHandle{"orphan", dir_ + "/work/alpha/j/1/0"};
  Reconciler& r = reconciler();
  ASSERT_TRUE(r.recover(100).ok());
  EXPECT_EQ(exec_.signals, std::vector<std::string>{"orphan:9"});
  j = get("alpha", "j");
  EXPECT_EQ(j.status.phase, JobPhase::kRestarting);
  EXPECT_EQ(j.status.reason, "ControlPlaneRestart");
  EXPECT_EQ(j.status.restarts, 0);
  ASSERT_TRUE(r.reconcile_once(100).ok());
  EXPECT_EQ(get("alpha", "j").status.phase, JobPhase::kRunning);
  EXPECT_EQ(get("alpha", "j").status.attempts, 2);
}

TEST_F(ReconcilerTest, AQueueChangedAtRunTimeAppliesFromTheNextRound) {
  cluster_.queues[0].quota["gpu"] = Quota{1000, 0, -1};
  cluster_ = make_cluster(cluster_.nodes, cluster_.queues);
  Reconciler& r = reconciler();
  submit("alpha", "pair", "{command: [x], replicas: 2, resources: {gpu: 1}}", 1);
  ASSERT_TRUE(r.reconcile_once(100).ok());
  EXPECT_EQ(get("alpha", "pair").status.reason, "quota");
  QueueSpec bigger = r.cluster()->queues[0];
  bigger.quota["gpu"].nominal = 2000;
  r.set_queue(bigger);
  EXPECT_EQ(r.cluster()->queues[0].quota.at("gpu").nominal, 2000);
  ASSERT_TRUE(r.reconcile_once(101).ok());
  EXPECT_EQ(get("alpha", "pair").status.phase, JobPhase::kRunning);
}

TEST_F(ReconcilerTest, AJobWhoseQueueLeftTheConfigWaitsAndSaysSo) {
  Reconciler& r = reconciler();
  submit("alpha", "orphan", "{command: [x], queue: gone}", 1);
  ASSERT_TRUE(r.reconcile_once(100).ok());
  const JobObject j = get("alpha", "orphan");
  EXPECT_EQ(j.status.phase, JobPhase::kPending);
  EXPECT_EQ(j.status.reason, "NoQueue");
  EXPECT_TRUE(exec_.launched.empty());
}

TEST_F(ReconcilerTest, ANodeTheExecutorReportsDownTakesNoWorkUntilItIsBack) {
  Reconciler& r = reconciler();
  exec_.nodes[0].state = "down+not_responding";
  submit("alpha", "a", "{command: [x], resources: {gpu: 1}}", 1);
  ASSERT_TRUE(r.reconcile_once(10).ok());
  EXPECT_EQ(get("alpha", "a").status.phase, JobPhase::kPending);
  EXPECT_FALSE(get("alpha", "a").status.reason.empty());
  EXPECT_TRUE(exec_.launched.empty());
  EXPECT_EQ(r.cluster()->nodes[0].gpu_count, 0);  // what plan() saw
  exec_.nodes[0].state = "";
  ASSERT_TRUE(r.reconcile_once(11).ok());
  EXPECT_EQ(get("alpha", "a").status.phase, JobPhase::kRunning);
  ASSERT_EQ(exec_.launched.size(), 1u);
  EXPECT_EQ(exec_.launched[0].node_name, "n0");
  EXPECT_EQ(exec_.launched[0].cpu_milli, 1000);
  EXPECT_FALSE(exec_.launched[0].mpi);
}

TEST_F(ReconcilerTest, PausedAdmissionStartsNothingButStillRecordsExits) {
  Reconciler& r = reconciler();
  submit("alpha", "running", "{command: [x], resources: {gpu: 1}}", 1);
  ASSERT_TRUE(r.reconcile_once(10).ok());
  ASSERT_EQ(get("alpha", "running").status.phase, JobPhase::kRunning);
  r.set_admission_paused(true);
  EXPECT_TRUE(r.admission_paused());
  submit("alpha", "waits", "{command: [x], resources: {gpu: 1}}", 2);
  exec_.states["f0"] = ReplicaStatus{ReplicaState::kExited, 0, 0, ""};
  const int64_t rounds = r.rounds();
  ASSERT_TRUE(r.reconcile_once(11).ok());
  EXPECT_EQ(r.rounds(), rounds + 1);
  EXPECT_EQ(get("alpha", "running").status.phase, JobPhase::kSucceeded);  // the exit is recorded
  EXPECT_EQ(get("alpha", "waits").status.phase, JobPhase::kPending);
  EXPECT_EQ(get("alpha", "waits").status.reason, "AdmissionPaused");
  EXPECT_EQ(exec_.launched.size(), 1u);
  EXPECT_EQ(registry_.value("koi_cluster_admission_paused", {}), 1);
  r.set_admission_paused(false);
  ASSERT_TRUE(r.reconcile_once(12).ok());
  EXPECT_EQ(get("alpha", "waits").status.phase, JobPhase::kRunning);
  EXPECT_EQ(exec_.launched.size(), 2u);
}

TEST(AdmissionRequest, ParsesStrictly) {
  auto ok = parse_admission_request(R"({"paused": true, "reason": "maintenance"})");
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_TRUE(ok->paused);
  EXPECT_EQ(ok->reason, "maintenance");
  EXPECT_EQ(parse_admission_request("{}").status().message(), "paused: is required (true or false)");
  EXPECT_EQ(parse_admission_request(R"({"paused": "soon"})").status().message(), "paused: must be true or false");
  EXPECT_EQ(parse_admission_request(R"({"paused": false, "why": "x"})").status().message(), "why: unknown field");
  EXPECT_FALSE(parse_admission_request("[1]").ok());
}

TEST_F(ReconcilerTest, AdmissionPauseIsStoredAndRestoredAtStart) {
  Reconciler& r = reconciler();
  const Principal admin{"ops", true}, tenant{"alpha", false};
  Reply denied = admission_route(tenant, boost::beast::http::verb::put, R"({"paused": true})", *store_, r);
  EXPECT_EQ(denied.status, 403);
  EXPECT_FALSE(r.admission_paused());
  Reply paused = admission_route(admin, boost::beast::http::verb::put, R"({"paused": true, "reason": "upgrade"})", *store_, r);
  ASSERT_EQ(paused.status, 200) << paused.body;
  EXPECT_TRUE(r.admission_paused());
  Reply bad = admission_route(admin, boost::beast::http::verb::put, R"({"pause": true})", *store_, r);
  EXPECT_EQ(bad.status, 400) << bad.body;
  Reconciler& restarted = reconciler();  // a control plane started again over the same store
  EXPECT_FALSE(restarted.admission_paused());
  ASSERT_TRUE(restore_admission(*store_, restarted).ok());
  EXPECT_TRUE(restarted.admission_paused());
  const boost::json::value shown = boost::json::parse(admission_route(tenant, boost::beast::http::verb::get, "", *store_, restarted).body);
  EXPECT_EQ(shown.at("paused").as_bool(), true);
  EXPECT_EQ(shown.at("by").as_string(), "ops");
  EXPECT_EQ(shown.at("reason").as_string(), "upgrade");
}

TEST_F(ReconcilerTest, LaunchFailureIsAnInfrastructureRetry) {
  Reconciler& r = reconciler();
  exec_.fail_launch = true;
  submit("alpha", "j", "{command: [x]}", 1);
  ASSERT_TRUE(r.reconcile_once(100).ok());
  JobObject j = get("alpha", "j");
  EXPECT_EQ(j.status.phase, JobPhase::kRestarting);
  EXPECT_EQ(j.status.reason, "LaunchFailed");
  EXPECT_EQ(j.status.restarts, 0);
  exec_.fail_launch = false;
  ASSERT_TRUE(r.reconcile_once(105).ok());
  EXPECT_EQ(get("alpha", "j").status.phase, JobPhase::kRunning);
}

// Live scheduling agrees with `koi sim`: 30 jobs of two tenants with borrowing in a cohort,
// gangs of 1-3 GPUs on 4 GPUs, some of higher priority, replayed through the simulator and
// through the reconciler (store, fake executor, the same clock). At every instant both admit
// and preempt the same jobs. Several random workloads (80 agreed when this was written).
TEST_F(ReconcilerTest, LiveSchedulingAgreesWithTheSimulator) {
  for (uint64_t seed : {12345, 1, 4, 7, 11}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    auto opened = StateStore::open("sqlite:" + dir_ + "/sim-" + std::to_string(seed) + ".db");
    ASSERT_TRUE(opened.ok());
    store_ = std::move(opened).value();
    exec_ = FakeExecutor();
    live_agrees_with_simulator(seed);
  }
}

void ReconcilerTest::live_agrees_with_simulator(uint64_t seed) {
  QueueSpec qa, qb;
  qa.name = "qa", qa.tenant = "alpha", qa.cohort = "c", qa.quota["gpu"] = Quota{2000, 2000, -1};
  qb.name = "qb", qb.tenant = "beta", qb.cohort = "c", qb.quota["gpu"] = Quota{2000, 2000, -1};
  NodeSpec node;
  node.name = "n0", node.gpu_type = "H100", node.gpu_count = 4, node.cpu_milli = 64000, node.memory_mib = 1 << 20;
  cluster_ = make_cluster({node}, {qa, qb});

  struct Spec {
    std::string ns, name;
    int replicas, priority;
    double submit, duration;
  };
  std::vector<Spec> specs;
  uint64_t rng = seed;
  auto next = [&](int n) {
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<int>((rng >> 33) % n);
  };
  std::vector<Job> sim_jobs;
  for (int i = 0; i < 30; ++i) {
    Spec s{next(2) ? "alpha" : "beta", "j" + std::to_string(i), 1 + next(3), next(3) == 0 ? 5 : 0,
           100 + 0.7 * i, static_cast<double>(1 + next(6))};
    Job j;
    j.id = i, j.name = s.ns + "/" + s.name, j.queue = s.ns == "alpha" ? 0 : 1, j.priority = s.priority;
    j.request.cpu_milli = 1000, j.request.memory_mib = 1024, j.request.gpus = 1;
    j.min_replicas = j.max_replicas = s.replicas, j.submit_time = s.submit, j.duration = s.duration;
    sim_jobs.push_back(j);
    specs.push_back(s);
  }
  Policy policy = *policy_by_name("koi");
  policy.workload = workload_of(sim_jobs);  // as simulate() derives it from the whole trace

  SimOptions so;
  so.policy = policy;
  so.record_decisions = true;
  auto sim = simulate(cluster_, sim_jobs, so);
  ASSERT_TRUE(sim.ok()) << sim.status().message();
  std::vector<std::vector<std::string>> simulated;  // per instant: "admit ns/name", "preempt ns/name", sorted
  for (const SimStep& s : sim->decisions) {
    std::vector<std::string> step;
    for (const std::string& n : s.admitted) step.push_back("admit " + n);
    for (const std::string& n : s.preempted) step.push_back("preempt " + n);
    std::sort(step.begin(), step.end());
    simulated.push_back(step);
  }
  ASSERT_GT(sim->preemptions, 0);  // the case exercises preemption

  exec_.nodes = cluster_.nodes;
  reconciler_ = std::make_unique<Reconciler>(*store_, exec_, cluster_, registry_,
                                             ReconcilerOptions{dir_ + "/work", "/bin/koi", policy, 0.1});
  exec_.exit_on_signal = true;
  std::vector<std::vector<std::string>> live;
  size_t arrived = 0;
  int64_t cursor = 0;
  const std::string work = dir_ + "/work/";
  auto job_of_replica = [&](const std::string& id) {  // "f<k>" -> "ns/name"
    const std::string dir = exec_.launched[std::stoi(id.substr(1))].dir.substr(work.size());
    return dir.substr(0, dir.find('/', dir.find('/') + 1));
  };
  for (int guard = 0; guard < 1000; ++guard) {
    double t = std::numeric_limits<double>::infinity();
    if (arrived < specs.size()) t = specs[arrived].submit;
    auto active = store_->list_jobs("", true);
    ASSERT_TRUE(active.ok());
    std::map<std::string, double> ends;  // running job -> its end
    for (const JobObject& j : *active) {
      if (j.status.phase == JobPhase::kRunning) {
        const double end = j.status.start_time + j.spec.max_runtime_seconds;
        ends[j.metadata.ns + "/" + j.metadata.name] = end;
        t = std::min(t, end);
      }
    }
    if (std::isinf(t)) break;
    for (auto& [id, st] : exec_.states) {
      if (st.state == ReplicaState::kRunning && ends.count(job_of_replica(id)) && ends[job_of_replica(id)] <= t) {
        st = ReplicaStatus{ReplicaState::kExited, 0, 0, "done"};
      }
    }
    while (arrived < specs.size() && specs[arrived].submit <= t) {
      const Spec& s = specs[arrived++];
      submit(s.ns, s.name,
             fmt::format("{{command: [x], replicas: {}, resources: {{gpu: 1, cpu: 1, memoryMiB: 1024}}, priority: {}, "
                         "maxRuntimeSeconds: {}, terminationGracePeriodSeconds: 0}}",
                         s.replicas, s.priority, s.duration),
             s.submit);
    }
    // Rounds at this instant until one admits and preempts nothing, as the simulator plans
    // again at an instant while its plans preempt (a preemptor starts in the round after its
    // victims stopped; here at once: the fake executor ends a replica when it is signalled,
    // and the grace period is 0).
    std::vector<std::string> step;
    for (int round = 0; round < 64; ++round) {
      ASSERT_TRUE(reconciler_->reconcile_once(t).ok());
      auto changes = store_->changes(cursor, "", 100000);
      ASSERT_TRUE(changes.ok());
      bool decided = false;
      for (const Change& c : *changes) {
        cursor = c.resource_version;
        if (c.type != "EVENT") continue;
        const boost::json::value e = boost::json::parse(c.body);
        const std::string reason(e.at("reason").as_string());
        const std::string who = c.ns + "/" + c.name;
        if (reason == "Admitted") step.push_back("admit " + who);
        if (reason == "Preempted") step.push_back("preempt " + who);
        decided = decided || reason == "Admitted" || reason == "Preempted" || reason == "Stopping";
      }
      if (!decided) break;
    }
    std::sort(step.begin(), step.end());
    if (!step.empty()) live.push_back(step);
  }
  size_t first_difference = 0;
  while (first_difference < std::min(live.size(), simulated.size()) && live[first_difference] == simulated[first_difference]) {
    ++first_difference;
  }
  EXPECT_EQ(first_difference, simulated.size()) << "live " << live.size() << " instants, simulated " << simulated.size();
  auto show = [](const std::vector<std::vector<std::string>>& v, size_t from) {
    std::string out;
    for (size_t i = from; i < std::min(v.size(), from + 4); ++i) {
      out += "\n  [" + std::to_string(i) + "]";
      for (const std::string& d : v[i]) out += " " + d + ";";
    }
    return out;
  };
  EXPECT_EQ(live, simulated) << "live:" << show(live, first_difference) << "\nsimulated:" << show(simulated, first_difference);
  auto all = store_->list_jobs("", false);
  ASSERT_EQ(all->size(), 30u);
  for (const JobObject& j : *all) EXPECT_EQ(j.status.phase, JobPhase::kSucceeded) << j.metadata.name;
}

}  // namespace
}  // namespace koi::cluster
