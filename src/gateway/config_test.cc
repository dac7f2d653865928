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
  EXPECT_EQ(c->grpc_host, "");  // the gRPC API is off unless grpc_listen is set
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

// kYaml with one piece replaced: `from` must occur in it.
std::string with(std::string_view from, std::string_view to) {
  std::string yaml = kYaml;
  const size_t at = yaml.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) yaml.replace(at, from.size(), to);
  return yaml;
}

TEST(Config, GrpcListen) {
  auto c = parse_config(std::string(kYaml) + "grpc_listen: 0.0.0.0:50051\n", "gw.yaml");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->grpc_host, "0.0.0.0");
  EXPECT_EQ(c->grpc_port, 50051);
}

struct ConfigCase {
  const char* from;
  const char* to;
  const char* error;  // the whole message; "" when the file must load
  TenantConfig want;  // tenants[0] of a file that loads (keys not compared)
};

void expect_tenant(const TenantConfig& got, const TenantConfig& want) {
  EXPECT_EQ(got.name, want.name);
  EXPECT_EQ(got.rpm, want.rpm);
  EXPECT_EQ(got.tpm, want.tpm);
  EXPECT_EQ(got.max_concurrency, want.max_concurrency);
  EXPECT_EQ(got.priority, want.priority);
  EXPECT_EQ(got.models, want.models);
}

TEST(Config, EveryFileLoadsExactlyWhatItSaysOrIsRefusedNamingTheField) {
  const TenantConfig acme{"acme", 60, 600, 2, Priority::kHigh, {"m"}, {}};
  const ConfigCase cases[] = {
      {"", "", "", acme},
      {"    rpm: 60\n", "", "", {"acme", 0, 600, 2, Priority::kHigh, {"m"}, {}}},
      {"    rpm: 60\n", "    rpm: 2.5\n", "", {"acme", 2.5, 600, 2, Priority::kHigh, {"m"}, {}}},
      {"    priority: high\n", "", "", {"acme", 60, 600, 2, Priority::kNormal, {"m"}, {}}},
      {"    models: [m]\n", "    models: []\n", "", {"acme", 60, 600, 2, Priority::kHigh, {}, {}}},
      {"    models: [m]\n", "", "", {"acme", 60, 600, 2, Priority::kHigh, {}, {}}},
      // Unknown keys: a typo must not turn a limit into no limit.
      {"    rpm: 60\n", "    rpmm: 60\n", "gw.yaml: tenants[0].rpmm: unknown key; did you mean rpm?", {}},
      {"    tpm: 600\n", "    tpm: 600\n    tokens_per_minute: 5\n",
       "gw.yaml: tenants[0].tokens_per_minute: unknown key; the keys here are name, rpm, tpm, max_concurrency, priority, models, keys",
       {}},
      {"listen:", "lisen:", "gw.yaml: lisen: unknown key; did you mean listen?", {}},
      {"tenants:\n", "tenant:\n", "gw.yaml: tenant: unknown key; did you mean tenants?", {}},
      {"breaker: {failures: 2,", "breaker: {failure: 2,", "gw.yaml: breaker.failure: unknown key; did you mean failures?", {}},
      {"routing: {policy: kv_aware, block_bytes: 8}", "routing: {policy: kv_aware, blocksize: 8}",
       "gw.yaml: routing.blocksize: unknown key; the keys here are policy, block_bytes, session_header, cache_threshold, "
       "balance_abs, balance_rel, blocks_per_replica, kv_events_poll_ms, kv_events_wait_ms", {}},
      {"    price: {prompt_per_1k: 0.5,", "    routing: kv_event\n    price: {prompt_per_1k: 0.5,",
       "gw.yaml: models[0].routing: routing policy 'kv_event' is unknown; use round_robin, least_outstanding, kv_aware, "
       "kv_events or session", {}},
      {"    price: {prompt_per_1k: 0.5,", "    price: {prompt_per_1K: 0.5,",
       "gw.yaml: models[0].price.prompt_per_1K: unknown key; did you mean prompt_per_1k?", {}},
      {"{name: v2, weight: 0,", "{name: v2, wieght: 0,", "gw.yaml: models[0].versions[1].wieght: unknown key; did you mean weight?", {}},
      {"keys: [{id: ", "keys: [{key: 1, id: ", "gw.yaml: tenants[0].keys[0].key: unknown key; the keys here are id, hash", {}},
      {"store: sqlite:/tmp/x.db\n", "store: sqlite:/tmp/x.db\nlimits: {burst_seconds: 1}\n",
       "gw.yaml: limits.burst_seconds: is no longer read: a tenant's bucket holds its whole per-minute allowance (docs/gateway.md); "
       "remove the key", {}},
      // Wrong types and out-of-range values.
      {"    rpm: 60\n", "    rpm: abc\n", "gw.yaml: tenants[0].rpm: must be a number, got 'abc'", {}},
      {"    rpm: 60\n", "    rpm: -1\n", "gw.yaml: tenants[0].rpm: must be >= 0", {}},
      {"    rpm: 60\n", "    rpm: .inf\n", "gw.yaml: tenants[0].rpm: must be a finite number", {}},
      {"    rpm: 60\n", "    rpm: [60]\n", "gw.yaml: tenants[0].rpm: must be a number, got a list", {}},
      {"    max_concurrency: 2\n", "    max_concurrency: 2.5\n", "gw.yaml: tenants[0].max_concurrency: must be a number, got '2.5'", {}},
      {"    priority: high\n", "    priority: urgent\n",
       "gw.yaml: tenants[0].priority: priority 'urgent' is unknown; use high, normal or low", {}},
      {"    models: [m]\n", "    models: m\n", "gw.yaml: tenants[0].models: must be a list of strings", {}},
      {"    models: [m]\n", "    models: [m, ghost]\n", "gw.yaml: tenants[0].models[1]: model 'ghost' is not defined under models:", {}},
      {"store: sqlite:/tmp/x.db\n", "store: sqlite:/tmp/x.db\nlimits: {max_in_flight: 0}\n",
       "gw.yaml: limits.max_in_flight: must be >= 1", {}},
      {"store: sqlite:/tmp/x.db\n", "store: sqlite:/tmp/x.db\nlimits: {max_connections: 0}\n",
       "gw.yaml: limits.max_connections: must be >= 1", {}},
      {"listen: 127.0.0.1:0", "listen: 127.0.0.1:70000",
       "gw.yaml: listen: must read HOST:PORT with a port 0-65535 (0 picks a free one), got '127.0.0.1:70000'", {}},
      {"listen: 127.0.0.1:0", "listen: 127.0.0.1:-1",
       "gw.yaml: listen: must read HOST:PORT with a port 0-65535 (0 picks a free one), got '127.0.0.1:-1'", {}},
      {"listen: 127.0.0.1:0", "listen: nowhere", "gw.yaml: listen: must read HOST:PORT with a port 0-65535 (0 picks a free one), got 'nowhere'",
       {}},
      {"listen: 127.0.0.1:0", "listen: 127.0.0.1:0\ngrpc_listen: 127.0.0.1:70000",
       "gw.yaml: grpc_listen: must read HOST:PORT with a port 0-65535 (0 picks a free one), got '127.0.0.1:70000'", {}},
      {"listen: 127.0.0.1:0", "listen: 127.0.0.1:0\ngrpc_listen: :9000", "gw.yaml: grpc_listen: needs a host, got ':9000'", {}},
      {"listen: 127.0.0.1:0", "listen: 127.0.0.1:0\ngrpc_lsten: 127.0.0.1:0",
       "gw.yaml: grpc_lsten: unknown key; did you mean grpc_listen?", {}},
      {"key: admin-key-0123456789", "key: short", "gw.yaml: admin.key: must be at least 16 characters", {}},
      {"breaker: {failures: 2,", "breaker: {failures: 0,", "gw.yaml: breaker.failures: must be >= 1", {}},
      {"    price: {prompt_per_1k: 0.5,", "    price: {prompt_per_1k: -0.5,", "gw.yaml: models[0].price.prompt_per_1k: must be >= 0", {}},
      {"\"http://127.0.0.1:9003\"", "\"http://127.0.0.1:99999\"",
       "gw.yaml: models[0].versions[1].replicas[0]: replica URL 'http://127.0.0.1:99999' has port 99999; a port is 1-65535", {}},
      {"\"http://127.0.0.1:9003\"", "\"https://x\"",
       "gw.yaml: models[0].versions[1].replicas[0]: replica URL 'https://x' must read http://HOST:PORT", {}},
      {"hash: \"sha256:", "hash: \"plain:",
       "gw.yaml: tenants[0].keys[0].hash: a key hash must read sha256:<32 hex salt>:<64 hex digest>; create keys with "
       "`koi gateway keygen`", {}},
      // Missing pieces.
      {"replicas: [\"http://127.0.0.1:9003\"]", "replicas: []",
       "gw.yaml: models[0].versions[1].replicas: needs at least one replica URL (http://HOST:PORT)", {}},
      {", replicas: [\"http://127.0.0.1:9003\"]", "",
       "gw.yaml: models[0].versions[1].replicas: needs at least one replica URL (http://HOST:PORT)", {}},
      {"    versions:\n      - {name: v1, weight: 100, replicas: [\"http://127.0.0.1:9001\", \"http://127.0.0.1:9002\"]}\n"
       "      - {name: v2, weight: 0, replicas: [\"http://127.0.0.1:9003\"]}\n",
       "    versions: []\n", "gw.yaml: models[0].versions: needs at least one version with replicas", {}},
      {"  - name: m\n", "  - name: \"\"\n", "gw.yaml: models[0].name: is required", {}},
      {"  - name: acme\n", "  - rpm: 1\n", "gw.yaml: tenants[0].name: is required", {}},
      {"  - name: acme\n    rpm: 60\n", "  - name: acme\n    rpm: 60\n  - name: acme\n    rpm: 60\n",
       "gw.yaml: tenants[1].name: 'acme' appears twice", {}},
  };
  static_assert(std::size(cases) >= 40);
  for (const ConfigCase& c : cases) {
    SCOPED_TRACE(std::string(c.from) + " -> " + c.to);
    auto config = parse_config(*c.from ? with(c.from, c.to) : kYaml, "gw.yaml");
    if (*c.error) {
      EXPECT_EQ(config.status().message(), c.error);
      continue;
    }
    ASSERT_TRUE(config.ok()) << config.status().message();
    ASSERT_EQ(config->tenants.size(), 1u);
    expect_tenant(config->tenants[0], c.want);
  }
}

TEST(Config, ANoModelsOrNoTenantsFileIsRefused) {
  EXPECT_EQ(parse_config("tenants: [{name: a}]", "gw.yaml").status().message(),
            "gw.yaml: models: at least one model is required (name, versions with replicas), or an admin key so that routes are added at run time");
  EXPECT_EQ(parse_config("models: []\ntenants: [{name: a}]", "gw.yaml").status().message(),
            "gw.yaml: models: at least one model is required (name, versions with replicas), or an admin key so that routes are added at run time");
  EXPECT_EQ(parse_config("models: [{name: m, versions: [{name: v, replicas: [\"http://h:1\"]}]}]", "gw.yaml").status().message(),
            "gw.yaml: tenants: at least one tenant is required (name, limits, keys)");
  // With the admin API on, routes may all come at run time.
  auto admin_only = parse_config("admin: {key: 0123456789abcdef}\ntenants: [{name: a}]", "gw.yaml");
  ASSERT_TRUE(admin_only.ok()) << admin_only.status().message();
  EXPECT_TRUE(admin_only->models.empty());
  EXPECT_EQ(parse_config("models: [{name: m, versions: [{name: v, replicas: [\"http://h:1\"]}]}]\ntenants: [acme]", "gw.yaml")
                .status()
                .message(),
            "gw.yaml: tenants[0]: must be a mapping");
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

TEST(Config, RoutingPerModelOverridesTheGatewaysPolicy) {
  auto c = parse_config(with("    price: {prompt_per_1k: 0.5,", "    routing: kv_events\n    price: {prompt_per_1k: 0.5,"),
                        "gw.yaml");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->models[0].routing, RoutingPolicy::kKvEvents);
  EXPECT_EQ(c->kv_events_poll_ms, 20);
  EXPECT_EQ(c->kv_events_wait_ms, 2000);
  EXPECT_FALSE(parse_config(kYaml, "gw.yaml")->models[0].routing.has_value());
}

TEST(OpenAi, TokenPromptsCacheSaltAndTheTokenizeBody) {
  auto ids = parse_request(R"({"model":"m","prompt":[5,6,7],"cache_salt":"t1"})", false);
  ASSERT_TRUE(ids.ok()) << ids.status().message();
  EXPECT_EQ(ids->prompt_tokens, (std::vector<int32_t>{5, 6, 7}));
  EXPECT_EQ(ids->cache_key, engine::cache_key_for_salt("t1"));
  EXPECT_EQ(ids->tokenize_body, "");
  EXPECT_EQ(estimate_tokens(*ids), 3);
  auto text = parse_request(R"({"model":"m","prompt":"hi there"})", false);
  EXPECT_EQ(text->tokenize_body, R"({"model":"m","prompt":"hi there"})");
  EXPECT_EQ(text->cache_key, 0u);
  auto chat = parse_request(R"({"model":"m","messages":[{"role":"user","content":"x"}]})", true);
  EXPECT_EQ(chat->tokenize_body, R"({"model":"m","messages":[{"role":"user","content":"x"}],"add_generation_prompt":true})");
  EXPECT_EQ(parse_request(R"({"model":"m","prompt":[5,-1]})", false).status().message(),
            "'prompt' is required and must be a string or a list of token ids");
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
  EXPECT_EQ(fleet_.admit("acme", "m", 5).status, 200);
  EXPECT_EQ(fleet_.admit("acme", "m", 5).status, 200);
  Admission a = fleet_.admit("acme", "m", 5);
  EXPECT_EQ(a.status, 429);
  EXPECT_EQ(a.limit, "concurrency");  // two in flight
  fleet_.finish("acme", 5, 5);
  fleet_.finish("acme", 5, 5);
  a = fleet_.admit("acme", "m", 600);  // 590 of the minute's 600 tokens left
  EXPECT_EQ(a.status, 429);
  EXPECT_EQ(a.limit, "tpm");
  EXPECT_EQ(a.retry_after_s, 1);  // 10 tokens at 10 a second
  EXPECT_EQ(a.message, "tenant 'acme' is over its limit of 600 tokens per minute");
  EXPECT_EQ(fleet_.admit("acme", "m", 50).status, 200);
  fleet_.finish("acme", 50, 1000);  // the real usage was 1000: 590 - 1000 = -410
  a = fleet_.admit("acme", "m", 5);
  EXPECT_EQ(a.limit, "tpm");
  EXPECT_EQ(a.retry_after_s, 42);  // 415 tokens at 10 a second
  clock_.advance_ns(60 * kSec);    // both buckets refill; rpm is full again at 60
  for (int i = 0; i < 60; ++i) {
    ASSERT_EQ(fleet_.admit("acme", "m", 0).status, 200) << i;
    fleet_.finish("acme", 0, 0);
  }
  a = fleet_.admit("acme", "m", 0);
  EXPECT_EQ(a.status, 429);
  EXPECT_EQ(a.limit, "rpm");
  EXPECT_EQ(a.retry_after_s, 1);
  EXPECT_EQ(a.message, "tenant 'acme' is over its limit of 60 requests per minute");
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
