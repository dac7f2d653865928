#include "gateway/proxy.h"

#include <openssl/rand.h>

#include <boost/asio.hpp>
#include <boost/json.hpp>
#include <chrono>

#include <fmt/format.h>

#include "base/logging.h"
#include "gateway/kv_index.h"
#include "gateway/openai.h"
#include "gateway/prefix_cache.h"
#include "net/sse.h"

namespace koi::gateway {

namespace asio = boost::asio;
namespace json = boost::json;
using asio::awaitable;

namespace {

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

std::string header(const net::Request& req, std::string_view name) {
  auto it = req.find(boost::beast::string_view(name.data(), name.size()));
  return it == req.end() ? std::string() : std::string(it->value());
}

std::string_view bearer_of(const net::Request& req) {
  auto it = req.find(boost::beast::http::field::authorization);
  if (it == req.end()) return {};
  std::string_view v(it->value().data(), it->value().size());
  return v.starts_with("Bearer ") ? v.substr(7) : std::string_view{};
}

}  // namespace

// What one request accumulates; becomes its usage record and its metrics.
struct Proxy::Call {
  UsageRecord record;
  ParsedRequest parsed;
  int64_t start_ns = 0;
  int64_t estimated_tokens = 0;
  bool admitted = false;
  bool recorded = false;
  std::optional<ReplicaPick> pick;
  std::string adapter;  // a LoRA adapter of record.model that the request names; "" for the model itself
  Outcome outcome = Outcome::kOk;
  int64_t content_chunks = 0;       // chunks with choices relayed (the count when no usage came)
  bool saw_usage = false;
  bool first_event = true;
  // Client disconnect: set by the responder's watch, on this connection's thread.
  bool client_gone = false;
  net::Exchange* upstream = nullptr;

  void take_usage(const Usage& u) {
    record.prompt_tokens = u.prompt_tokens;
    record.completion_tokens = u.completion_tokens;
    record.cached_tokens = u.cached_tokens;
    saw_usage = true;
  }
};

namespace {

// One upstream event as the client should see it ("" to drop it), metering it on the way:
// usage in a chunk updates the record; a usage-only chunk is dropped unless the client asked
// for usage; usage in a content chunk is removed unless the client asked for it in every chunk.
std::string relay_event(const net::SseEvent& ev, bool client_wants_usage, bool client_wants_continuous,
                        int64_t* content_chunks, std::optional<Usage>* usage) {
  if (ev.data.find("\"usage\"") == std::string::npos) {  // the common case: no parsing
    ++*content_chunks;
    return ev.raw;
  }
  json::error_code ec;
  json::value v = json::parse(ev.data, ec);
  if (ec || !v.is_object()) return ev.raw;
  json::object& o = v.as_object();
  const json::value* choices = o.if_contains("choices");
  const bool no_choices = choices && choices->is_array() && choices->as_array().empty();
  if (!no_choices) ++*content_chunks;
  *usage = parse_usage(ev.data);
  if (!usage->has_value()) return ev.raw;
  if (no_choices) return client_wants_usage ? ev.raw : std::string();
  if (client_wants_continuous) return ev.raw;
  o.erase("usage");
  return net::sse_data(json::serialize(v));
}

// Disaggregation: the decode worker takes the prompt's KV from the chosen prefill worker.
void add_prefill_peer(const ReplicaPick& pick, net::ClientRequest& up_req) {
  if (!pick.prefill_peer.empty()) up_req.headers.emplace_back("x-koi-prefill-peer", pick.prefill_peer);
}

// The ids of a POST /tokenize answer ({"tokens": [...]}), or nullopt.
std::optional<std::vector<int32_t>> tokens_of(std::string_view body) {
  json::error_code ec;
  const json::value v = json::parse(body, ec);
  const json::value* t = !ec && v.is_object() ? v.as_object().if_contains("tokens") : nullptr;
  if (!t || !t->is_array()) return std::nullopt;
  std::vector<int32_t> out;
  for (const json::value& x : t->as_array()) {
    if (!x.is_int64()) return std::nullopt;
    out.push_back(static_cast<int32_t>(x.as_int64()));
  }
  return out;
}

std::string cut_stream_event(const std::string& replica, const std::string& why) {
  return net::sse_data(openai_error("the replica " + replica + " broke off the stream: " + why, "upstream_error", 502));
}

}  // namespace

Proxy::Proxy(const GatewayConfig& config, Fleet& fleet, Ledger& ledger, metrics::Registry& metrics, net::Client& client,
             const Clock& clock)
    : config_(config), fleet_(fleet), ledger_(ledger), metrics_(metrics), client_(client), clock_(clock) {}

awaitable<void> Proxy::handle(net::Request& req, net::Responder& res, bool chat) {
  auto key = fleet_.authenticate(bearer_of(req));
  if (!key) {
    metrics_.add("koi_gateway_auth_failures_total", {});
    std::string body = openai_error("invalid API key; pass 'Authorization: Bearer koi-...'", "invalid_request_error", 401);
    co_await res.send(401, std::move(body), "application/json");
    co_return;
  }
  Call call;
  call.start_ns = clock_.now_ns();
  UsageRecord& rec = call.record;
  rec.start_unix_ms = unix_ms();
  rec.tenant = key->tenant;
  rec.key_id = key->id;
  const std::string rid = header(req, "x-request-id");
  rec.request_id = rid.empty() ? new_request_id() : key->tenant + "/" + rid;

  auto parsed = parse_request(req.body(), chat);
  if (!parsed.ok()) {
    co_await reject(call, res, 400, parsed.status().message(), "invalid_request_error", 0);
    co_return;
  }
  call.parsed = std::move(*parsed);
  rec.model = call.parsed.model;
  // A LoRA adapter's name: admitted, limited and metered as its base model, and sent (the body
  // unchanged) only to replicas that serve the adapter.
  if (std::optional<std::string> base = fleet_.model_of_adapter(rec.model)) {
    call.adapter = rec.model;
    rec.model = *base;
  }
  rec.stream = call.parsed.stream;
  call.estimated_tokens = estimate_tokens(call.parsed);
  const Admission adm = fleet_.admit(rec.tenant, rec.model, call.estimated_tokens);
  if (adm.status != 200) {
    if (adm.status == 429) metrics_.add("koi_gateway_limit_rejections_total", {{"tenant", rec.tenant}, {"limit", adm.limit}});
    const std::string type = adm.status == 429 ? "rate_limit_exceeded" : "invalid_request_error";
    co_await reject(call, res, adm.status, adm.message, type, adm.retry_after_s);
    co_return;
  }
  call.admitted = true;
  res.watch_disconnect([&call] {
    call.client_gone = true;
    if (call.upstream) call.upstream->abort();
  });

  std::unique_ptr<net::Exchange> up = co_await open_upstream(call, req, res);
  if (!up) co_return;  // answered inside
  call.upstream = up.get();
  if (call.client_gone) up->abort();  // it left while the replica was being reached
  rec.model = call.pick->model;
  rec.version = call.pick->version;
  rec.replica = call.pick->replica->url;
  rec.ttft_ms = static_cast<double>(clock_.now_ns() - call.start_ns) * 1e-6;
  const bool sse = up->header("content-type").starts_with("text/event-stream");
  if (sse) {
    co_await relay_stream(call, *up, res);
  } else {
    co_await relay_whole(call, *up, res);
  }
  call.upstream = nullptr;
  up.reset();  // a connection not read to its end closes now; the replica sees it
  finish(call);
}

awaitable<void> Proxy::reject(Call& call, net::Responder& res, int status, std::string message, std::string type,
                              int64_t retry_after_s) {
  call.record.status = status;
  co_await commit(call);
  if (call.admitted) fleet_.finish(call.record.tenant, call.estimated_tokens, 0);
  record_metrics(call.record);
  net::Headers extra;
  if (retry_after_s > 0) extra.emplace_back("Retry-After", std::to_string(retry_after_s));
  std::string body = openai_error(message, type, status);
  co_await res.send(status, std::move(body), "application/json", extra);
}

// kv_events routing: the prompt's engine block hashes, from its token ids (sent by the client,
// or asked of a replica's /tokenize). Empty for other models, and when no replica can tell the
// tokens: the request is then routed by load.
awaitable<std::vector<engine::BlockHash>> Proxy::prompt_block_hashes_of(const Call& call) {
  const std::optional<Fleet::KvRouteInfo> info = fleet_.kv_route_info(call.record.model);
  if (!info) co_return std::vector<engine::BlockHash>{};
  if (!call.parsed.prompt_tokens.empty()) {
    co_return prompt_block_hashes(call.parsed.prompt_tokens, info->block_size, call.parsed.cache_key);
  }
  net::ClientRequest req;
  req.method = "POST";
  req.target = "/tokenize";
  req.body = call.parsed.tokenize_body;
  net::Timeouts timeouts;
  timeouts.connect = std::chrono::milliseconds(config_.connect_timeout_ms);
  timeouts.first_byte = timeouts.idle = std::chrono::milliseconds(config_.health_timeout_ms);
  auto r = co_await client_.call(info->tokenizer.host, info->tokenizer.port, std::move(req), timeouts);
  std::optional<std::vector<int32_t>> tokens;
  if (r.ok() && r->status == 200) tokens = tokens_of(r->body);
  if (!tokens) {
    log::debug("request {}: no tokens from {}/tokenize; routing by load", call.record.request_id, info->tokenizer.url);
    co_return std::vector<engine::BlockHash>{};
  }
  co_return prompt_block_hashes(*tokens, info->block_size, call.parsed.cache_key);
}

awaitable<std::unique_ptr<net::Exchange>> Proxy::open_upstream(Call& call, const net::Request& req, net::Responder& res) {
  // The approximate tree chains the prompt's bytes: its text, or the bytes of its token ids.
  const std::vector<int32_t>& ids = call.parsed.prompt_tokens;
  const std::string_view prompt_bytes = ids.empty() ? std::string_view(call.parsed.prompt_text)
                                                    : std::string_view(reinterpret_cast<const char*>(ids.data()), ids.size() * sizeof(int32_t));
  const std::vector<uint64_t> blocks = chain_text_blocks(prompt_bytes, config_.prefix_block_bytes);
  const std::vector<engine::BlockHash> kv_blocks = co_await prompt_block_hashes_of(call);
  const RouteInput route{blocks, header(req, config_.session_header), call.estimated_tokens, kv_blocks};
  net::Timeouts timeouts;
  timeouts.connect = std::chrono::milliseconds(config_.connect_timeout_ms);
  timeouts.first_byte = std::chrono::milliseconds(config_.first_byte_timeout_ms);
  timeouts.idle = std::chrono::milliseconds(config_.idle_timeout_ms);
  std::vector<std::string> tried;
  int last_status = 503;
  std::string last_message = "no healthy replica for model '" + call.record.model + "'";
  for (int attempt = 0; attempt < config_.max_attempts && !call.client_gone; ++attempt) {
    std::optional<ReplicaPick> pick = fleet_.pick(call.record.model, route, tried, call.adapter);
    if (!pick) break;
    if (!pick->pd_decision.empty()) {
      metrics_.add("koi_gateway_pd_decisions_total", {{"model", pick->model}, {"decision", pick->pd_decision}});
    }
    tried.push_back(pick->replica->url);
    const int64_t attempt_start = clock_.now_ns();
    net::ClientRequest up_req;
    up_req.method = "POST";
    up_req.target = std::string(req.target());
    up_req.headers = {{"x-request-id", call.record.request_id}};
    add_prefill_peer(*pick, up_req);
    up_req.body = call.parsed.upstream_body;
    auto opened = co_await client_.open(pick->replica->host, pick->replica->port, std::move(up_req), timeouts);
    std::string why;
    if (!opened.ok()) {
      last_status = opened.status().code() == StatusCode::kDeadlineExceeded ? 504 : 502;
      why = opened.status().message();
    } else if ((*opened)->status() >= 500) {
      last_status = 502;
      why = fmt::format("status {}", (*opened)->status());
    } else {
      call.pick = std::move(pick);
      co_return std::move(*opened);
    }
    metrics_.add("koi_gateway_upstream_errors_total", {{"replica", pick->replica->url}});
    fleet_.report(*pick, Outcome::kReplicaError, static_cast<double>(clock_.now_ns() - attempt_start) * 1e-9);
    log::debug("request {}: replica {} failed: {}", call.record.request_id, pick->replica->url, why);
    last_message = "replica " + pick->replica->url + ": " + why;
  }
  if (call.client_gone) {
    call.record.status = 499;
    co_await commit(call);
    fleet_.finish(call.record.tenant, call.estimated_tokens, 0);
    record_metrics(call.record);
    co_return nullptr;
  }
  co_await reject(call, res, last_status, last_message, "upstream_error", 0);
  co_return nullptr;
}


awaitable<void> Proxy::relay_whole(Call& call, net::Exchange& up, net::Responder& res) {
  UsageRecord& rec = call.record;
  const int status = up.status();
  const std::string content_type(up.header("content-type"));
  auto body = co_await up.read_all(kMaxResponseBody);
  if (call.client_gone) {
    rec.status = 499;
    call.outcome = Outcome::kNeutral;
    co_await commit(call);
    co_return;
  }
  if (!body.ok()) {
    rec.status = 502;
    call.outcome = Outcome::kReplicaError;
    co_await commit(call);
    std::string err = openai_error("replica " + rec.replica + " broke off its answer", "upstream_error", 502);
    co_await res.send(502, std::move(err), "application/json");
    co_return;
  }
  if (auto u = parse_usage(*body)) call.take_usage(*u);
  rec.status = status;
  if (status >= 400) call.outcome = Outcome::kNeutral;
  co_await commit(call);
  co_await res.send(status, std::move(*body), content_type);
}

awaitable<void> Proxy::relay_stream(Call& call, net::Exchange& up, net::Responder& res) {
  UsageRecord& rec = call.record;
  const int status = up.status();
  bool client_ok = co_await res.begin_stream(status, "text/event-stream");
  net::SseSplitter splitter;
  bool done = false;
  std::string cut;  // why the replica's stream ended early ("" when it did not)
  while (client_ok && !done) {
    auto piece = co_await up.read_some();
    if (call.client_gone) break;
    if (!piece.ok()) {
      cut = piece.status().message();
      break;
    }
    if (piece->empty() && up.done()) {
      cut = "the stream ended without [DONE]";
      break;
    }
    std::string out;
    for (const net::SseEvent& ev : splitter.feed(*piece)) {
      if (call.first_event) {
        rec.ttft_ms = static_cast<double>(clock_.now_ns() - call.start_ns) * 1e-6;
        call.first_event = false;
      }
      if (ev.data == "[DONE]") {
        done = true;
        break;
      }
      std::optional<Usage> usage;
      out += relay_event(ev, call.parsed.client_wants_usage, call.parsed.client_wants_continuous_usage, &call.content_chunks, &usage);
      if (usage) call.take_usage(*usage);
    }
    if (!out.empty()) client_ok = co_await res.write(out);
  }
  if (!call.saw_usage) rec.completion_tokens = call.content_chunks;
  if (done) {
    rec.status = status;
    co_await commit(call);
    const std::string end = net::sse_data("[DONE]");
    if (co_await res.write(end)) co_await res.end_stream();
    co_return;
  }
  if (call.client_gone || !client_ok) {
    rec.status = 499;
    call.outcome = Outcome::kNeutral;
    co_await commit(call);
    co_return;
  }
  // The replica broke off: tell the client in the stream's own terms, then cut the response so
  // that nothing downstream can take it for complete.
  rec.status = 502;
  call.outcome = Outcome::kReplicaError;
  co_await commit(call);
  const std::string event = cut_stream_event(rec.replica, cut);
  co_await res.write(event);
  res.abort();
}

awaitable<Status> Proxy::commit(Call& call) {
  if (call.recorded) co_return ok_status();
  call.recorded = true;
  call.record.latency_ms = static_cast<double>(clock_.now_ns() - call.start_ns) * 1e-6;
  auto executor = co_await asio::this_coro::executor;
  Ledger& ledger = ledger_;
  const UsageRecord& record = call.record;
  Status s = co_await asio::async_initiate<decltype(asio::use_awaitable), void(Status)>(
      [&ledger, &record, executor](auto handler) {
        // The ledger keeps callbacks in std::function, which must be copyable: share the
        // handler, post it back to the connection's io_context, and invoke it once as an
        // rvalue, as Asio expects of a completion handler.
        auto h = std::make_shared<decltype(handler)>(std::move(handler));
        ledger.submit(record, [h, executor](const Status& s) {
          asio::post(executor, [h, s]() mutable { std::move (*h)(s); });
        });
      },
      asio::use_awaitable);
  if (!s.ok()) metrics_.add("koi_gateway_ledger_errors_total", {});
  co_return s;
}

void Proxy::finish(Call& call) {
  const UsageRecord& r = call.record;
  fleet_.report(*call.pick, call.outcome, static_cast<double>(clock_.now_ns() - call.start_ns) * 1e-9);
  fleet_.finish(r.tenant, call.estimated_tokens, r.prompt_tokens + r.completion_tokens);
  record_metrics(r);
  if (call.pick->predicted_hit_tokens >= 0 && r.status == 200) {
    metrics::Labels predicted{{"model", r.model}, {"replica", r.replica}, {"kind", "predicted"}};
    metrics::Labels actual{{"model", r.model}, {"replica", r.replica}, {"kind", "actual"}};
    metrics_.add("koi_gateway_kv_hit_tokens_total", predicted, static_cast<double>(call.pick->predicted_hit_tokens));
    metrics_.add("koi_gateway_kv_hit_tokens_total", actual, static_cast<double>(r.cached_tokens));
  }
}

void Proxy::record_metrics(const UsageRecord& r) {
  const metrics::Labels base{{"tenant", r.tenant}, {"model", r.model}, {"version", r.version}};
  metrics::Labels with_replica = base;
  with_replica.emplace_back("replica", r.replica);
  metrics::Labels with_status = with_replica;
  with_status.emplace_back("status", std::to_string(r.status));
  metrics_.add("koi_gateway_requests_total", with_status);
  metrics::Labels prompt = base, completion = base;
  prompt.emplace_back("kind", "prompt");
  completion.emplace_back("kind", "completion");
  metrics_.add("koi_gateway_tokens_total", prompt, static_cast<double>(r.prompt_tokens));
  metrics_.add("koi_gateway_tokens_total", completion, static_cast<double>(r.completion_tokens));
  metrics_.observe("koi_gateway_request_duration_seconds", with_replica, r.latency_ms * 1e-3);
  if (r.ttft_ms > 0) metrics_.observe("koi_gateway_ttft_seconds", with_replica, r.ttft_ms * 1e-3);
}

}  // namespace koi::gateway
