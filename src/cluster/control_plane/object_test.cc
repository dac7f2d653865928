#include "cluster/control_plane/object.h"

#include <gtest/gtest.h>

#include "cluster/control_plane/config.h"

namespace koi::cluster {
namespace {

std::string manifest(const std::string& spec, const std::string& metadata = "{name: train-1}") {
  return "apiVersion: koi/v1\nkind: Job\nmetadata: " + metadata + "\nspec: " + spec + "\n";
}

TEST(JobManifest, ParsesAFullSpec) {
  auto job = parse_job_manifest(manifest(R"({kind: command, command: [sh, -c, "exit 0"], replicas: 2,
      resources: {cpu: 1.5, memoryMiB: 512, gpu: 2, gpuType: H100}, queue: q, priority: 5, preemptible: false,
      maxRuntimeSeconds: 60, restartPolicy: {maxRestarts: 2, backoffSeconds: 1, maxBackoffSeconds: 8,
      retryExitCodes: [75], neverRetryExitCodes: [2]}, checkpointDir: /tmp/ck, env: {A: b}, hangTimeoutSeconds: 30,
      terminationGracePeriodSeconds: 5})",
                                                "{name: train-1, labels: {team: x}}"),
                                       "alpha");
  ASSERT_TRUE(job.ok()) << job.status().message();
  EXPECT_EQ(job->metadata.ns, "alpha");
  EXPECT_EQ(job->metadata.labels.at("team"), "x");
  EXPECT_EQ(job->spec.replicas, 2);
  EXPECT_EQ(job->spec.resources.cpu_milli, 1500);
  EXPECT_EQ(job->spec.resources.gpu, 2);
  EXPECT_EQ(job->spec.restart.retry_exit_codes, std::vector<int64_t>{75});
  EXPECT_FALSE(job->spec.preemptible);
  EXPECT_EQ(job->spec.termination_grace_seconds, 5);
}

TEST(JobManifest, JsonBodiesAreAccepted) {
  auto job = parse_job_manifest(
      R"({"apiVersion": "koi/v1", "kind": "Job", "metadata": {"name": "j"}, "spec": {"command": ["true"]}})", "alpha");
  ASSERT_TRUE(job.ok()) << job.status().message();
  EXPECT_EQ(job->spec.command, std::vector<std::string>{"true"});
}

TEST(JobManifest, GpuSharesSlicesAndTopology) {
  auto share = parse_job_manifest(manifest("{command: [x], resources: {gpu: 0.25}}"), "alpha");
  ASSERT_TRUE(share.ok()) << share.status().message();
  EXPECT_EQ(share->spec.resources.gpu, 1);
  EXPECT_EQ(share->spec.resources.gpu_milli, 250);
  auto mig = parse_job_manifest(manifest("{command: [x], resources: {migSlices: 3}}"), "alpha");
  ASSERT_TRUE(mig.ok()) << mig.status().message();
  EXPECT_EQ(mig->spec.resources.gpu, 1);
  EXPECT_EQ(mig->spec.resources.mig_slices, 3);
  auto gang = parse_job_manifest(manifest("{command: [x], replicas: 4, topology: leafSwitch, resources: {gpu: 2}}"), "alpha");
  ASSERT_TRUE(gang.ok()) << gang.status().message();
  EXPECT_EQ(gang->spec.topology, Topology::kLeaf);
  for (const JobObject* j : {&*share, &*mig, &*gang}) {
    auto back = job_from_text(job_json_text(*j));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(job_json_text(*back), job_json_text(*j));
    EXPECT_EQ(back->spec.resources.gpu_milli, j->spec.resources.gpu_milli);
    EXPECT_EQ(back->spec.resources.mig_slices, j->spec.resources.mig_slices);
    EXPECT_EQ(back->spec.topology, j->spec.topology);
  }
}

TEST(JobManifest, RoundTripsThroughJson) {
  auto job = parse_job_manifest(manifest("{command: [echo, hi], replicas: 3, resources: {gpu: 1}}"), "alpha");
  ASSERT_TRUE(job.ok());
  job->status.phase = JobPhase::kRestarting;
  job->status.restarts = 2;
  job->status.last_exit_code = 3;
  job->status.replicas.push_back({"12:34", "/w/a/0", 0, {1, 2}, true, 3, 0, false, ""});
  auto back = job_from_text(job_json_text(*job));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(job_json_text(*back), job_json_text(*job));
}

struct Bad {
  std::string text;
  std::string error;
};

// Each malformed manifest and the exact message it gets (the JSON path first).
TEST(JobManifest, MalformedSpecsNameTheField) {
  const std::vector<Bad> cases = {
      {manifest("{command: [true], replicas: 0}"), "spec.replicas: must be >= 1"},
      {manifest("{command: [true], replicas: 65}"), "spec.replicas: must be <= 64"},
      {manifest("{command: [true], replicas: two}"), "spec.replicas: must be an integer"},
      {manifest("{command: [true], resources: {gpu: -1}}"), "spec.resources.gpu: must be >= 0"},
      {manifest("{command: [true], resources: {gpu: 17}}"), "spec.resources.gpu: must be <= 16"},
      {manifest("{command: [true], resources: {cpu: 0}}"), "spec.resources.cpu: must be >= 0.001"},
      {manifest("{command: [true], resources: {memoryMiB: 0}}"), "spec.resources.memoryMiB: must be >= 1"},
      {manifest("{command: [true], resources: {gpus: 1}}"), "spec.resources.gpus: unknown field"},
      {manifest("{command: [true], resources: {gpu: 1.5}}"), "spec.resources.gpu: must be a whole number of GPUs, or a share of one below 1"},
      {manifest("{command: [true], resources: {gpu: 0.0005}}"), "spec.resources.gpu: a share of a GPU is in thousandths (0.001 to 0.999)"},
      {manifest("{command: [true], resources: {gpu: 2, migSlices: 3}}"), "spec.resources.migSlices: takes slices of one GPU: set gpu to 1 or leave it out"},
      {manifest("{command: [true], resources: {migSlices: 8}}"), "spec.resources.migSlices: must be <= 7"},
      {manifest("{command: [true], replicas: 2, topology: rack}"), "spec.topology: must be one of none, nvlinkDomain, leafSwitch, spine (got 'rack')"},
      {manifest("{command: [true], resources: {gpuType: H100}}"), "spec.resources.gpuType: is set but resources.gpu is 0"},
      {manifest("{command: [true], resources: [1]}"), "spec.resources: must be a map"},
      {manifest("{kind: batch, command: [true]}"), "spec.kind: must be one of train, finetune, eval, command (got 'batch')"},
      {manifest("{kind: command}"), "spec.command: is required for kind command (the argv to run)"},
      {manifest("{command: echo}"), "spec.command: must be a list of strings"},
      {manifest("{command: [[a]]}"), "spec.command[0]: must be a string"},
      {manifest("{kind: train}"), "spec.recipe: is required for kind train (a koi train recipe path)"},
      {manifest("{kind: train, recipe: r.yaml}"), "spec.recipe: must be an absolute path"},
      {manifest("{kind: train, recipe: /r.yaml, command: [x]}"), "spec.command: is not allowed for kind train; use recipe and args"},
      {manifest("{kind: eval}"), "spec.args: kind eval needs args (for koi eval) or a command"},
      {manifest("{command: [true], priority: 1.5}"), "spec.priority: must be an integer"},
      {manifest("{command: [true], preemptible: maybe}"), "spec.preemptible: must be true or false"},
      {manifest("{command: [true], maxRuntimeSeconds: -1}"), "spec.maxRuntimeSeconds: must be >= 0"},
      {manifest("{command: [true], restartPolicy: {maxRestarts: -1}}"), "spec.restartPolicy.maxRestarts: must be >= 0"},
      {manifest("{command: [true], restartPolicy: {backoffSeconds: 10, maxBackoffSeconds: 5}}"),
       "spec.restartPolicy.maxBackoffSeconds: must be >= backoffSeconds"},
      {manifest("{command: [true], restartPolicy: {retryExitCodes: [0]}}"),
       "spec.restartPolicy.retryExitCodes[0]: must be an integer in [1, 255]"},
      {manifest("{command: [true], restartPolicy: {retryExitCodes: [3], neverRetryExitCodes: [3]}}"),
       "spec.restartPolicy.neverRetryExitCodes: exit code 3 is also in retryExitCodes"},
      {manifest("{command: [true], restartPolicy: {maxRetries: 3}}"), "spec.restartPolicy.maxRetries: unknown field"},
      {manifest("{command: [true], checkpointDir: ck}"), "spec.checkpointDir: must be an absolute path"},
      {manifest("{command: [true], env: {1A: x}}"), "spec.env.1A: is not a valid environment variable name"},
      {manifest("{command: [true], env: {KOI_JOB: x}}"), "spec.env.KOI_JOB: is set by the control plane and cannot be overridden"},
      {manifest("{command: [true], env: {A: [x]}}"), "spec.env.A: must be a string"},
      {manifest("{command: [true], hangTimeoutSeconds: x}"), "spec.hangTimeoutSeconds: must be a number"},
      {manifest("{command: [true], replica: 2}"), "spec.replica: unknown field"},
      {manifest("{command: [true]}", "{}"), "metadata.name: is required"},
      {manifest("{command: [true]}", "{name: Big_Name}"),
       "metadata.name: must be 1-63 characters of a-z, 0-9 and '-', starting and ending alphanumeric"},
      {manifest("{command: [true]}", "{name: a, namespace: beta}"),
       "metadata.namespace: 'beta' does not match the request's namespace 'alpha'"},
      {manifest("{command: [true]}", "{name: a, uid: x}"), "metadata.uid: unknown field"},
      {"apiVersion: koi/v2\nkind: Job\nmetadata: {name: a}\nspec: {command: [true]}\n", "apiVersion: must be koi/v1 (got 'koi/v2')"},
      {"apiVersion: koi/v1\nkind: Pod\nmetadata: {name: a}\nspec: {command: [true]}\n", "kind: must be Job (got 'Pod')"},
      {"apiVersion: koi/v1\nkind: Job\nmetadata: {name: a}\n", "spec: is required"},
      {"apiVersion: koi/v1\nkind: Job\nmetadata: {name: a}\nspec: {command: [true]}\nstatus: {phase: Running}\n",
       "status: unknown field"},
      {"[1, 2]", "job manifest: must be a map with apiVersion, kind, metadata, spec"},
      {"", "job manifest is empty"},
  };
  ASSERT_GE(cases.size(), 40u);
  for (const Bad& c : cases) {
    auto job = parse_job_manifest(c.text, "alpha");
    ASSERT_FALSE(job.ok()) << c.text;
    EXPECT_EQ(job.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(job.status().message(), c.error) << c.text;
  }
}

TEST(JobManifest, SyntaxErrorsNameTheLine) {
  auto job = parse_job_manifest("apiVersion: koi/v1\nkind: Job\nspec: {command: [true\n", "alpha");
  ASSERT_FALSE(job.ok());
  EXPECT_NE(job.status().message().find("job manifest: not valid YAML or JSON (line"), std::string::npos)
      << job.status().message();
}

const char* kConfig = R"(
nodes:
  - {name: n0, cpu: 8, memoryMiB: 16384, gpus: {type: H100, count: 4}}
queues:
  - {name: qa, tenant: alpha, cohort: c, quota: {gpu: {nominal: 2, borrowingLimit: 1}}}
tenants:
  - {name: alpha, token: alpha-secret}
admins:
  - {name: ops, token: admin-secret}
)";

TEST(ControlPlaneConfig, ParsesAndHashesTokens) {
  auto c = parse_control_plane_config(kConfig, "cluster.yaml");
  ASSERT_TRUE(c.ok()) << c.status().message();
  ASSERT_EQ(c->tokens.size(), 2u);
  EXPECT_EQ(c->tokens[0].sha256_hex, sha256_hex("alpha-secret"));
  EXPECT_EQ(c->tokens[0].sha256_hex.size(), 64u);
  EXPECT_TRUE(c->tokens[1].principal.admin);
  EXPECT_EQ(c->queues[0].quota.at("gpu").nominal, 2000);
  EXPECT_EQ(c->queues[0].quota.at("gpu").borrowing_limit, 1000);
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(ControlPlaneConfig, ErrorsNameThePath) {
  const std::vector<Bad> cases = {
      {std::string(kConfig) + "extra: 1\n", "cluster.yaml: extra: unknown field"},
      {"nodes: [{name: n0, cpu: 8, memoryMiB: 1, gpus: {count: 2}}]\nqueues: []\n",
       "cluster.yaml: nodes[0].gpus.type: is required when count > 0"},
      {"nodes: [{name: n0, cpu: 8, memoryMiB: 1, disk: 3}]\n", "cluster.yaml: nodes[0].disk: unknown field"},
      {"nodes: [{name: n0, cpu: 8, memoryMiB: 1}]\ntenants: [{name: a, token: aaaaaaaa}]\n"
       "queues: [{name: q, tenant: a, quota: {gpu: {nominal: -1}}}]\n",
       "cluster.yaml: queues[0].quota.gpu.nominal: must be >= 0"},
      {"nodes: [{name: n0, cpu: 8, memoryMiB: 1}]\ntenants: [{name: a, token: aaaaaaaa}]\n"
       "queues: [{name: q, tenant: b}]\n",
       "cluster.yaml: queues[0].tenant: 'b' is not one of the tenants"},
      {"nodes: [{name: n0, cpu: 8, memoryMiB: 1}]\ntenants: [{name: a, token: short}]\n",
       "cluster.yaml: tenants[0].token: must be at least 8 characters"},
      {"policy: magic\n", "cluster.yaml: policy: " + policy_by_name("magic").status().message()},
  };
  for (const Bad& c : cases) {
    auto r = parse_control_plane_config(c.text, "cluster.yaml");
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_EQ(r.status().message(), c.error) << c.text;
  }
}

TEST(QueueManifest, ParsesAndNamesBadFields) {
  const std::vector<std::string> tenants = {"alpha"};
  auto q = parse_queue_manifest("apiVersion: koi/v1\nkind: Queue\nmetadata: {name: qa}\n"
                                "spec: {tenant: alpha, cohort: c, priority: 2, quota: {gpu: {nominal: 3}}}\n",
                                "qa", tenants);
  ASSERT_TRUE(q.ok()) << q.status().message();
  EXPECT_EQ(q->quota.at("gpu").nominal, 3000);
  EXPECT_EQ(q->priority, 2);
  const std::vector<Bad> cases = {
      {"apiVersion: koi/v1\nkind: Queue\nmetadata: {name: qb}\nspec: {tenant: alpha}\n",
       "metadata.name: 'qb' does not match the URL's queue 'qa'"},
      {"apiVersion: koi/v1\nkind: Queue\nmetadata: {name: qa}\nspec: {tenant: zeta}\n",
       "spec.tenant: 'zeta' is not one of the tenants"},
      {"apiVersion: koi/v1\nkind: Queue\nmetadata: {name: qa}\nspec: {tenant: alpha, quota: {tpu: {nominal: 1}}}\n",
       "spec.quota.tpu: unknown resource; use cpu, memory, gpu or gpu/<TYPE>"},
      {"apiVersion: koi/v1\nkind: Job\nmetadata: {name: qa}\nspec: {tenant: alpha}\n", "kind: must be Queue"},
  };
  for (const Bad& c : cases) {
    auto r = parse_queue_manifest(c.text, "qa", tenants);
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_EQ(r.status().message(), c.error);
  }
}

}  // namespace
}  // namespace koi::cluster
