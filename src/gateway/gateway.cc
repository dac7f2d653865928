// The HTTP side of the gateway (see gateway.h): listeners, sessions, the proxy, health checks.
#include "gateway/gateway.h"

#include <openssl/rand.h>

#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast.hpp>
#include <boost/json.hpp>
#include <chrono>
#include <thread>

#include "base/clock.h"
#include "base/logging.h"
#include "gateway/admin_api.h"
#include "gateway/fleet.h"
#include "gateway/http_client.h"
#include "gateway/metrics.h"
#include "gateway/openai.h"
#include "gateway/prefix_cache.h"

namespace koi::gateway {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace json = boost::json;
using tcp = asio::ip::tcp;
using Request = http::request<http::string_body>;

namespace {

constexpr auto kNoThrow = asio::as_tuple(asio::use_awaitable);
constexpr size_t kMaxRequestBody = 32 << 20;
constexpr size_t kMaxResponseBody = 256 << 20;

int64_t unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string new_request_id() {
  unsigned char b[12];
  RAND_bytes(b, sizeof b);
  std::string out = "req-";
  for (unsigned char c : b) out += fmt::format("{:02x}", c);
  return out;
}

std::string_view bearer(const Request& req) {
  auto it = req.find(http::field::authorization);
  if (it == req.end()) return {};
  std::string_view v = it->value();
  return v.starts_with("Bearer ") ? v.substr(7) : std::string_view{};
}

std::vector<std::unique_ptr<asio::io_context>> make_contexts(int threads) {
  std::vector<std::unique_ptr<asio::io_context>> out;
  for (int i = 0; i < std::max(1, threads); ++i) out.push_back(std::make_unique<asio::io_context>(1));
  return out;
}

// Completion of a detached coroutine: an exception that escaped it is a bug; log it.
void log_exception(std::exception_ptr e) {
  if (!e) return;
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    log::error("gateway: a connection ended with an unexpected exception: {}", x.what());
  }
}

// JSON bodies are built outside the coroutines: GCC 12 miscompiles brace-initialized
// json::object temporaries inside a coroutine ("array used as initializer").
std::string models_json(const std::vector<std::string>& models) {
  json::array data;
  for (const std::string& m : models) data.push_back(json::object{{"id", m}, {"object", "model"}, {"owned_by", "koi"}});
  return json::serialize(json::object{{"object", "list"}, {"data", data}});
}

// What one proxied request accumulates; becomes its usage record and its metrics.
struct Exchange {
  UsageRecord record;
  int64_t start_ns = 0;
  int64_t estimated_tokens = 0;
  bool admitted = false;
  bool recorded = false;
};

class GatewayImpl final : public Gateway {
 public:
  GatewayImpl(const GatewayConfig& config, std::unique_ptr<UsageStore> store, int threads)
      : config_(config),
        ios_(make_contexts(threads)),
        clock_(SystemClock::instance()),
        fleet_(config, clock_, static_cast<uint64_t>(clock_.now_ns())),
        ledger_(std::move(store)),
        admin_api_(config.admin_key, fleet_, ledger_.store()),
        api_(*ios_[0]),
        admin_(*ios_[0]) {
    declare_metrics();
  }
  ~GatewayImpl() override { stop(); }

  Status listen();
  int port() const override { return port_; }
  int admin_port() const override { return admin_port_; }
  Fleet& fleet() override { return fleet_; }
  Metrics& metrics() override { return metrics_; }
  void stop() override;

 private:
  void declare_metrics();
  asio::awaitable<void> accept_loop(tcp::acceptor& acceptor, bool admin);
  asio::awaitable<void> session(tcp::socket socket, bool admin);
  asio::awaitable<void> health_loop();
  asio::awaitable<bool> send(beast::tcp_stream& client, int status, std::string body, std::string content_type,
                             bool keep_alive, int64_t retry_after_s = 0);
  asio::awaitable<bool> handle_api(beast::tcp_stream& client, Request& req);
  asio::awaitable<bool> handle_admin(beast::tcp_stream& client, Request& req);
  asio::awaitable<bool> proxy(beast::tcp_stream& client, Request& req, bool chat);
  asio::awaitable<Status> commit(Exchange& ex);
  void finish_metrics(const Exchange& ex);

  const GatewayConfig config_;
  const Clock& clock_;
  Fleet fleet_;
  Metrics metrics_;
  // One single-threaded io_context per worker thread; a connection lives on one of them, so
  // its coroutine needs no strand. Declared before ledger_: the ledger's last callbacks post
  // to them while it drains.
  std::vector<std::unique_ptr<asio::io_context>> ios_;
  std::atomic<size_t> next_io_{0};
  Ledger ledger_;
  AdminApi admin_api_;
  tcp::acceptor api_, admin_;
  std::vector<std::thread> threads_;
  int port_ = 0, admin_port_ = 0;
  std::atomic<bool> stopped_{false};
};

void GatewayImpl::declare_metrics() {
  using T = Metrics::Type;
  metrics_.declare("koi_gateway_requests_total", T::kCounter, "Requests by tenant, model, version, replica and status.");
  metrics_.declare("koi_gateway_tokens_total", T::kCounter, "Tokens metered, by tenant, model, version and kind.");
  metrics_.declare("koi_gateway_limit_rejections_total", T::kCounter, "Requests refused by a tenant limit (429).");
  metrics_.declare("koi_gateway_auth_failures_total", T::kCounter, "Requests with a missing or wrong API key.");
  metrics_.declare("koi_gateway_upstream_errors_total", T::kCounter, "Failed attempts on a replica (retried or not).");
  metrics_.declare("koi_gateway_ttft_seconds", T::kHistogram, "Time to the first byte of the replica's answer.");
  metrics_.declare("koi_gateway_request_duration_seconds", T::kHistogram, "Time from the request to the end of the response.");
  metrics_.declare("koi_gateway_breaker_state", T::kGauge, "Circuit breaker: 0 closed, 1 open, 2 half-open.");
  metrics_.declare("koi_gateway_replica_outstanding", T::kGauge, "Requests in flight per replica.");
  metrics_.declare("koi_gateway_version_weight", T::kGauge, "Traffic weight of each version.");
  metrics_.declare("koi_gateway_ledger_errors_total", T::kCounter, "Usage records the ledger failed to write.");
}

Status GatewayImpl::listen() {
  auto bind = [&](tcp::acceptor& acc, const std::string& host, int port, int* bound) -> Status {
    beast::error_code ec;
    const tcp::endpoint ep(asio::ip::make_address(host, ec), static_cast<uint16_t>(port));
    if (ec) return Status::invalid_argument("listen address '" + host + "' is not an IP address");
    acc.open(ep.protocol(), ec);
    if (!ec) acc.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) acc.bind(ep, ec);
    if (!ec) acc.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) return Status::unavailable(fmt::format("cannot listen on {}:{}: {}; pick another port", host, port, ec.message()));
    *bound = acc.local_endpoint().port();
    return ok_status();
  };
  KOI_RETURN_IF_ERROR(bind(api_, config_.host, config_.port, &port_));
  asio::co_spawn(*ios_[0], accept_loop(api_, false), log_exception);
  if (!config_.admin_key.empty()) {
    KOI_RETURN_IF_ERROR(bind(admin_, config_.admin_host, config_.admin_port, &admin_port_));
    asio::co_spawn(*ios_[0], accept_loop(admin_, true), log_exception);
  }
  asio::co_spawn(*ios_[0], health_loop(), log_exception);
  for (auto& io : ios_) {
    threads_.emplace_back([&io] {
      auto guard = asio::make_work_guard(*io);
      io->run();
    });
  }
  return ok_status();
}

void GatewayImpl::stop() {
  if (stopped_.exchange(true)) return;
  for (auto& io : ios_) io->stop();
  for (auto& t : threads_) t.join();
  threads_.clear();
}

asio::awaitable<void> GatewayImpl::accept_loop(tcp::acceptor& acceptor, bool admin) {
  for (;;) {
    asio::io_context& io = *ios_[next_io_++ % ios_.size()];
    auto [ec, socket] = co_await acceptor.async_accept(io, kNoThrow);
    if (ec == asio::error::operation_aborted) co_return;
    if (ec) continue;
    socket.set_option(tcp::no_delay(true), ec);
    auto ex = socket.get_executor();
    asio::co_spawn(ex, session(std::move(socket), admin), log_exception);
  }
}

asio::awaitable<void> GatewayImpl::health_loop() {
  asio::steady_timer timer(co_await asio::this_coro::executor);
  for (;;) {
    for (const Fleet::Endpoint& e : fleet_.endpoints()) {
      auto r = co_await async_http_call(e.host, e.port, "GET", "/health", "", {},
                                        std::chrono::milliseconds(config_.health_timeout_ms));
      fleet_.health_result(e.url, r.ok() && r->status == 200);
    }
    timer.expires_after(std::chrono::milliseconds(config_.health_interval_ms));
    auto [ec] = co_await timer.async_wait(kNoThrow);
    if (ec) co_return;
  }
}

asio::awaitable<void> GatewayImpl::session(tcp::socket socket, bool admin) {
  beast::tcp_stream client(std::move(socket));
  beast::flat_buffer buf;
  for (;;) {
    http::request_parser<http::string_body> parser;
    parser.body_limit(kMaxRequestBody);
    client.expires_after(std::chrono::milliseconds(config_.idle_timeout_ms));
    auto [ec, n] = co_await http::async_read(client, buf, parser, kNoThrow);
    if (ec) break;
    Request req = parser.release();
    const bool keep = admin ? co_await handle_admin(client, req) : co_await handle_api(client, req);
    if (!keep || !req.keep_alive()) break;
  }
  beast::error_code ec;
  client.socket().shutdown(tcp::socket::shutdown_send, ec);
}

asio::awaitable<bool> GatewayImpl::send(beast::tcp_stream& client, int status, std::string body,
                                        std::string content_type, bool keep_alive, int64_t retry_after_s) {
  http::response<http::string_body> res{static_cast<http::status>(status), 11};
  res.set(http::field::content_type, content_type);
  if (retry_after_s > 0) res.set(http::field::retry_after, std::to_string(retry_after_s));
  res.keep_alive(keep_alive);
  res.body() = std::move(body);
  res.prepare_payload();
  client.expires_after(std::chrono::milliseconds(config_.idle_timeout_ms));
  auto [ec, n] = co_await http::async_write(client, res, kNoThrow);
  co_return !ec && keep_alive;
}

asio::awaitable<bool> GatewayImpl::handle_api(beast::tcp_stream& client, Request& req) {
  const std::string_view target = req.target();
  const bool keep = req.keep_alive();
  if (req.method() == http::verb::get && target == "/health") co_return co_await send(client, 200, "ok\n", "text/plain", keep);
  if (req.method() == http::verb::get && target == "/metrics") {
    fleet_.export_gauges(metrics_);
    co_return co_await send(client, 200, metrics_.render(), "text/plain; version=0.0.4", keep);
  }
  if (req.method() == http::verb::post && (target == "/v1/completions" || target == "/v1/chat/completions")) {
    co_return co_await proxy(client, req, target == "/v1/chat/completions");
  }
  if (req.method() == http::verb::get && target == "/v1/models") {
    auto key = fleet_.authenticate(bearer(req));
    if (!key) co_return co_await send(client, 401, openai_error("invalid API key", "invalid_request_error", 401), "application/json", keep);
    co_return co_await send(client, 200, models_json(fleet_.models_for(key->tenant)), "application/json", keep);
  }
  co_return co_await send(client, 404, openai_error("no route " + std::string(target), "invalid_request_error", 404), "application/json", keep);
}

asio::awaitable<Status> GatewayImpl::commit(Exchange& ex) {
  if (ex.recorded) co_return ok_status();
  ex.recorded = true;
  ex.record.latency_ms = static_cast<double>(clock_.now_ns() - ex.start_ns) * 1e-6;
  auto executor = co_await asio::this_coro::executor;
  Status s = co_await asio::async_initiate<decltype(asio::use_awaitable), void(Status)>(
      [this, &ex, executor](auto handler) {
        // The ledger keeps callbacks in std::function, which must be copyable: share the
        // handler, post it back to the connection's io_context, and invoke it once as an
        // rvalue, as Asio expects of a completion handler.
        auto h = std::make_shared<decltype(handler)>(std::move(handler));
        ledger_.submit(ex.record, [h, executor](const Status& s) {
          asio::post(executor, [h, s]() mutable { std::move (*h)(s); });
        });
      },
      asio::use_awaitable);
  if (!s.ok()) metrics_.add("koi_gateway_ledger_errors_total", {});
  co_return s;
}

void GatewayImpl::finish_metrics(const Exchange& ex) {
  const UsageRecord& r = ex.record;
  const Labels base{{"tenant", r.tenant}, {"model", r.model}, {"version", r.version}};
  Labels with_replica = base;
  with_replica.emplace_back("replica", r.replica);
  Labels with_status = with_replica;
  with_status.emplace_back("status", std::to_string(r.status));
  metrics_.add("koi_gateway_requests_total", with_status);
  Labels prompt = base, completion = base;
  prompt.emplace_back("kind", "prompt");
  completion.emplace_back("kind", "completion");
  metrics_.add("koi_gateway_tokens_total", prompt, static_cast<double>(r.prompt_tokens));
  metrics_.add("koi_gateway_tokens_total", completion, static_cast<double>(r.completion_tokens));
  metrics_.observe("koi_gateway_request_duration_seconds", with_replica, r.latency_ms * 1e-3);
  if (r.ttft_ms > 0) metrics_.observe("koi_gateway_ttft_seconds", with_replica, r.ttft_ms * 1e-3);
}

asio::awaitable<bool> GatewayImpl::proxy(beast::tcp_stream& client, Request& req, bool chat) {
  const bool keep = req.keep_alive();
  auto key = fleet_.authenticate(bearer(req));
  if (!key) {
    metrics_.add("koi_gateway_auth_failures_total", {});
    co_return co_await send(client, 401, openai_error("invalid API key; pass 'Authorization: Bearer koi-...'", "invalid_request_error", 401),
                            "application/json", keep);
  }
  Exchange ex;
  ex.start_ns = clock_.now_ns();
  UsageRecord& rec = ex.record;
  rec.start_unix_ms = unix_ms();
  rec.tenant = key->tenant;
  rec.key_id = key->id;
  auto rid = req.find("x-request-id");
  rec.request_id = rid != req.end() ? key->tenant + "/" + std::string(rid->value()) : new_request_id();

  // Everything that ends before a replica answers goes through here: record, meter, reply.
  auto reject = [&](int status, const std::string& message, const std::string& type, int64_t retry_after_s) -> asio::awaitable<bool> {
    rec.status = status;
    co_await commit(ex);
    if (ex.admitted) fleet_.finish(rec.tenant, ex.estimated_tokens, 0);
    finish_metrics(ex);
    co_return co_await send(client, status, openai_error(message, type, status), "application/json", keep, retry_after_s);
  };

  auto parsed = parse_request(req.body(), chat);
  if (!parsed.ok()) co_return co_await reject(400, parsed.status().message(), "invalid_request_error", 0);
  rec.model = parsed->model;
  rec.stream = parsed->stream;
  ex.estimated_tokens = estimate_tokens(parsed->prompt_text);
  const Admission adm = fleet_.admit(rec.tenant, rec.model, ex.estimated_tokens);
  if (adm.status != 200) {
    if (adm.status == 429) metrics_.add("koi_gateway_limit_rejections_total", {{"tenant", rec.tenant}, {"limit", adm.limit}});
    co_return co_await reject(adm.status, adm.message, adm.status == 429 ? "rate_limit_exceeded" : "invalid_request_error",
                              adm.retry_after_s);
  }
  ex.admitted = true;

  const std::vector<uint64_t> blocks = chain_text_blocks(parsed->prompt_text, config_.prefix_block_bytes);
  auto session_it = req.find(config_.session_header);
  const std::string session = session_it != req.end() ? std::string(session_it->value()) : "";
  const RouteInput route{blocks, session};

  auto executor = co_await asio::this_coro::executor;
  std::optional<ReplicaPick> pick;
  std::optional<beast::tcp_stream> up;
  beast::flat_buffer up_buf;
  std::optional<http::response_parser<http::buffer_body>> up_parser;
  std::vector<std::string> tried;
  int last_error = 503;
  std::string last_message = "no healthy replica for model '" + rec.model + "'";
  for (int attempt = 0; attempt < config_.max_attempts; ++attempt) {
    pick = fleet_.pick(rec.model, route, tried);
    if (!pick) break;
    tried.push_back(pick->replica->url);
    up.emplace(executor);
    const int64_t attempt_start = clock_.now_ns();
    auto failed = [&](int status, const std::string& why) {
      metrics_.add("koi_gateway_upstream_errors_total", {{"replica", pick->replica->url}});
      fleet_.report(*pick, Outcome::kReplicaError, static_cast<double>(clock_.now_ns() - attempt_start) * 1e-9);
      log::debug("request {}: replica {} failed: {}", rec.request_id, pick->replica->url, why);
      last_error = status;
      last_message = "replica " + pick->replica->url + ": " + why;
      pick.reset();
      up.reset();
    };
    beast::error_code addr_ec;
    const tcp::endpoint ep(asio::ip::make_address(pick->replica->host, addr_ec),
                           static_cast<uint16_t>(std::stoi(pick->replica->port)));
    if (addr_ec) { failed(502, "cannot resolve " + pick->replica->host); continue; }
    up->expires_after(std::chrono::milliseconds(config_.connect_timeout_ms));
    auto [c_ec] = co_await up->async_connect(ep, kNoThrow);
    if (c_ec) { failed(c_ec == beast::error::timeout ? 504 : 502, "connect: " + c_ec.message()); continue; }
    http::request<http::string_body> up_req{http::verb::post, req.target(), 11};
    up_req.set(http::field::host, pick->replica->host + ":" + pick->replica->port);
    up_req.set(http::field::content_type, "application/json");
    up_req.set("x-request-id", rec.request_id);
    up_req.body() = parsed->upstream_body;
    up_req.prepare_payload();
    up->expires_after(std::chrono::milliseconds(config_.first_byte_timeout_ms));
    auto [w_ec, w_n] = co_await http::async_write(*up, up_req, kNoThrow);
    if (w_ec) { failed(502, "write: " + w_ec.message()); continue; }
    up_parser.emplace();
    up_parser->body_limit(kMaxResponseBody);
    up_buf.clear();
    auto [h_ec, h_n] = co_await http::async_read_header(*up, up_buf, *up_parser, kNoThrow);
    if (h_ec) { failed(h_ec == beast::error::timeout ? 504 : 502, "no response: " + h_ec.message()); continue; }
    if (up_parser->get().result_int() >= 500) { failed(502, fmt::format("status {}", up_parser->get().result_int())); continue; }
    break;
  }
  if (!pick) co_return co_await reject(last_error, last_message, "upstream_error", 0);

  rec.model = pick->model;
  rec.version = pick->version;
  rec.replica = pick->replica->url;
  const int status = static_cast<int>(up_parser->get().result_int());
  const bool sse = up_parser->get()[http::field::content_type].starts_with("text/event-stream");
  rec.ttft_ms = static_cast<double>(clock_.now_ns() - ex.start_ns) * 1e-6;

  // Reads the next piece of the replica's body into `out`; false at the end or on an error.
  char chunk[16384];
  beast::error_code read_ec;
  auto read_some = [&](std::string_view* out) -> asio::awaitable<bool> {
    if (up_parser->is_done()) co_return false;
    up_parser->get().body().data = chunk;
    up_parser->get().body().size = sizeof chunk;
    up->expires_after(std::chrono::milliseconds(config_.idle_timeout_ms));
    auto [ec, n] = co_await http::async_read(*up, up_buf, *up_parser, kNoThrow);
    if (ec == http::error::need_buffer) ec = {};
    read_ec = ec;
    *out = std::string_view(chunk, sizeof chunk - up_parser->get().body().size);
    co_return !ec;
  };

  Outcome outcome = Outcome::kOk;
  bool client_ok = true;
  if (!sse) {
    std::string body;
    std::string_view piece;
    while (co_await read_some(&piece)) body.append(piece);
    if (read_ec || !up_parser->is_done()) {
      outcome = Outcome::kReplicaError;
      rec.status = 502;
      co_await commit(ex);
      client_ok = co_await send(client, 502, openai_error("replica " + rec.replica + " broke off its answer", "upstream_error", 502),
                                "application/json", keep);
    } else {
      if (auto u = parse_usage(body)) {
        rec.prompt_tokens = u->prompt_tokens, rec.completion_tokens = u->completion_tokens, rec.cached_tokens = u->cached_tokens;
      }
      rec.status = status;
      if (status >= 400) outcome = Outcome::kNeutral;
      co_await commit(ex);
      client_ok = co_await send(client, status, std::move(body), std::string(up_parser->get()[http::field::content_type]), keep);
    }
  } else {
    http::response<http::empty_body> head{http::status::ok, 11};
    head.set(http::field::content_type, "text/event-stream");
    head.set(http::field::cache_control, "no-cache");
    head.chunked(true);
    head.keep_alive(keep);
    http::response_serializer<http::empty_body> sr{head};
    client.expires_after(std::chrono::milliseconds(config_.idle_timeout_ms));
    auto [hw_ec, hw_n] = co_await http::async_write_header(client, sr, kNoThrow);
    client_ok = !hw_ec;
    SseSplitter splitter;
    bool done = false, first = true;
    int64_t chunks = 0;
    std::string_view piece;
    while (client_ok && !done && co_await read_some(&piece)) {
      std::string out;
      for (SseEvent& ev : splitter.feed(piece)) {
        if (first) rec.ttft_ms = static_cast<double>(clock_.now_ns() - ex.start_ns) * 1e-6, first = false;
        if (ev.data == "[DONE]") {
          done = true;
          rec.status = status;
          if (!out.empty()) {
            client.expires_after(std::chrono::milliseconds(config_.idle_timeout_ms));
            auto [ec, n] = co_await asio::async_write(client, http::make_chunk(asio::buffer(out)), kNoThrow);
            client_ok = !ec;
            out.clear();
          }
          co_await commit(ex);
          out += ev.raw;
          break;
        }
        bool drop = false;
        if (ev.data.find("\"usage\"") != std::string::npos) {
          if (auto u = parse_usage(ev.data)) {
            rec.prompt_tokens = u->prompt_tokens, rec.completion_tokens = u->completion_tokens, rec.cached_tokens = u->cached_tokens;
            drop = !parsed->client_wants_usage && ev.data.find("\"choices\":[]") != std::string::npos;
          }
        }
        if (!drop && ev.data.find("\"choices\":[]") == std::string::npos) ++chunks;
        if (!drop) out += ev.raw;
      }
      if (!out.empty() && client_ok) {
        client.expires_after(std::chrono::milliseconds(config_.idle_timeout_ms));
        auto [ec, n] = co_await asio::async_write(client, http::make_chunk(asio::buffer(out)), kNoThrow);
        client_ok = !ec;
      }
    }
    if (!done) {
      if (rec.completion_tokens == 0) rec.completion_tokens = chunks;  // the usage chunk never came
      if (!client_ok) {
        rec.status = 499;
        outcome = Outcome::kNeutral;
      } else if (read_ec || !up_parser->is_done()) {
        rec.status = 502;
        outcome = Outcome::kReplicaError;
      } else {
        rec.status = status;  // a stream that ended without [DONE]
      }
      co_await commit(ex);
    }
    if (client_ok) {
      client.expires_after(std::chrono::milliseconds(config_.idle_timeout_ms));
      auto [ec, n] = co_await asio::async_write(client, http::make_chunk_last(), kNoThrow);
      client_ok = !ec;
    }
  }
  up.reset();  // closes the replica connection now; on a client disconnect the replica sees it
  fleet_.report(*pick, outcome, static_cast<double>(clock_.now_ns() - ex.start_ns) * 1e-9);
  fleet_.finish(rec.tenant, ex.estimated_tokens, rec.prompt_tokens + rec.completion_tokens);
  finish_metrics(ex);
  co_return client_ok && keep;
}

asio::awaitable<bool> GatewayImpl::handle_admin(beast::tcp_stream& client, Request& req) {
  const bool keep = req.keep_alive();
  AdminReply r = admin_api_.handle(req.method_string(), req.target(), bearer(req), req.body());
  co_return co_await send(client, r.status, std::move(r.body), "application/json", keep);
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
