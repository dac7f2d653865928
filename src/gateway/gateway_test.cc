// The gateway end to end in one process, against a small OpenAI-shaped backend written here
// (tests/gateway_*.py run the same paths against real `koi serve` processes).
#include "gateway/gateway.h"

#include <gtest/gtest.h>

#include <set>

#include <boost/asio.hpp>
#include <boost/json.hpp>
#include <thread>

#include "base/file.h"
#include "gateway/fleet.h"
#include "net/client.h"
#include "net/server.h"

namespace koi::gateway {
namespace {

namespace asio = boost::asio;
namespace json = boost::json;

// A fake engine: /health, /v1/models (the base alone, no LoRA adapters, as koi serve lists
// it; the gateway's health loop reads it), and /v1/completions answering `max_tokens` tokens of "x" with
// usage {prompt_tokens: bytes of the prompt, completion_tokens: max_tokens}, as JSON or SSE.
// mode: "ok", "fail" (500 on completions), "hang" (never answers completions).
class FakeEngine {
 public:
  explicit FakeEngine(std::string mode)
      : mode_(std::move(mode)), server_({}, [this](net::Request& req, net::Responder& res) { return serve(req, res); }) {
    port_ = *server_.listen();
    server_.start();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::atomic<int> completions{0};

 private:
  asio::awaitable<void> serve(net::Request& req, net::Responder& res) {
    if (req.target() == "/health") {
      co_await res.send(200, "ok", "text/plain");
      co_return;
    }
    if (req.target() == "/v1/models") {
      co_await res.send(200, R"({"object":"list","data":[{"id":"m","object":"model","parent":null}]})",
                        "application/json");
      co_return;
    }
    if (mode_ == "hang") {
      asio::steady_timer t(co_await asio::this_coro::executor, std::chrono::seconds(30));
      co_await t.async_wait(asio::use_awaitable);
      co_return;
    }
    ++completions;
    if (mode_ == "fail") {
      co_await res.send(500, "{}", "application/json");
      co_return;
    }
    std::string type;
    std::string body = answer(req.body(), &type);
    co_await res.send(200, std::move(body), type);
  }
  // The whole answer (SSE events or JSON), built outside the coroutine (GCC 12 and json).
  static std::string answer(const std::string& request, std::string* content_type) {
    json::object o = json::parse(request).as_object();
    const int64_t n = o.contains("max_tokens") ? o["max_tokens"].as_int64() : 4;
    const int64_t prompt = static_cast<int64_t>(o["prompt"].as_string().size());
    const json::object usage{{"prompt_tokens", prompt}, {"completion_tokens", n}};
    if (!o.contains("stream") || !o["stream"].as_bool()) {
      *content_type = "application/json";
      return json::serialize(json::object{{"choices", json::array{json::object{{"text", std::string(n, 'x')}}}}, {"usage", usage}});
    }
    *content_type = "text/event-stream";
    std::string body;
    for (int64_t i = 0; i < n; ++i) body += "data: {\"choices\":[{\"text\":\"x\"}]}\n\n";
    if (o["stream_options"].as_object()["include_usage"].as_bool()) {
      body += "data: " + json::serialize(json::object{{"choices", json::array{}}, {"usage", usage}}) + "\n\n";
    }
    return body + "data: [DONE]\n\n";
  }
  std::string mode_;
  net::Server server_;
  int port_ = 0;
};

class GatewayTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = *make_temp_dir("koi-gw"); }
  void TearDown() override {
    gateway_.reset();
    remove_all(dir_);
  }
  void start(const std::vector<std::string>& replicas, const std::string& extra = "") {
    std::string yaml = "listen: 127.0.0.1:0\nadmin: {listen: 127.0.0.1:0, key: admin-key-0123456789}\n"
                       "timeouts: {connect_ms: 500, first_byte_ms: 700, idle_ms: 2000}\n"
                       "health: {interval_ms: 100000}\nbreaker: {failures: 2, open_ms: 60000}\n" + extra +
                       "models:\n  - name: m\n    versions:\n      - name: v1\n        replicas: [";
    for (size_t i = 0; i < replicas.size(); ++i) yaml += (i ? ", \"" : "\"") + replicas[i] + "\"";
    yaml += "]\ntenants:\n  - {name: acme, rpm: 600, tpm: 100000}\n  - {name: slow, rpm: 2}\n";
    auto config = parse_config(yaml, "test.yaml");
    ASSERT_TRUE(config.ok()) << config.status().message();
    auto gw = Gateway::start(*config, std::move(open_store(path_join(dir_, "ledger.db")).value()), 2);
    ASSERT_TRUE(gw.ok()) << gw.status().message();
    gateway_ = std::move(*gw);
    key_ = admin("POST", "/admin/keys", R"({"tenant":"acme"})");
  }
  std::string admin(const std::string& method, const std::string& target, const std::string& body) {
    auto r = net::Client::fetch("http://127.0.0.1:" + std::to_string(gateway_->admin_port()) + target, method, body,
                       {{"authorization", "Bearer admin-key-0123456789"}}, std::chrono::seconds(5));
    EXPECT_TRUE(r.ok() && r->status == 200) << (r.ok() ? r->body : r.status().message());
    if (!r.ok()) return "";
    json::value v = json::parse(r->body);
    return v.as_object().contains("key") ? std::string(v.as_object()["key"].as_string()) : r->body;
  }
  Result<net::Response> complete(const std::string& body, const std::string& key, const net::Headers& extra = {}) {
    net::Headers h{{"authorization", "Bearer " + key}};
    h.insert(h.end(), extra.begin(), extra.end());
    return net::Client::fetch("http://127.0.0.1:" + std::to_string(gateway_->port()) + "/v1/completions", "POST", body, h,
                     std::chrono::seconds(10));
  }
  std::vector<UsageRecord> ledger() {
    gateway_->stop();
    return open_store(path_join(dir_, "ledger.db")).value()->query("", 0).value();
  }
  std::string dir_, key_;
  std::unique_ptr<Gateway> gateway_;
};

TEST_F(GatewayTest, AuthIsCheckedAndUsageIsMeteredForPlainAndStreamedRequests) {
  FakeEngine engine("ok");
  start({engine.url()});
  auto bad = complete(R"({"model":"m","prompt":"hi"})", "koi-00000000-00000000000000000000000000000000");
  ASSERT_TRUE(bad.ok());
  EXPECT_EQ(bad->status, 401);
  auto plain = complete(R"({"model":"m","prompt":"hello","max_tokens":3})", key_, {{"x-request-id", "p1"}});
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->status, 200);
  EXPECT_NE(plain->body.find("\"completion_tokens\":3"), std::string::npos);
  auto streamed = complete(R"({"model":"m","prompt":"hey","max_tokens":5,"stream":true})", key_, {{"x-request-id", "s1"}});
  ASSERT_TRUE(streamed.ok());
  EXPECT_EQ(streamed->status, 200);
  EXPECT_EQ(streamed->body.find("usage"), std::string::npos);  // not asked for: dropped
  EXPECT_TRUE(streamed->body.ends_with("data: [DONE]\n\n"));
  auto with_usage = complete(R"({"model":"m","prompt":"hey","max_tokens":2,"stream":true,"stream_options":{"include_usage":true}})", key_);
  ASSERT_TRUE(with_usage.ok());
  EXPECT_NE(with_usage->body.find("\"completion_tokens\":2"), std::string::npos);
  auto records = ledger();
  ASSERT_EQ(records.size(), 3u);
  int64_t completion = 0;
  for (const UsageRecord& r : records) {
    EXPECT_EQ(r.tenant, "acme");
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.replica, engine.url());
    completion += r.completion_tokens;
  }
  EXPECT_EQ(completion, 3 + 5 + 2);
  const auto p1 = std::find_if(records.begin(), records.end(), [](const UsageRecord& r) { return r.request_id == "acme/p1"; });
  ASSERT_NE(p1, records.end());
  EXPECT_EQ(p1->prompt_tokens, 5);
  EXPECT_FALSE(p1->stream);
}

TEST_F(GatewayTest, FailingReplicaIsRetriedElsewhereAndItsBreakerOpens) {
  FakeEngine good("ok"), bad("fail");
  start({bad.url(), good.url()}, "routing: {policy: round_robin}\n");
  for (int i = 0; i < 6; ++i) {
    auto r = complete(R"({"model":"m","prompt":"hello"})", key_);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->status, 200);
  }
  EXPECT_EQ(gateway_->fleet().breaker_state(bad.url()), BreakerState::kOpen);
  EXPECT_EQ(bad.completions.load(), 2);  // two failures open it; no more traffic after that
  EXPECT_EQ(good.completions.load(), 6);
}

TEST_F(GatewayTest, HangingReplicaTimesOutAtFirstByte) {
  FakeEngine hang("hang");
  start({hang.url()}, "max_attempts: 1\n");
  const auto t0 = std::chrono::steady_clock::now();
  auto r = complete(R"({"model":"m","prompt":"hello"})", key_);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 504);
  EXPECT_LT(s, 2.0);
  EXPECT_NE(r->body.find("no response: The socket was closed due to a timeout"), std::string::npos) << r->body;
  auto records = ledger();
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].status, 504);
}

TEST_F(GatewayTest, RateLimitAnswers429WithRetryAfterAndAdminKeysWork) {
  FakeEngine engine("ok");
  start({engine.url()});
  const std::string slow_key = admin("POST", "/admin/keys", R"({"tenant":"slow"})");
  EXPECT_EQ(complete(R"({"model":"m","prompt":"a"})", slow_key)->status, 200);
  EXPECT_EQ(complete(R"({"model":"m","prompt":"a"})", slow_key)->status, 200);  // the bucket holds a minute's 2
  auto limited = complete(R"({"model":"m","prompt":"a"})", slow_key);
  EXPECT_EQ(limited->status, 429);
  EXPECT_EQ(limited->body, R"({"error":{"message":"tenant 'slow' is over its limit of 2 requests per minute","type":"rate_limit_exceeded","code":429}})");
  const std::string id = slow_key.substr(4, 8);
  admin("DELETE", "/admin/keys/" + id, "");
  EXPECT_EQ(complete(R"({"model":"m","prompt":"a"})", slow_key)->status, 401);
  auto metrics = net::Client::fetch("http://127.0.0.1:" + std::to_string(gateway_->port()) + "/metrics", "GET", "", {}, std::chrono::seconds(5));
  EXPECT_NE(metrics->body.find(R"(koi_gateway_limit_rejections_total{tenant="slow",limit="rpm"} 1)"), std::string::npos);
  EXPECT_NE(metrics->body.find("koi_gateway_breaker_state{"), std::string::npos);
  auto records = ledger();
  ASSERT_EQ(records.size(), 3u);  // the 401 has no tenant to bill
  // Both requests can share a start timestamp, so the ledger's order between them is not fixed.
  std::multiset<int> statuses;
  for (const auto& r : records) statuses.insert(r.status);
  EXPECT_EQ(statuses, (std::multiset<int>{200, 200, 429}));
}

}  // namespace
}  // namespace koi::gateway
