#include "cluster/control_plane/deployment.h"
#include "base/file.h"
#include "cluster/control_plane/deployment_status.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>

namespace koi::cluster {
namespace {

std::string manifest(const std::string& spec) {
  return "apiVersion: koi/v1\nkind: Deployment\nmetadata: {name: fortunes}\nspec:\n" + spec;
}

std::string error_of(const std::string& spec) {
  auto d = parse_deployment_manifest(manifest(spec), "alpha");
  return d.ok() ? "ok" : d.status().message();
}

TEST(DeploymentTest, ParsesAFullManifestAndItsDefaults) {
  auto d = parse_deployment_manifest(manifest(R"(  model: fortunes@production
  replicas: {min: 1, max: 3}
  resources: {cpu: 2, memoryMiB: 2048}
  queue: serving
  priority: 100
  serveArgs: [--max-num-seqs, "4"]
  rollout: {canarySteps: [5, 25, 100], stepSeconds: 10}
  slo: {maxErrorRate: 0.01, p99TtftMs: 250}
  autoscale: {metric: kvCacheUsage, target: 0.7, scaleDownDelaySeconds: 120}
)"),
                                     "alpha");
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_EQ(d->metadata.ns, "alpha");
  EXPECT_EQ(d->spec.route, "fortunes");  // metadata.name
  EXPECT_EQ(d->spec.ref.model, "fortunes");
  EXPECT_EQ(d->spec.ref.alias, "production");
  EXPECT_EQ(d->spec.max_replicas, 3);
  EXPECT_EQ(d->spec.resources.cpu_milli, 2000);
  EXPECT_EQ(d->spec.rollout.canary_steps, (std::vector<int>{5, 25, 100}));
  EXPECT_EQ(d->spec.rollout.ready_timeout_seconds, 120);
  EXPECT_EQ(d->spec.slo.min_requests, 20);
  EXPECT_TRUE(d->spec.autoscale.enabled);
  EXPECT_EQ(d->spec.autoscale.metric, AutoscaleMetric::kKvCacheUsage);
  // The stored spec reads back to the same thing.
  auto again = deployment_spec_from_json(d->spec_json);
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(boost::json::serialize(deployment_spec_json(*again)), boost::json::serialize(d->spec_json));
}

TEST(DeploymentTest, BadFieldsAreNamedByPath) {
  EXPECT_EQ(error_of("  route: x\n"), "spec.model: is required (MODEL@ALIAS, MODEL@VERSION or MODEL)");
  EXPECT_EQ(error_of("  model: Fortunes\n"),
            "spec.model: 'Fortunes' is not a model reference: use MODEL, MODEL@ALIAS or MODEL@VERSION (names of a-z, "
            "0-9 and '-')");
  EXPECT_EQ(error_of("  model: m\n  replicas: {min: 3, max: 2}\n"), "spec.replicas.max: must be >= replicas.min");
  EXPECT_EQ(error_of("  model: m\n  rollout: {canarySteps: [50, 10, 100]}\n"), "spec.rollout.canarySteps[1]: steps must increase");
  EXPECT_EQ(error_of("  model: m\n  rollout: {canarySteps: [10, 50]}\n"), "spec.rollout.canarySteps[1]: the last step must be 100");
  EXPECT_EQ(error_of("  model: m\n  serveArgs: [--port, '9']\n"),
            "spec.serveArgs[0]: --port is set by the control plane (spec.model, the replica's port, spec.route, "
            "spec.adapters)");
  EXPECT_EQ(error_of("  model: m\n  adapters: {poet: rel/poet}\n"),
            "spec.adapters.poet: must be an absolute path to a PEFT adapter directory (replicas run in their own work "
            "directories)");
  EXPECT_EQ(error_of("  model: m\n  adapters: {fortunes: /a}\n").substr(0, 60),
            "spec.adapters.fortunes: adapter names are 1-63 characters of");
  EXPECT_EQ(error_of("  model: m\n  autoscale: {metric: gpu, target: 1}\n"),
            "spec.autoscale.metric: must be waitingRequests, kvCacheUsage or ttftMs (got 'gpu')");
  EXPECT_EQ(error_of("  model: m\n  autoscale: {metric: kvCacheUsage, target: 2}\n"),
            "spec.autoscale.target: kvCacheUsage is a fraction: the target must be in (0, 1]");
  EXPECT_EQ(error_of("  model: m\n  replicas: {min: 0}\n  autoscale: {metric: ttftMs, target: 100}\n"),
            "spec.replicas.min: must be >= 1 with autoscale (the metrics come from running replicas)");
  EXPECT_EQ(error_of("  model: m\n  slo: {maxErrorRate: 2}\n").substr(0, 22), "spec.slo.maxErrorRate:");
  EXPECT_EQ(error_of("  model: m\n  rollout: {canarySteps: [10, 100], stepSecs: 3}\n").substr(0, 26), "spec.rollout.stepSecs: unk");
  EXPECT_EQ(error_of("  model: m\n  resources: {gpuType: H100}\n"), "spec.resources.gpuType: is set but resources.gpu is 0");
  auto other = parse_deployment_manifest("apiVersion: koi/v1\nkind: Deployment\nmetadata: {name: d, namespace: beta}\nspec: {model: m}\n",
                                         "alpha");
  EXPECT_EQ(other.status().message(), "metadata.namespace: 'beta' does not match the request's namespace 'alpha'");
}

}  // namespace
}  // namespace koi::cluster

namespace koi::cluster {
namespace {

TEST(DeploymentStatusTest, RoundTripsAndGroupsReplicasByVersion) {
  DeploymentStatus st;
  st.phase = "Progressing", st.version = 2, st.previous = 1, st.artifact = "/m/b.gguf", st.desired = 2;
  RolloutState r;
  r.from = 2, r.to = 3, r.steps = {10, 100}, r.step = 0, r.weight = 10, r.cause = "AliasMoved (production)";
  st.rollout = r;
  st.rolled_back = {4};
  st.weights = {{2, 90}, {3, 10}};
  ServeReplica a{.job = "d-v2-1", .version = 2, .port = 9001, .ready = true, .registered = true};
  ServeReplica b{.job = "d-v2-2", .version = 2, .port = 9002, .ready = true, .registered = true};
  ServeReplica c{.job = "d-v3-3", .version = 3, .port = 9003};
  c.waiting = "quota: no room";
  st.replicas = {a, b, c};
  st.next_replica = 4;
  const boost::json::object j = deployment_status_json(st);
  EXPECT_EQ(boost::json::serialize(j.at("versions")),
            R"([{"version":2,"replicas":2,"ready":2,"weight":90},{"version":3,"replicas":1,"ready":0,"weight":10}])");
  const DeploymentStatus back = deployment_status_from_json(j);
  EXPECT_EQ(boost::json::serialize(deployment_status_json(back)), boost::json::serialize(j));
  EXPECT_TRUE(back.was_rolled_back(4));
  EXPECT_FALSE(back.was_rolled_back(3));
  EXPECT_EQ(back.replicas[2].url(), "http://127.0.0.1:9003");
  EXPECT_EQ(back.rollout->steps, (std::vector<int>{10, 100}));
}

}  // namespace
}  // namespace koi::cluster

namespace koi::cluster {
namespace {

TEST(DeploymentTest, TheDocumentedExampleParses) {
  auto text = read_file(std::string(KOI_SOURCE_DIR) + "/docs/examples/deployment-fortunes.yaml");
  ASSERT_TRUE(text.ok()) << text.status().message();
  auto d = parse_deployment_manifest(*text, "alpha");
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_EQ(d->spec.route, "fortunes");
  EXPECT_EQ(d->spec.autoscale.target, 2);
}

TEST(DeploymentTest, AdaptersBecomeLoraFlagsOfEveryReplica) {
  auto d = parse_deployment_manifest(
      manifest("  model: m\n  serveArgs: [--max-loras, '2']\n  adapters: {poet: /a/poet, judge: /a/judge}\n"), "alpha");
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_EQ(replica_serve_args(d->spec),
            (std::vector<std::string>{"--max-loras", "2", "--lora", "judge=/a/judge", "--lora", "poet=/a/poet"}));
  auto again = deployment_spec_from_json(d->spec_json);
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(again->adapters, d->spec.adapters);
}

}  // namespace
}  // namespace koi::cluster
