// The disaggregation decision (pd_split.h) and its config: when a request is split, which
// prefill worker gets it, and how a bad `prefill:` block is refused.
#include <gtest/gtest.h>

#include "base/clock.h"
#include "gateway/config.h"
#include "gateway/fleet.h"
#include "gateway/pd_split.h"

namespace koi::gateway {
namespace {

const char* kYaml = R"(
listen: 127.0.0.1:0
routing: {policy: least_outstanding, block_bytes: 8}
models:
  - name: m
    versions:
      - {name: v1, replicas: ["http://127.0.0.1:9001"]}
    prefill:
      min_uncached_tokens: 100
      replicas:
        - {url: "http://127.0.0.1:9101", kv: "127.0.0.1:9201"}
        - {url: "http://127.0.0.1:9102", kv: "127.0.0.1:9202"}
tenants:
  - name: acme
)";

std::string with(const std::string& from, const std::string& to) {
  std::string y = kYaml;
  y.replace(y.find(from), from.size(), to);
  return y;
}

TEST(PdSplit, SplitsOnlyWhenTheUncachedSuffixIsLongEnough) {
  EXPECT_TRUE(should_split(400, 10, 0, 256));
  EXPECT_FALSE(should_split(200, 10, 0, 256));  // short prompt: the decode worker prefills it
  EXPECT_FALSE(should_split(400, 10, 5, 256));  // half of it is cached there: 200 uncached
  EXPECT_TRUE(should_split(400, 10, 3, 256));   // 280 uncached
  EXPECT_TRUE(should_split(0, 0, 0, 0));
}

TEST(PdSplit, ConfigParsesThePrefillPoolAndRefusesBadOnes) {
  auto c = parse_config(kYaml, "gw.yaml");
  ASSERT_TRUE(c.ok()) << c.status().message();
  ASSERT_EQ(c->models[0].prefill.replicas.size(), 2u);
  EXPECT_EQ(c->models[0].prefill.min_uncached_tokens, 100);
  EXPECT_EQ(c->models[0].prefill.replicas[1].kv, "127.0.0.1:9202");
  EXPECT_EQ(parse_config(with("min_uncached_tokens", "min_uncached_tokes"), "gw.yaml").status().message(),
            "gw.yaml: models[0].prefill.min_uncached_tokes: unknown key; did you mean min_uncached_tokens?");
  EXPECT_EQ(parse_config(with("kv: \"127.0.0.1:9201\"", "kv: \"127.0.0.1\""), "gw.yaml").status().message(),
            "gw.yaml: models[0].prefill.replicas[0].kv: must read HOST:PORT with a port 0-65535 (0 picks a free one), "
            "got '127.0.0.1'");
  EXPECT_EQ(parse_config(with("min_uncached_tokens: 100", "min_uncached_tokens: -1"), "gw.yaml").status().message(),
            "gw.yaml: models[0].prefill.min_uncached_tokens: must be >= 0");
  EXPECT_FALSE(parse_config(with("http://127.0.0.1:9101", "ftp://x"), "gw.yaml").ok());
}

TEST(PdSplit, FleetSplitsLongPromptsAcrossPrefillWorkersByLoadAndSkipsBrokenOnes) {
  auto c = parse_config(kYaml, "gw.yaml");
  ASSERT_TRUE(c.ok());
  FakeClock clock(1);
  Fleet fleet(*c, clock, 1);
  const std::vector<uint64_t> blocks = {1, 2, 3};
  auto local = fleet.pick("m", RouteInput{blocks, "", 50}, {});
  ASSERT_TRUE(local);
  EXPECT_EQ(local->pd_decision, "local");
  EXPECT_EQ(local->prefill_peer, "");
  // The decode worker now holds these blocks: nothing left worth a transfer.
  EXPECT_EQ(fleet.pick("m", RouteInput{blocks, "", 500}, {})->pd_decision, "local");
  const std::vector<uint64_t> first_blocks = {10, 20, 30}, second_blocks = {10, 21, 31};
  auto first = fleet.pick("m", RouteInput{first_blocks, "", 500}, {});
  auto second = fleet.pick("m", RouteInput{second_blocks, "", 500}, {});
  ASSERT_TRUE(first && second);
  EXPECT_EQ(first->pd_decision, "split");
  EXPECT_EQ(first->prefill_peer, "127.0.0.1:9201");
  // One shared block of three (333 tokens uncached on the decode side): split, and while the
  // loads stay balanced the prefill worker holding the overlap wins over the idle one.
  EXPECT_EQ(second->pd_decision, "split");
  EXPECT_EQ(second->prefill_peer, "127.0.0.1:9201");
  fleet.report(*first, Outcome::kOk, 0.1);
  fleet.report(*second, Outcome::kOk, 0.1);
  // A prefill worker that fails its health checks is not chosen.
  for (int i = 0; i < 3; ++i) fleet.health_result("http://127.0.0.1:9101", false);
  const std::vector<uint64_t> third_blocks = {50, 60, 70}, fourth_blocks = {80, 90, 100};
  auto third = fleet.pick("m", RouteInput{third_blocks, "", 500}, {});
  ASSERT_TRUE(third);
  EXPECT_EQ(third->prefill_peer, "127.0.0.1:9202");
  // With every prefill worker broken, the decode worker prefills.
  for (int i = 0; i < 3; ++i) fleet.health_result("http://127.0.0.1:9102", false);
  auto fourth = fleet.pick("m", RouteInput{fourth_blocks, "", 500}, {});
  ASSERT_TRUE(fourth);
  EXPECT_EQ(fourth->pd_decision, "local");
  // Health checks cover the prefill workers too.
  int prefill_endpoints = 0;
  for (const auto& e : fleet.endpoints()) prefill_endpoints += e.url.find(":91") != std::string::npos;
  EXPECT_EQ(prefill_endpoints, 2);
}

// LoRA adapter affinity: a request naming an adapter goes only to replicas whose /v1/models
// listed it, and counts as its base model.
TEST(AdapterAffinity, AdapterRequestsGoOnlyToReplicasThatServeTheAdapter) {
  auto c = parse_config(R"(
models: [{name: m, versions: [{name: v1, replicas: ["http://127.0.0.1:9001", "http://127.0.0.1:9002"]}]}]
tenants: [{name: t}]
)", "gw.yaml");
  ASSERT_TRUE(c.ok()) << c.status().message();
  FakeClock clock(1);
  Fleet fleet(*c, clock, 1);
  EXPECT_EQ(fleet.model_of_adapter("poet"), std::nullopt);
  fleet.set_adapters("http://127.0.0.1:9002", {"poet", "judge"});
  EXPECT_EQ(fleet.model_of_adapter("poet"), "m");
  EXPECT_EQ(fleet.model_of_adapter("m"), std::nullopt);  // a model is never an adapter
  const std::vector<uint64_t> blocks;
  for (int i = 0; i < 6; ++i) {
    auto pick = fleet.pick("m", RouteInput{blocks, "", 10}, {}, "poet");
    ASSERT_TRUE(pick);
    EXPECT_EQ(pick->replica->url, "http://127.0.0.1:9002");
    EXPECT_EQ(pick->model, "m");
    fleet.report(*pick, Outcome::kOk, 0.01);
  }
  EXPECT_FALSE(fleet.pick("m", RouteInput{blocks, "", 10}, {"http://127.0.0.1:9002"}, "poet"));  // nowhere else
  fleet.set_adapters("http://127.0.0.1:9002", {});  // unloaded there
  EXPECT_EQ(fleet.model_of_adapter("poet"), std::nullopt);
}

}  // namespace
}  // namespace koi::gateway
