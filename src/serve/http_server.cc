#include "serve/http_server.h"

#include <atomic>
#include <charconv>
#include <chrono>
#include <csignal>

#include <boost/asio.hpp>
#include <boost/asio/experimental/concurrent_channel.hpp>
#include <boost/url/parse.hpp>
#include <fmt/format.h>

#include "base/logging.h"
#include "base/random.h"
#include "engine/block_hash.h"
#include "net/server.h"
#include "net/sse.h"

namespace koi::serve {
namespace {

namespace asio = boost::asio;
namespace http = boost::beast::http;
namespace json = boost::json;
using asio::awaitable;
using boost::system::error_code;
using Channel = asio::experimental::concurrent_channel<void(error_code, Event)>;
using HttpRequest = net::Request;
constexpr auto kAwait = asio::as_tuple(asio::use_awaitable);
constexpr const char* kPrefillPeerHeader = "x-koi-prefill-peer";
constexpr uint64_t kMaxKvEventWaitMs = 60'000;  // GET /kv/events?wait_ms= at most

// A complete (non-streamed) HTTP response.
struct Reply {
  int status = 200;
  std::string body;
  std::string content_type = "application/json";
};

Reply json_reply(const json::object& body) { return {200, json::serialize(body)}; }

Reply error_reply(const ApiError& e) { return {e.status, error_body(e)}; }

ApiError api_error(int status, std::string message, std::string type, std::string code = "") {
  ApiError e;
  e.status = status;
  e.message = std::move(message);
  e.type = std::move(type);
  e.code = std::move(code);
  return e;
}

// What a Status from the engine side means for the client.
ApiError status_error(const Status& s) {
  switch (s.code()) {
    case StatusCode::kResourceExhausted: return api_error(429, s.message(), "rate_limit_error", "queue_full");
    case StatusCode::kUnavailable: return api_error(503, s.message(), "service_unavailable_error");
    case StatusCode::kInternal: return api_error(500, s.message(), "server_error");
    default: return bad_request(s.message());
  }
}

int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string sse(const json::object& chunk) { return net::sse_data(json::serialize(chunk)); }

net::ServerOptions http_options(const ServerConfig& c, std::function<void(int)> count) {
  net::ServerOptions o;
  o.host = c.host;
  o.port = c.port;
  o.threads = std::max(1, c.http_threads);
  o.max_body_bytes = c.max_body_bytes;
  o.header_timeout_s = o.body_timeout_s = o.write_timeout_s = c.io_timeout_s;
  o.idle_timeout_s = std::max(c.io_timeout_s, 60.0);
  o.max_connections = c.max_connections;
  o.error_body = [count = std::move(count)](int status, std::string_view message, std::string_view code) {
    count(status);
    const bool server_side = status >= 500;
    return error_body(api_error(status, std::string(message), server_side ? "service_unavailable_error" : "invalid_request_error",
                                status == 400 ? "" : std::string(code)));
  };
  o.error_content_type = "application/json";
  return o;
}

}  // namespace

struct Server::Impl {
  Impl(ServerConfig c, ModelInfo m, EngineService& s, ServeMetrics& mt)
      : config(std::move(c)),
        model(std::move(m)),
        service(s),
        metrics(mt),
        http(http_options(config, [this](int status) { metrics.http_responses(status).inc(); }),
             [this](HttpRequest& req, net::Responder& res) { return handle(req, res); }) {
    Rng rng(static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count()));
    id_prefix = fmt::format("{:08x}", rng.next_u64() & 0xffffffffu);
  }

  ServerConfig config;
  ModelInfo model;
  EngineService& service;
  ServeMetrics& metrics;
  net::Server http;
  std::optional<asio::signal_set> signals;
  std::atomic<bool> draining{false};
  std::atomic<int> active_generations{0};
  std::atomic<uint64_t> next_id{0};
  std::string id_prefix;
  std::unique_ptr<HttpTrace> trace = std::make_unique<HttpTrace>(nullptr);  // set_trace

  awaitable<void> handle(HttpRequest& req, net::Responder& res);
  awaitable<void> reply(net::Responder& res, Reply r);
  Reply simple_endpoint(const std::string& path, const HttpRequest& req);
  awaitable<Reply> kv_events_reply(const HttpRequest& req);
  awaitable<void> wait_for_kv_event(uint64_t after, int64_t wait_ms);
  Reply models_reply();
  Reply lora_adapter_reply(const HttpRequest& req, bool load);
  // The base model (lora left empty) or one of its adapters, by the request's "model".
  std::optional<ApiError> resolve_model(const std::string& name, engine::AcquiredLora* lora);
  std::optional<ApiError> prepare(GenerateRequest& g, std::vector<std::vector<int32_t>>* prompts,
                                  std::shared_ptr<grammar::CompiledGrammar>* grammar, engine::AcquiredLora* lora);
  awaitable<void> generate(net::Responder& res, const HttpRequest& req, ApiKind kind);
  std::optional<ApiError> attach_prefill_peer(const HttpRequest& req, std::vector<engine::RequestSpec>& specs,
                                              std::vector<std::shared_ptr<engine::KvImport>>* imports);
  void watch_signals();
  void begin_shutdown();
  awaitable<void> shutdown_sequence();
};

Server::Server(ServerConfig config, ModelInfo model, EngineService& service, ServeMetrics& metrics)
    : impl_(std::make_unique<Impl>(std::move(config), std::move(model), service, metrics)) {}

void Server::set_trace(trace::Recorder* recorder) { impl_->trace = std::make_unique<HttpTrace>(recorder); }

// Removing the last signal_set restores the default action of SIGTERM and SIGINT, and tearing
// down the HTTP workers after that takes a moment: a late Ctrl-C or SIGTERM (a supervisor
// repeating the signal) must not turn a finished drain into death by signal, so they are
// ignored from here on; the process is on its way out.
Server::~Server() {
  impl_->signals.reset();
  std::signal(SIGTERM, SIG_IGN);
  std::signal(SIGINT, SIG_IGN);
}

Result<int> Server::listen() {
  auto port = impl_->http.listen();
  if (!port.ok()) {
    return Status(port.status().code(), port.status().message());
  }
  return port;
}

void Server::run() {
  Impl& s = *impl_;
  s.signals.emplace(s.http.context(), SIGTERM, SIGINT);
  s.watch_signals();
  s.http.start();
  s.http.wait();
  s.service.stop();  // no engine event may reach a channel after the io_contexts are gone
}

void Server::stop() {
  Impl& s = *impl_;
  asio::post(s.http.context(), [&s] { s.begin_shutdown(); });
}

// Signals stay caught for the whole life of the server: a second SIGTERM during the drain
// must not kill the process with the default action.
void Server::Impl::watch_signals() {
  signals->async_wait([this](error_code ec, int) {
    if (ec) return;
    begin_shutdown();
    watch_signals();
  });
}

void Server::Impl::begin_shutdown() {
  if (draining.exchange(true)) return;
  log::info("shutting down: no new connections; waiting up to {} s for {} in-flight requests",
            config.shutdown_timeout_s, service.num_unfinished());
  http.close_listener();
  service.drain(/*cancel=*/false);
  asio::co_spawn(http.context(), shutdown_sequence(), asio::detached);
}

awaitable<void> Server::Impl::shutdown_sequence() {
  using namespace std::chrono_literals;
  asio::steady_timer timer(http.context());
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(config.shutdown_timeout_s));
  bool cancelled = false;
  // After cancelling, handlers still write their final bytes; give them a moment.
  const auto grace = 5s;
  while (active_generations.load() > 0) {
    const auto now = std::chrono::steady_clock::now();
    if (!cancelled && now >= deadline) {
      log::warn("shutdown deadline reached; cancelling {} requests", service.num_unfinished());
      service.drain(/*cancel=*/true);
      cancelled = true;
    }
    if (cancelled && now >= deadline + grace) break;
    timer.expires_after(20ms);
    co_await timer.async_wait(kAwait);
  }
  log::info("shutdown complete");
  signals->cancel();
  http.stop();
}

awaitable<void> Server::Impl::reply(net::Responder& res, Reply r) {
  metrics.http_responses(r.status).inc();
  net::Headers extra;
  if (r.status == 429 || r.status == 503) extra.emplace_back("Retry-After", "1");
  co_await res.send(r.status, std::move(r.body), r.content_type, extra);
}

awaitable<void> Server::Impl::handle(HttpRequest& req, net::Responder& res) {
  auto url = boost::urls::parse_origin_form(req.target());
  if (!url) {
    co_await reply(res, error_reply(bad_request("malformed request target")));
    co_return;
  }
  const std::string path(url->path());
  const bool open_path = path == "/health" || path == "/metrics";
  if (!config.api_key.empty() && !open_path) {
    auto it = req.find(http::field::authorization);
    if (it == req.end() || it->value() != "Bearer " + config.api_key) {
      co_await reply(res, error_reply(api_error(401, "Incorrect or missing API key; send 'Authorization: Bearer <key>'",
                                                "invalid_request_error", "invalid_api_key")));
      co_return;
    }
  }
  const bool is_post = req.method() == http::verb::post;
  if (path == "/v1/completions" || path == "/v1/chat/completions") {
    if (!is_post) {
      co_await reply(res, error_reply(api_error(405, fmt::format("{} accepts POST only", path), "invalid_request_error")));
    } else if (draining.load()) {
      co_await reply(res, error_reply(status_error(Status::unavailable("the server is shutting down"))));
    } else {
      active_generations.fetch_add(1);
      co_await generate(res, req, path == "/v1/completions" ? ApiKind::kCompletion : ApiKind::kChat);
      active_generations.fetch_sub(1);
    }
    co_return;
  }
  if (path == "/kv/events" && req.method() == http::verb::get && model.kv_events) {
    co_await reply(res, co_await kv_events_reply(req));  // a long poll may hold it
    co_return;
  }
  co_await reply(res, simple_endpoint(path, req));
}

Reply Server::Impl::simple_endpoint(const std::string& path, const HttpRequest& req) {
  const tokenizer::Tokenizer& tok = *model.tokenizer;
  const bool is_get = req.method() == http::verb::get;
  const bool is_post = req.method() == http::verb::post;
  if (path == "/health" && is_get) {
    if (draining.load()) return error_reply(status_error(Status::unavailable("the server is shutting down")));
    return {200, "", "text/plain"};
  }
  if (path == "/metrics" && is_get) return {200, metrics.registry.render(), "text/plain; version=0.0.4; charset=utf-8"};
  if (path == "/kv/snapshot" && is_get && model.kv_events) return {200, model.kv_events->snapshot_json()};
  if (path == "/v1/models" && is_get) return models_reply();
  if (path == "/v1/load_lora_adapter" && is_post) return lora_adapter_reply(req, /*load=*/true);
  if (path == "/v1/unload_lora_adapter" && is_post) return lora_adapter_reply(req, /*load=*/false);
  if (path == "/tokenize" && is_post) {
    TokenizeRequest t;
    if (auto e = parse_tokenize_request(req.body(), &t)) return error_reply(*e);
    std::string text = t.prompt;
    if (t.is_chat) {
      auto rendered = model.chat->render(t.messages, t.add_generation_prompt, t.tools_json);
      if (!rendered.ok()) return error_reply(bad_request(rendered.status().message(), "messages"));
      text = *rendered;
    }
    std::vector<int32_t> ids =
        t.is_chat ? model.chat->encode(text) : tok.encode(text, t.add_special_tokens, /*parse_special=*/true);
    return json_reply({{"count", ids.size()},
                       {"max_model_len", model.max_model_len},
                       {"tokens", json::array(ids.begin(), ids.end())}});
  }
  if (path == "/detokenize" && is_post) {
    std::vector<int32_t> ids;
    if (auto e = parse_detokenize_request(req.body(), tok.n_vocab(), &ids)) return error_reply(*e);
    return json_reply({{"prompt", tok.decode(ids)}});
  }
  const bool known = path == "/health" || path == "/metrics" || path == "/v1/models" || path == "/tokenize" ||
                     path == "/detokenize" || path == "/v1/load_lora_adapter" || path == "/v1/unload_lora_adapter";
  if (known) return error_reply(api_error(405, fmt::format("{} does not accept {}", path, std::string_view(req.method_string())),
                                          "invalid_request_error"));
  return error_reply(api_error(404, fmt::format("Invalid URL ({} {})", std::string_view(req.method_string()), path),
                               "invalid_request_error"));
}

// The base model, then each LoRA adapter with parent = the base (vLLM's cards).
Reply Server::Impl::models_reply() {
  const int64_t created = unix_seconds();
  json::array cards;
  cards.push_back(json::object{{"id", model.name},
                               {"object", "model"},
                               {"created", created},
                               {"owned_by", "koi"},
                               {"root", model.name},
                               {"parent", nullptr},
                               {"max_model_len", model.max_model_len}});
  if (model.loras) {
    for (const engine::LoraInfo& lora : model.loras->list()) {
      cards.push_back(json::object{{"id", lora.name},
                                   {"object", "model"},
                                   {"created", created},
                                   {"owned_by", "koi"},
                                   {"root", lora.path},
                                   {"parent", model.name},
                                   {"max_model_len", model.max_model_len}});
    }
  }
  return json_reply({{"object", "list"}, {"data", std::move(cards)}});
}

// vLLM answers these with a plain-text sentence on success, an OpenAI error otherwise.
Reply Server::Impl::lora_adapter_reply(const HttpRequest& req, bool load) {
  LoraAdapterRequest r;
  if (auto e = parse_lora_adapter_request(req.body(), load, &r)) return error_reply(*e);
  if (!model.loras) return error_reply(bad_request("this server serves no LoRA adapters"));
  if (r.name == model.name) {
    return error_reply(bad_request(fmt::format("'{}' is the base model's name; give the adapter another", r.name),
                                   "lora_name"));
  }
  const Status s = load ? model.loras->add(r.name, r.path) : model.loras->remove(r.name);
  if (!s.ok()) {
    // Unloading an unknown name is a 404; a load's missing directory is a bad request.
    ApiError e = !load && s.code() == StatusCode::kNotFound
                     ? api_error(404, s.message(), "invalid_request_error", "not_found")
                     : bad_request(s.message());
    e.param = load && s.code() != StatusCode::kAlreadyExists ? "lora_path" : "lora_name";
    return error_reply(e);
  }
  const std::string done = load ? fmt::format("Success: LoRA adapter '{}' added successfully.", r.name)
                                : fmt::format("Success: LoRA adapter '{}' removed successfully.", r.name);
  return {200, done, "text/plain; charset=utf-8"};
}

// GET /kv/events?after=N[&wait_ms=M] (serve/kv_events.h).
awaitable<Reply> Server::Impl::kv_events_reply(const HttpRequest& req) {
  auto url = boost::urls::parse_origin_form(req.target());
  uint64_t after = 0;
  uint64_t wait_ms = 0;
  for (const auto& param : url->params()) {
    const std::string& v = param.value;
    uint64_t* value = param.key == "after" ? &after : param.key == "wait_ms" ? &wait_ms : nullptr;
    if (!value) co_return error_reply(bad_request("/kv/events takes only ?after=N&wait_ms=M", param.key));
    auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), *value);
    if (ec != std::errc() || ptr != v.data() + v.size()) {
      co_return error_reply(bad_request(
          fmt::format("{} must be {} (0 or more), got '{}'", param.key,
                      value == &after ? "an event number" : "a wait in milliseconds", v),
          param.key));
    }
  }
  if (wait_ms > kMaxKvEventWaitMs) {
    co_return error_reply(bad_request(
        fmt::format("wait_ms is at most {} (a long poll that long), got {}", kMaxKvEventWaitMs, wait_ms), "wait_ms"));
  }
  if (wait_ms > 0) co_await wait_for_kv_event(after, static_cast<int64_t>(wait_ms));
  std::optional<std::string> events = model.kv_events->events_json(after);
  if (!events) {
    co_return error_reply(api_error(410, fmt::format("events after {} are gone; resynchronise from GET /kv/snapshot", after),
                                    "invalid_request_error", "kv_events_gone"));
  }
  co_return Reply{200, std::move(*events)};
}

// Returns when an event after `after` is published or wait_ms passed (at once when one is
// there already). The engine thread's append wakes the channel (thread-safe); the timer and
// this coroutine share the connection's one thread.
awaitable<void> Server::Impl::wait_for_kv_event(uint64_t after, int64_t wait_ms) {
  using Wake = asio::experimental::concurrent_channel<void(error_code)>;
  const auto executor = co_await asio::this_coro::executor;
  auto wake = std::make_shared<Wake>(executor, 1);
  const std::optional<uint64_t> waiter =
      model.kv_events->wake_after(after, [wake] { wake->try_send(error_code{}); });
  if (!waiter) co_return;
  // Unregisters also when the server stops with this request held (the frame is destroyed).
  struct Forget {
    KvEventLog* log;
    uint64_t id;
    ~Forget() { log->forget(id); }
  } const forget{model.kv_events, *waiter};
  asio::steady_timer timer(executor, std::chrono::milliseconds(wait_ms));
  timer.async_wait([wake](error_code) { wake->try_send(error_code{}); });
  co_await wake->async_receive(kAwait);
  timer.cancel();
}

std::optional<ApiError> Server::Impl::resolve_model(const std::string& name, engine::AcquiredLora* lora) {
  if (name == model.name) return std::nullopt;
  Result<engine::AcquiredLora> acquired =
      model.loras ? model.loras->acquire(name) : Result<engine::AcquiredLora>(Status::not_found(name));
  if (acquired.ok()) {
    *lora = std::move(acquired).value();
    return std::nullopt;
  }
  if (acquired.status().code() != StatusCode::kNotFound) {
    ApiError e = status_error(acquired.status());
    e.param = "model";
    return e;
  }
  ApiError e = api_error(404, fmt::format("The model `{}` does not exist.", name), "invalid_request_error",
                         "model_not_found");
  e.param = "model";
  return e;
}

std::optional<ApiError> Server::Impl::prepare(GenerateRequest& g, std::vector<std::vector<int32_t>>* prompts,
                                              std::shared_ptr<grammar::CompiledGrammar>* grammar,
                                              engine::AcquiredLora* lora) {
  if (auto e = resolve_model(g.model, lora)) return e;
  const tokenizer::Tokenizer& tok = *model.tokenizer;
  const bool chat = g.kind == ApiKind::kChat;
  if (g.tool_choice == ToolChoice::kRequired || g.tool_choice == ToolChoice::kNamed) {
    if (g.constraint) {
      return bad_request(fmt::format("'tool_choice' {} forces a tool call, which '{}' also constrains; give only one",
                                     g.tool_choice == ToolChoice::kNamed ? "naming a function" : "\"required\"",
                                     g.constraint_param),
                         "tool_choice");
    }
    std::vector<Tool> callable;
    for (const Tool& t : g.tools) {
      if (g.tool_choice == ToolChoice::kRequired || t.name == g.tool_choice_name) callable.push_back(t);
    }
    g.constraint = forced_tool_call(callable, model.chat->tool_format());
    g.constraint_param = "tools";
  }
  if (chat) {
    auto text = model.chat->render(g.messages, /*add_generation_prompt=*/true, g.tools_json);
    if (!text.ok()) return bad_request(text.status().message(), "messages");
    prompts->push_back(model.chat->encode(*text));
  }
  for (const Prompt& p : g.prompts) {
    prompts->push_back(p.is_tokens ? p.token_ids : tok.encode(p.text, /*add_special=*/true, /*parse_special=*/true));
  }
  const char* what = chat ? "messages" : "prompt";
  // Without max_tokens, chat may fill the context and completions get OpenAI's 16.
  int default_max_tokens = chat ? model.max_model_len : 16;
  for (const auto& ids : *prompts) {
    const int len = static_cast<int>(ids.size());
    if (len == 0) return bad_request(fmt::format("the {} is empty after tokenization", what), what);
    const int room = model.max_model_len - len;
    const int max_tokens = g.max_tokens_set ? g.params.max_tokens : 1;
    if (max_tokens > room) {
      ApiError e = bad_request(
          fmt::format("This model's maximum context length is {} tokens. However, you requested {} tokens ({} in the "
                      "{}, {} in the completion). Please reduce the length of the {} or completion.",
                      model.max_model_len, int64_t{len} + max_tokens, len, what, max_tokens, what),
          what);
      e.code = "context_length_exceeded";
      return e;
    }
    default_max_tokens = std::min(default_max_tokens, room);
  }
  if (!g.max_tokens_set) g.params.max_tokens = default_max_tokens;
  if (Status s = engine::validate(g.params, tok.n_vocab()); !s.ok()) return bad_request(s.message());
  if (g.constraint && !model.grammars) {
    return bad_request("this server has no grammar engine; structured output is not available", g.constraint_param);
  }
  if (g.constraint) {
    auto compiled = model.grammars->get(*g.constraint);
    if (!compiled.ok()) {
      return bad_request(fmt::format("{}: {}", g.constraint_param, compiled.status().message()), g.constraint_param);
    }
    *grammar = std::move(compiled).value();
  }
  return std::nullopt;
}

std::optional<ApiError> Server::Impl::attach_prefill_peer(const HttpRequest& req, std::vector<engine::RequestSpec>& specs,
                                                         std::vector<std::shared_ptr<engine::KvImport>>* imports) {
  auto header = req.find(kPrefillPeerHeader);
  if (header == req.end()) return std::nullopt;
  const std::string peer(header->value());
  if (!model.kv_client) {
    return bad_request(fmt::format("{}: this server takes no KV transfers; start it with --role decode",
                                   kPrefillPeerHeader));
  }
  if (Status s = check_peer(peer); !s.ok()) return bad_request(s.message());
  // The prefill worker computes the prompt's KV from the base model alone.
  if (!specs.empty() && specs.front().lora) {
    return bad_request(fmt::format("{}: LoRA adapters are not served with prefill/decode disaggregation; send the "
                                   "request without the header",
                                   kPrefillPeerHeader),
                       "model");
  }
  for (engine::RequestSpec& spec : specs) {
    model.kv_client->attach(spec, peer);
    imports->push_back(spec.kv_import);
  }
  return std::nullopt;
}

awaitable<void> Server::Impl::generate(net::Responder& res, const HttpRequest& req, ApiKind kind) {
  HttpTrace::Request span(trace.get());
  GenerateRequest g;
  std::vector<std::vector<int32_t>> prompts;
  std::shared_ptr<grammar::CompiledGrammar> grammar;
  engine::AcquiredLora lora;
  std::optional<ApiError> err = parse_generate_request(kind, req.body(), model.tokenizer->n_vocab(), &g);
  if (!err) err = prepare(g, &prompts, &grammar, &lora);
  if (err) {
    span.set_status(err->status);
    co_await reply(res, error_reply(*err));
    co_return;
  }

  ResponseMeta meta;
  meta.kind = kind;
  meta.id = fmt::format("{}-{}{:x}", kind == ApiKind::kChat ? "chatcmpl" : "cmpl", id_prefix, next_id.fetch_add(1));
  meta.created = unix_seconds();
  meta.model = g.model;
  span.set_id(meta.id, g.stream);
  Usage usage;
  std::vector<engine::RequestSpec> specs;
  std::vector<std::string> ids;
  size_t capacity = 0;
  for (const auto& prompt : prompts) {
    usage.prompt_tokens += static_cast<int64_t>(prompt.size());
    for (int i = 0; i < g.n; ++i) {
      engine::RequestSpec spec;
      spec.id = fmt::format("{}-{}", meta.id, specs.size());
      spec.prompt = prompt;
      spec.params = g.params;
      spec.priority = g.priority;
      spec.cache_key = engine::cache_key_for_adapter(g.cache_key, lora.id);
      spec.grammar = grammar;
      spec.lora = lora.adapter;
      if (spec.params.seed) *spec.params.seed += static_cast<uint64_t>(i);  // n seeded choices differ
      ids.push_back(spec.id);
      specs.push_back(std::move(spec));
      capacity += static_cast<size_t>(g.params.max_tokens) + 2;  // at most one event per step, plus the end
    }
  }
  std::vector<std::shared_ptr<engine::KvImport>> imports;
  if (std::optional<ApiError> e = attach_prefill_peer(req, specs, &imports)) {
    span.set_status(e->status);
    co_await reply(res, error_reply(*e));
    co_return;
  }
  const int num_choices = static_cast<int>(specs.size());
  auto channel = std::make_shared<Channel>(co_await asio::this_coro::executor, capacity);
  Status submitted = service.submit(
      std::move(specs), [channel](Event ev) { channel->try_send(error_code{}, std::move(ev)); }, span.submitted());
  if (!submitted.ok()) {
    for (const auto& import : imports) import->cancel();
    span.set_status(status_error(submitted).status);
    co_await reply(res, error_reply(status_error(submitted)));
    co_return;
  }
  res.watch_disconnect([this, ids] { service.abort(ids); });

  const tokenizer::Tokenizer& tok = *model.tokenizer;
  std::vector<ChoiceOutput> choices(static_cast<size_t>(num_choices));
  // Tool calls are parsed out of the text: whole at the end, or per choice as it streams.
  const bool parse_tools = kind == ApiKind::kChat && g.tool_choice != ToolChoice::kNone;
  const ToolFormat tool_format = model.chat->tool_format();
  auto call_prefix = [&](int index) { return fmt::format("call_{}_{}", meta.id.substr(meta.id.find('-') + 1), index); };
  std::vector<ToolCallStreamer> streamers;
  if (parse_tools && g.stream) {
    for (int i = 0; i < num_choices; ++i) streamers.emplace_back(tool_format, call_prefix(i));
  }
  std::vector<bool> started(static_cast<size_t>(num_choices), false);
  int num_finished = 0;
  bool ok = true;
  std::optional<ApiError> failure;

  while (num_finished < num_choices && ok) {
    auto [ec, ev] = co_await channel->async_receive(kAwait);
    if (ec) break;
    span.first_output();
    engine::RequestOutput& out = ev.output;
    if (out.finished) ++num_finished;
    if (!ev.error.ok()) {
      failure = status_error(ev.error);
      if (!res.streaming()) break;
      const std::string event = net::sse_data(error_body(*failure));
      ok = co_await res.write(event);
      continue;
    }
    ChoiceOutput& choice = choices[static_cast<size_t>(ev.index)];
    usage.completion_tokens += static_cast<int64_t>(out.token_ids.size());
    if (out.num_cached_tokens >= 0 && ev.index % g.n == 0) usage.cached_tokens += out.num_cached_tokens;  // once per prompt
    if (!g.stream) {
      choice.text += out.text;
      choice.token_ids.insert(choice.token_ids.end(), out.token_ids.begin(), out.token_ids.end());
      choice.logprobs.insert(choice.logprobs.end(), out.logprobs.begin(), out.logprobs.end());
      choice.finish_reason = out.finish_reason;
      continue;
    }
    if (!res.streaming()) {
      metrics.http_responses(200).inc();
      ok = co_await res.begin_stream(200, "text/event-stream");
      if (!ok) break;
    }
    ChoiceOutput delta;
    if (parse_tools) {
      ToolCallStreamer& streamer = streamers[static_cast<size_t>(ev.index)];
      StreamDelta d = streamer.push(out.text);
      if (out.finished) {
        StreamDelta rest = streamer.finish();
        d.content += rest.content;
        d.calls.insert(d.calls.end(), rest.calls.begin(), rest.calls.end());
      }
      out.text = std::move(d.content);
      delta.tool_call_deltas = std::move(d.calls);
      delta.called_tools = streamer.num_calls() > 0;
    }
    if (out.text.empty() && delta.tool_call_deltas.empty() && !out.finished && out.logprobs.empty()) continue;
    delta.text = std::move(out.text);
    delta.token_ids = std::move(out.token_ids);
    delta.logprobs = std::move(out.logprobs);
    delta.finish_reason = out.finish_reason;
    const bool first = !started[static_cast<size_t>(ev.index)];
    started[static_cast<size_t>(ev.index)] = true;
    json::object chunk = stream_chunk(meta, ev.index, delta, first, choice.text.size(), tok);
    if (g.continuous_usage) chunk["usage"] = usage_json(usage);
    const std::string event = sse(chunk);
    ok = co_await res.write(event);
    choice.text += delta.text;
  }
  if (num_finished < num_choices) service.abort(ids);  // a failed write, an error, or a closed channel
  span.set_status(failure && !res.streaming() ? failure->status : 200);
  if (!res.streaming()) {
    if (failure) {
      co_await reply(res, error_reply(*failure));
    } else if (ok && num_finished == num_choices) {
      if (parse_tools) {
        for (size_t i = 0; i < choices.size(); ++i) {
          ParsedOutput parsed = parse_tool_calls(choices[i].text, tool_format, call_prefix(static_cast<int>(i)));
          choices[i].text = std::move(parsed.content);
          choices[i].tool_calls = std::move(parsed.calls);
          choices[i].called_tools = !choices[i].tool_calls.empty();
        }
      }
      co_await reply(res, json_reply(full_response(meta, choices, usage, tok)));
    } else {
      res.abort();
    }
    co_return;
  }
  if (!ok) co_return;
  if (g.include_usage) {
    const std::string event = sse(usage_chunk(meta, usage));
    ok = co_await res.write(event);
  }
  const std::string done = net::sse_data("[DONE]");
  if (ok) ok = co_await res.write(done);
  if (ok) co_await res.end_stream();
}

}  // namespace koi::serve
