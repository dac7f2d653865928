// The HTTP side of the gateway (see gateway.h): the two listeners, routing, health checks;
// one request's way through the gateway is gateway/proxy.h.
#include "gateway/gateway.h"

#include <atomic>
#include <boost/asio.hpp>
#include <boost/json.hpp>
#include <chrono>

#include "base/clock.h"
#include "base/logging.h"
#include "base/metrics.h"
#include "gateway/admin_api.h"
#include "gateway/fleet.h"
#include "gateway/grpc_api.h"
#include "gateway/kv_subscriber.h"
#include "gateway/openai.h"
#include "gateway/proxy.h"
#include "net/client.h"
#include "net/server.h"

namespace koi::gateway {

namespace asio = boost::asio;
namespace http = boost::beast::http;
namespace json = boost::json;
using Request = net::Request;

namespace {

constexpr size_t kMaxRequestBody = 32 << 20;
constexpr auto kNoThrow = asio::as_tuple(asio::use_awaitable);

std::string_view bearer(const Request& req) {
  auto it = req.find(http::field::authorization);
  if (it == req.end()) return {};
  std::string_view v(it->value().data(), it->value().size());
  return v.starts_with("Bearer ") ? v.substr(7) : std::string_view{};
}


// JSON bodies are built outside the coroutines: GCC 12 miscompiles brace-initialized
// json::object temporaries inside a coroutine ("array used as initializer").
std::string models_json(const std::vector<std::string>& models) {
  json::array data;
  for (const std::string& m : models) data.push_back(json::object{{"id", m}, {"object", "model"}, {"owned_by", "koi"}});
  return json::serialize(json::object{{"object", "list"}, {"data", data}});
}

// The LoRA adapters in a koi serve /v1/models body: the cards with a parent (the base model).
// A body that is not such a list gives none.
std::vector<std::string> adapters_in_models(const std::string& body) {
  std::vector<std::string> adapters;
  boost::system::error_code ec;
  const json::value v = json::parse(body, ec);
  const json::value* data = !ec && v.is_object() ? v.as_object().if_contains("data") : nullptr;
  if (data == nullptr || !data->is_array()) return adapters;
  for (const json::value& card : data->as_array()) {
    const json::object* c = card.if_object();
    const json::value* id = c ? c->if_contains("id") : nullptr;
    const json::value* parent = c ? c->if_contains("parent") : nullptr;
    if (id && id->is_string() && parent && parent->is_string()) adapters.emplace_back(id->as_string());
  }
  return adapters;
}

net::ServerOptions listener_options(const GatewayConfig& c, const std::string& host, int port, int threads) {
  net::ServerOptions o;
  o.host = host;
  o.port = port;
  o.threads = threads;
  o.max_body_bytes = kMaxRequestBody;
  o.max_connections = c.max_connections;
  o.idle_timeout_s = static_cast<double>(c.idle_timeout_ms) * 1e-3;
  o.header_timeout_s = std::min(10.0, o.idle_timeout_s);
  o.body_timeout_s = o.idle_timeout_s;
  o.write_timeout_s = o.idle_timeout_s;
  o.error_body = [](int status, std::string_view message, std::string_view) {
    return openai_error(message, "invalid_request_error", status);
  };
  o.error_content_type = "application/json";
  return o;
}

class GatewayImpl final : public Gateway {
 public:
  GatewayImpl(const GatewayConfig& config, std::unique_ptr<UsageStore> store, int threads)
      : config_(config),
        clock_(SystemClock::instance()),
        fleet_(config, clock_, static_cast<uint64_t>(clock_.now_ns())),
        api_(listener_options(config, config.host, config.port, threads),
             [this](Request& req, net::Responder& res) { return handle_api(req, res); }),
        admin_(listener_options(config, config.admin_host, config.admin_port, 1),
               [this](Request& req, net::Responder& res) { return handle_admin(req, res); }),
        ledger_(std::move(store)),
        admin_api_(config.admin_key, fleet_, ledger_.store()),
        proxy_(config_, fleet_, ledger_, metrics_, client_, clock_),
        kv_subscriber_(fleet_, client_, std::chrono::milliseconds(config.kv_events_poll_ms),
                       std::chrono::milliseconds(config.kv_events_wait_ms),
                       std::chrono::milliseconds(config.health_timeout_ms)),
        grpc_(proxy_, fleet_, api_.context()) {
    declare_metrics();
  }
  ~GatewayImpl() override { stop(); }

  Status listen();
  int port() const override { return port_; }
  int admin_port() const override { return admin_port_; }
  int grpc_port() const override { return grpc_port_; }
  Fleet& fleet() override { return fleet_; }
  metrics::Registry& metrics() override { return metrics_; }
  void stop() override;

 private:
  void declare_metrics();
  asio::awaitable<void> health_loop();
  asio::awaitable<void> handle_api(Request& req, net::Responder& res);
  asio::awaitable<void> handle_admin(Request& req, net::Responder& res);

  const GatewayConfig config_;
  const Clock& clock_;
  Fleet fleet_;
  metrics::Registry metrics_;
  // The listeners are declared before the client and the ledger: the ledger's last callbacks
  // post to their io_contexts while it drains; stop() closes the client's pooled sockets
  // while those io_contexts exist.
  net::Server api_, admin_;
  net::Client client_;
  Ledger ledger_;
  AdminApi admin_api_;
  Proxy proxy_;
  KvSubscriber kv_subscriber_;
  GrpcApi grpc_;  // after the proxy it calls; stopped first
  int port_ = 0, admin_port_ = 0, grpc_port_ = 0;
  std::atomic<bool> stopped_{false};
};

// Declared in name order, so /metrics lists families alphabetically.
void GatewayImpl::declare_metrics() {
  const std::vector<double> seconds{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
  metrics_.counter("koi_gateway_auth_failures_total", "Requests with a missing or wrong API key.", {});
  metrics_.gauge("koi_gateway_breaker_state", "Circuit breaker: 0 closed, 1 open, 2 half-open.", {"model", "version", "replica"});
  metrics_.counter("koi_gateway_kv_hit_tokens_total",
                   "kv_events routing: prompt tokens the exact index predicted the chosen replica holds (kind "
                   "predicted), and those its answer reported cached (kind actual).",
                   {"model", "replica", "kind"});
  metrics_.counter("koi_gateway_ledger_errors_total", "Usage records the ledger failed to write.", {});
  metrics_.counter("koi_gateway_limit_rejections_total", "Requests refused by a tenant limit (429).", {"tenant", "limit"});
  metrics_.gauge("koi_gateway_replica_outstanding", "Requests in flight per replica.", {"model", "version", "replica"});
  metrics_.histogram("koi_gateway_request_duration_seconds", "Time from the request to the end of the response.",
                     {"tenant", "model", "version", "replica"}, seconds);
  metrics_.counter("koi_gateway_requests_total", "Requests by tenant, model, version, replica and status.",
                   {"tenant", "model", "version", "replica", "status"});
  metrics_.counter("koi_gateway_tokens_total", "Tokens metered, by tenant, model, version and kind.",
                   {"tenant", "model", "version", "kind"});
  metrics_.histogram("koi_gateway_ttft_seconds", "Time to the first event (stream) or the answer's headers.",
                     {"tenant", "model", "version", "replica"}, seconds);
  metrics_.counter("koi_gateway_upstream_errors_total", "Failed attempts on a replica (retried or not).", {"replica"});
  metrics_.counter("koi_gateway_pd_decisions_total",
                   "Requests to a model with a prefill pool: split (prefilled on a prefill worker) or local.",
                   {"model", "decision"});
  metrics_.gauge("koi_gateway_version_weight", "Traffic weight of each version.", {"model", "version"});
}

Status GatewayImpl::listen() {
  KOI_ASSIGN_OR_RETURN(port_, api_.listen());
  api_.start();
  if (!config_.admin_key.empty()) {
    KOI_ASSIGN_OR_RETURN(admin_port_, admin_.listen());
    admin_.start();
  }
  if (!config_.grpc_host.empty()) {
    KOI_ASSIGN_OR_RETURN(grpc_port_, grpc_.start(config_.grpc_host, config_.grpc_port));
  }
  asio::co_spawn(api_.context(), health_loop(), net::log_task_exception);
  asio::co_spawn(api_.context(), kv_subscriber_.run(), net::log_task_exception);
  return ok_status();
}

void GatewayImpl::stop() {
  if (stopped_.exchange(true)) return;
  grpc_.stop();  // its calls finish on api_'s io_contexts, which still run
  api_.stop();
  admin_.stop();
  api_.wait();
  admin_.wait();
  client_.close_idle();  // pooled sockets belong to api_'s io_contexts, which still exist
}

asio::awaitable<void> GatewayImpl::health_loop() {
  asio::steady_timer timer(co_await asio::this_coro::executor);
  net::Timeouts timeouts;
  timeouts.connect = timeouts.first_byte = timeouts.idle = std::chrono::milliseconds(config_.health_timeout_ms);
  for (;;) {
    for (const Fleet::Endpoint& e : fleet_.endpoints()) {
      net::ClientRequest req;
      req.target = "/health";
      auto r = co_await client_.call(e.host, e.port, std::move(req), timeouts);
      const bool healthy = r.ok() && r->status == 200;
      fleet_.health_result(e.url, healthy);
      if (!healthy) continue;
      // The LoRA adapters it serves, for adapter affinity (koi serve --lora).
      net::ClientRequest models;
      models.target = "/v1/models";
      auto listed = co_await client_.call(e.host, e.port, std::move(models), timeouts);
      if (listed.ok() && listed->status == 200) fleet_.set_adapters(e.url, adapters_in_models(listed->body));
    }
    timer.expires_after(std::chrono::milliseconds(config_.health_interval_ms));
    auto [ec] = co_await timer.async_wait(kNoThrow);
    if (ec) co_return;
  }
}

asio::awaitable<void> GatewayImpl::handle_api(Request& req, net::Responder& res) {
  const std::string_view path = net::request_path(req);
  const bool get = req.method() == http::verb::get, post = req.method() == http::verb::post;
  if (get && path == "/health") {
    co_await res.send(200, "ok\n", "text/plain");
  } else if (get && path == "/metrics") {
    fleet_.export_gauges(metrics_);
    std::string text = metrics_.render();
    co_await res.send(200, std::move(text), "text/plain; version=0.0.4");
  } else if (post && (path == "/v1/completions" || path == "/v1/chat/completions")) {
    co_await proxy_.handle(req, res, path == "/v1/chat/completions");
  } else if (get && path == "/v1/models") {
    auto key = fleet_.authenticate(bearer(req));
    std::string body = key ? models_json(fleet_.models_for(key->tenant)) : openai_error("invalid API key", "invalid_request_error", 401);
    co_await res.send(key ? 200 : 401, std::move(body), "application/json");
  } else {
    std::string body = openai_error("no route " + std::string(req.target()), "invalid_request_error", 404);
    co_await res.send(404, std::move(body), "application/json");
  }
}

asio::awaitable<void> GatewayImpl::handle_admin(Request& req, net::Responder& res) {
  AdminReply r = admin_api_.handle(req.method_string(), req.target(), bearer(req), req.body());
  co_await res.send(r.status, std::move(r.body), "application/json");
}

}  // namespace

Result<std::unique_ptr<Gateway>> Gateway::start(const GatewayConfig& config, std::unique_ptr<UsageStore> store, int threads) {
  UsageStore& stored = *store;  // owned by the gateway's ledger from here on
  auto gw = std::make_unique<GatewayImpl>(config, std::move(store), threads);
  KOI_RETURN_IF_ERROR(restore_admin_changes(stored, gw->fleet()));  // over the YAML file
  KOI_RETURN_IF_ERROR(gw->listen());
  return std::unique_ptr<Gateway>(std::move(gw));
}

}  // namespace koi::gateway
