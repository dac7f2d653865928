// Config parsing, OpenAI body handling and the Fleet's admission and routing decisions.
#include <gtest/gtest.h>

#include "gateway/config.h"
#include "gateway/fleet.h"
#include "gateway/openai.h"

namespace koi::gateway {
namespace {

constexpr int64_t kSec = 1000000000;

const char* kYaml = R"(
listen: 127.0.0.1:0
admin: {listen: 127.0.0.1:0, key: admin-key-0123456789}
store: sqlite:/tmp/x.db
routing: {policy: kv_aware, block_bytes: 8}
breaker: {failures: 2, open_ms: 1000}
models:
  - name: m
    price: {prompt_per_1k: 0.5, completion_per_1k: 1.5}
    versions:
      - {name: v1, weight: 100, replicas: ["http://127.0.0.1:9001", "http://127.0.0.1:9002"]}
      - {name: v2, weight: 0, replicas: ["http://127.0.0.1:9003"]}
tenants:
  - name: acme
    rpm: 60
    tpm: 600
    max_concurrency: 2
    priority: high
    models: [m]
    keys: [{id: "0a0b0c0d", hash: "sha256:00112233445566778899aabbccddeeff:a646118b31dc9839381df254dd210eedac8fb69a7207c3946ed58a9d8d0320a0"}]
)";

TEST(Config, ParsesEveryPart) {
  auto c = parse_config(kYaml, "gw.yaml");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->port, 0);
  EXPECT_EQ(c->admin_key, "admin-key-0123456789");
  EXPECT_EQ(c->routing, RoutingPolicy::kKvAware);
  EXPECT_EQ(c->prefix_block_bytes, 8u);
  EXPECT_EQ(c->breaker_failures, 2);
  ASSERT_EQ(c->models.size(), 1u);
  EXPECT_EQ(c->models[0].versions[0].replicas.size(), 2u);
  EXPECT_DOUBLE_EQ(c->models[0].completion_price_per_1k, 1.5);
  ASSERT_EQ(c->tenants.size(), 1u);
  EXPECT_EQ(c->tenants[0].priority, Priority::kHigh);
  EXPECT_EQ(c->tenants[0].keys[0].tenant, "acme");
}

TEST(Config, ErrorsNameTheField) {
  EXPECT_EQ(parse_config("tenants: [{name: a, rpm: -1}]", "gw.yaml").status().message(), "gw.yaml: tenants[0].rpm: must be >= 0");
  EXPECT_EQ(parse_config("models: [{name: m, versions: [{name: v, replicas: [\"https://x\"]}]}]", "gw.yaml").status().message(),
            "gw.yaml: models[0].versions[0].replicas: replica URL 'https://x' must read http://HOST:PORT");
  EXPECT_EQ(parse_config("listen: nowhere", "gw.yaml").status().message(),
            "gw.yaml: listen: must read HOST:PORT (port 0 picks a free one), got 'nowhere'");
  EXPECT_EQ(parse_config("tenants: [{name: a, keys: [{id: x, hash: plain}]}]", "gw.yaml").status().message(),
            "gw.yaml: tenants[0].keys[0].hash: a key hash must read sha256:<32 hex salt>:<64 hex digest>; create keys with "
            "`koi gateway keygen`");
  EXPECT_EQ(parse_config("[1, 2]", "gw.yaml").status().message(), "gw.yaml: must be a YAML mapping (listen:, models:, tenants:, ...)");
}

TEST(OpenAi, ParsesChatAndForcesUsageInStreams) {
  auto r = parse_request(R"({"model":"m","stream":true,"messages":[{"role":"user","content":"hello"}]})", true);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->model, "m");
  EXPECT_TRUE(r->stream);
  EXPECT_FALSE(r->client_wants_usage);
  EXPECT_EQ(r->prompt_text, "hello\n");
  EXPECT_NE(r->upstream_body.find(R"("stream_options":{"include_usage":true,"continuous_usage_stats":true})"), std::string::npos);
  EXPECT_EQ(parse_request(R"({"prompt":"x"})", false).status().message(), "'model' is required and must be a string");
  EXPECT_EQ(parse_request("nope", false).status().message(), "the request body must be a JSON object");
  EXPECT_EQ(estimate_tokens("12345"), 2);
}

TEST(OpenAi, Usage) {
  auto u = parse_usage(R"({"usage":{"prompt_tokens":7,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":4}}})");
  ASSERT_TRUE(u.has_value());
  EXPECT_EQ(u->prompt_tokens, 7);
  EXPECT_EQ(u->cached_tokens, 4);
  EXPECT_FALSE(parse_usage(R"({"usage":null})").has_value());
}

class FleetTest : public ::testing::Test {
 protected:
  FleetTest() : config_(*parse_config(kYaml, "gw.yaml")), fleet_(config_, clock_, 1) {}
  GatewayConfig config_;
  FakeClock clock_;
  Fleet fleet_;
};

TEST_F(FleetTest, AdmissionEnforcesModelConcurrencyRpmAndTpm) {
  EXPECT_EQ(fleet_.admit("acme", "other", 1).status, 404);
  EXPECT_EQ(fleet_.admit("nobody", "m", 1).status, 403);
  EXPECT_EQ(fleet_.admit("acme", "m", 5).status, 200);  // rpm burst is 1 (60/min, 1 s)
  Admission a = fleet_.admit("acme", "m", 5);
  EXPECT_EQ(a.status, 429);
  EXPECT_EQ(a.limit, "rpm");
  EXPECT_EQ(a.retry_after_s, 1);
  EXPECT_EQ(a.message, "tenant 'acme' is over its limit of 60 requests per minute");
  clock_.advance_ns(kSec);
  a = fleet_.admit("acme", "m", 50);  // tpm burst is 10: a full bucket admits it into debt
  EXPECT_EQ(a.status, 200);
  clock_.advance_ns(kSec);
  a = fleet_.admit("acme", "m", 5);
  EXPECT_EQ(a.status, 429);
  EXPECT_EQ(a.limit, "concurrency");  // two in flight
  fleet_.finish("acme", 5, 5);
  a = fleet_.admit("acme", "m", 5);
  EXPECT_EQ(a.limit, "tpm");  // -40 + 10 refilled
  EXPECT_EQ(a.retry_after_s, 4);
  fleet_.finish("acme", 50, 10);  // the real usage was 10: refund 40
  EXPECT_EQ(fleet_.admit("acme", "m", 5).status, 200);
}

TEST_F(FleetTest, PickSkipsExcludedAndOpenReplicasAndFollowsWeights) {
  std::vector<std::string> tried;
  auto p1 = fleet_.pick("m", {}, tried);
  ASSERT_TRUE(p1.has_value());
  EXPECT_EQ(p1->version, "v1");
  tried.push_back(p1->replica->url);
  auto p2 = fleet_.pick("m", {}, tried);
  ASSERT_TRUE(p2.has_value());
  EXPECT_NE(p2->replica->url, p1->replica->url);
  tried.push_back(p2->replica->url);
  auto p3 = fleet_.pick("m", {}, tried);  // v1 exhausted: v2 has weight 0
  EXPECT_FALSE(p3.has_value());
  fleet_.report(*p1, Outcome::kReplicaError, 0.1);
  fleet_.report(*p1, Outcome::kReplicaError, 0.1);
  EXPECT_EQ(fleet_.breaker_state(p1->replica->url), BreakerState::kOpen);
  for (int i = 0; i < 5; ++i) {
    auto p = fleet_.pick("m", {}, {});
    ASSERT_TRUE(p.has_value());
    EXPECT_EQ(p->replica->url, p2->replica->url);
    fleet_.report(*p, Outcome::kOk, 0.1);
  }
  clock_.advance_ns(kSec);
  fleet_.health_result(p1->replica->url, true);  // the health check is the half-open probe
  EXPECT_EQ(fleet_.breaker_state(p1->replica->url), BreakerState::kClosed);
  ASSERT_TRUE(fleet_.set_weights("m", {{"v1", 0}, {"v2", 100}}).ok());
  EXPECT_EQ(fleet_.pick("m", {}, {})->version, "v2");
  EXPECT_EQ(fleet_.set_weights("m", {{"v9", 1}}).message(), "no version m/v9");
}

TEST_F(FleetTest, AdminChangesReplicasAndTenants) {
  ASSERT_TRUE(fleet_.add_replica("m", "v3", "http://127.0.0.1:9009").ok());
  EXPECT_EQ(fleet_.add_replica("m", "v3", "http://127.0.0.1:9009").message(), "replica http://127.0.0.1:9009 is already in m/v3");
  ASSERT_TRUE(fleet_.remove_replica("m", "v1", "http://127.0.0.1:9001").ok());
  EXPECT_EQ(fleet_.endpoints().size(), 3u);
  TenantConfig t;
  t.name = "new";
  ASSERT_TRUE(fleet_.upsert_tenant(t).ok());
  EXPECT_EQ(fleet_.admit("new", "m", 100000).status, 200);  // no limits
  EXPECT_EQ(fleet_.models_for("new"), std::vector<std::string>{"m"});
}

}  // namespace
}  // namespace koi::gateway
