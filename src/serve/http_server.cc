#include "serve/http_server.h"

#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <thread>

#include <boost/asio.hpp>
#include <boost/asio/experimental/concurrent_channel.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/url/parse.hpp>
#include <fmt/format.h>

#include "base/logging.h"
#include "base/random.h"

namespace koi::serve {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace json = boost::json;
using tcp = asio::ip::tcp;
using asio::awaitable;
using boost::system::error_code;
using Channel = asio::experimental::concurrent_channel<void(error_code, Event)>;
using HttpRequest = http::request<http::string_body>;
constexpr auto kAwait = asio::as_tuple(asio::use_awaitable);

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

std::string sse(const json::object& chunk) { return "data: " + json::serialize(chunk) + "\n\n"; }

// Watches a connection for the peer closing it while a request is in flight, without
// consuming any bytes: a readable socket whose peek returns 0 (or fails) is gone.
struct DisconnectWatch {
  bool active = true;
};

struct ReadDeadline {
  bool done = false;     // the read completed; the timer must not touch the socket
  bool expired = false;  // the timer cancelled the read
};

}  // namespace

struct Server::Impl {
  Impl(ServerConfig c, ModelInfo m, EngineService& s, ServeMetrics& mt)
      : config(std::move(c)), model(std::move(m)), service(s), metrics(mt) {
    Rng rng(static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count()));
    id_prefix = fmt::format("{:08x}", rng.next_u64() & 0xffffffffu);
  }

  ServerConfig config;
  ModelInfo model;
  EngineService& service;
  ServeMetrics& metrics;
  asio::io_context ioc;
  tcp::acceptor acceptor{ioc};
  asio::signal_set signals{ioc, SIGTERM, SIGINT};
  std::atomic<bool> draining{false};
  std::atomic<int> active_generations{0};
  std::atomic<uint64_t> next_id{0};
  std::string id_prefix;

  std::chrono::steady_clock::duration io_timeout() const {
    return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(config.io_timeout_s));
  }

  awaitable<void> accept_loop();
  awaitable<void> session(beast::tcp_stream stream);
  awaitable<bool> write_reply(beast::tcp_stream& stream, const Reply& reply, bool keep_alive);
  awaitable<bool> handle(beast::tcp_stream& stream, const HttpRequest& req);
  Reply simple_endpoint(const std::string& path, const HttpRequest& req);
  std::optional<ApiError> prepare(GenerateRequest& g, std::vector<std::vector<int32_t>>* prompts);
  awaitable<bool> generate(beast::tcp_stream& stream, const HttpRequest& req, ApiKind kind);
  void watch_signals();
  void begin_shutdown();
  awaitable<void> shutdown_sequence();
};

Server::Server(ServerConfig config, ModelInfo model, EngineService& service, ServeMetrics& metrics)
    : impl_(std::make_unique<Impl>(std::move(config), std::move(model), service, metrics)) {}

Server::~Server() = default;

Result<int> Server::listen() {
  Impl& s = *impl_;
  error_code ec;
  const auto address = asio::ip::make_address(s.config.host, ec);
  if (ec) return Status::invalid_argument(fmt::format("--host '{}' is not an IP address", s.config.host));
  const tcp::endpoint endpoint(address, static_cast<uint16_t>(s.config.port));
  s.acceptor.open(endpoint.protocol(), ec);
  if (!ec) s.acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) s.acceptor.bind(endpoint, ec);
  if (!ec) s.acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return Status::io_error(fmt::format("cannot listen on {}:{}: {}; pick another --port or stop what holds it",
                                        s.config.host, s.config.port, ec.message()));
  }
  return static_cast<int>(s.acceptor.local_endpoint().port());
}

void Server::run() {
  Impl& s = *impl_;
  s.watch_signals();
  asio::co_spawn(s.ioc, s.accept_loop(), asio::detached);
  std::vector<std::thread> threads;
  for (int i = 1; i < std::max(1, s.config.http_threads); ++i) threads.emplace_back([&s] { s.ioc.run(); });
  s.ioc.run();
  for (auto& t : threads) t.join();
  s.service.stop();  // no engine event may reach a channel after the io_context is gone
}

void Server::stop() {
  Impl& s = *impl_;
  asio::post(s.ioc, [&s] { s.begin_shutdown(); });
}

// Signals stay caught for the whole life of the server: a second SIGTERM during the drain
// must not kill the process with the default action.
void Server::Impl::watch_signals() {
  signals.async_wait([this](error_code ec, int) {
    if (ec) return;
    begin_shutdown();
    watch_signals();
  });
}

void Server::Impl::begin_shutdown() {
  if (draining.exchange(true)) return;
  log::info("shutting down: no new connections; waiting up to {} s for {} in-flight requests",
            config.shutdown_timeout_s, service.num_unfinished());
  error_code ec;
  acceptor.close(ec);
  service.drain(/*cancel=*/false);
  asio::co_spawn(ioc, shutdown_sequence(), asio::detached);
}

awaitable<void> Server::Impl::shutdown_sequence() {
  using namespace std::chrono_literals;
  asio::steady_timer timer(ioc);
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
  ioc.stop();
}

awaitable<void> Server::Impl::accept_loop() {
  for (;;) {
    auto [ec, socket] = co_await acceptor.async_accept(asio::make_strand(ioc), kAwait);
    if (ec) {
      if (!acceptor.is_open()) co_return;
      log::warn("accept failed: {}", ec.message());
      continue;
    }
    auto executor = socket.get_executor();
    asio::co_spawn(executor, session(beast::tcp_stream(std::move(socket))), [](std::exception_ptr e) {
      if (!e) return;
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& ex) {
        log::error("connection ended by an exception: {}", ex.what());
      }
    });
  }
}

awaitable<bool> Server::Impl::write_reply(beast::tcp_stream& stream, const Reply& reply, bool keep_alive) {
  http::response<http::string_body> res{static_cast<http::status>(reply.status), 11};
  res.set(http::field::server, "koi");
  res.set(http::field::content_type, reply.content_type);
  if (reply.status == 429 || reply.status == 503) res.set(http::field::retry_after, "1");
  res.keep_alive(keep_alive);
  res.body() = reply.body;
  res.prepare_payload();
  metrics.http_responses(reply.status).inc();
  stream.expires_after(io_timeout());
  auto [ec, n] = co_await http::async_write(stream, res, kAwait);
  co_return !ec && keep_alive;
}

awaitable<void> Server::Impl::session(beast::tcp_stream stream) {
  beast::flat_buffer buffer;
  for (;;) {
    http::request_parser<http::string_body> parser;
    parser.body_limit(config.max_body_bytes);
    // The read deadline cancels the read rather than closing the socket (as tcp_stream's
    // expiry would), so that a slow client can still be told 408. The state is shared with
    // the timer's handler, which may run after this frame has moved on.
    stream.expires_never();  // tcp_stream's own expiry guards writes only
    auto deadline = std::make_shared<ReadDeadline>();
    asio::steady_timer timer(stream.get_executor(), io_timeout());
    timer.async_wait([deadline, &stream](error_code ec) {
      if (ec || deadline->done) return;
      deadline->expired = true;
      stream.socket().cancel();
    });
    auto [ec, n] = co_await http::async_read(stream, buffer, parser, kAwait);
    deadline->done = true;
    timer.cancel();
    if (ec == http::error::end_of_stream || ec == asio::error::eof || ec == asio::error::connection_reset) break;
    if (deadline->expired) {
      if (parser.got_some()) {
        co_await write_reply(stream, error_reply(api_error(408, "the request did not arrive within the time limit",
                                                            "invalid_request_error", "request_timeout")),
                             false);
      }
      break;
    }
    if (ec == http::error::body_limit) {
      co_await write_reply(
          stream,
          error_reply(api_error(413, fmt::format("the request body is over the limit of {} bytes", config.max_body_bytes),
                                "invalid_request_error", "request_too_large")),
          false);
      break;
    }
    if (ec) {
      co_await write_reply(stream, error_reply(bad_request("malformed HTTP request: " + ec.message())), false);
      break;
    }
    if (!co_await handle(stream, parser.get())) break;
  }
  error_code ignored;
  stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
}

awaitable<bool> Server::Impl::handle(beast::tcp_stream& stream, const HttpRequest& req) {
  const bool keep_alive = req.keep_alive() && !draining.load();
  auto url = boost::urls::parse_origin_form(req.target());
  if (!url) co_return co_await write_reply(stream, error_reply(bad_request("malformed request target")), false);
  const std::string path(url->path());
  const bool open_path = path == "/health" || path == "/metrics";
  if (!config.api_key.empty() && !open_path) {
    auto it = req.find(http::field::authorization);
    if (it == req.end() || it->value() != "Bearer " + config.api_key) {
      co_return co_await write_reply(
          stream,
          error_reply(api_error(401, "Incorrect or missing API key; send 'Authorization: Bearer <key>'",
                                "invalid_request_error", "invalid_api_key")),
          keep_alive);
    }
  }
  const bool is_post = req.method() == http::verb::post;
  if (path == "/v1/completions" || path == "/v1/chat/completions") {
    if (!is_post) {
      co_return co_await write_reply(
          stream, error_reply(api_error(405, fmt::format("{} accepts POST only", path), "invalid_request_error")),
          keep_alive);
    }
    if (draining.load()) {
      co_return co_await write_reply(stream, error_reply(status_error(Status::unavailable("the server is shutting down"))),
                                     false);
    }
    active_generations.fetch_add(1);
    const bool keep = co_await generate(stream, req, path == "/v1/completions" ? ApiKind::kCompletion : ApiKind::kChat);
    active_generations.fetch_sub(1);
    co_return keep && keep_alive;
  }
  co_return co_await write_reply(stream, simple_endpoint(path, req), keep_alive);
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
  if (path == "/v1/models" && is_get) {
    json::object card{{"id", model.name},           {"object", "model"},
                      {"created", unix_seconds()},  {"owned_by", "koi"},
                      {"root", model.name},         {"max_model_len", model.max_model_len}};
    return json_reply({{"object", "list"}, {"data", json::array{std::move(card)}}});
  }
  if (path == "/tokenize" && is_post) {
    TokenizeRequest t;
    if (auto e = parse_tokenize_request(req.body(), &t)) return error_reply(*e);
    std::string text = t.prompt;
    if (t.is_chat) {
      auto rendered = model.chat->render(t.messages, t.add_generation_prompt);
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
                     path == "/detokenize";
  if (known) return error_reply(api_error(405, fmt::format("{} does not accept {}", path, std::string_view(req.method_string())),
                                          "invalid_request_error"));
  return error_reply(api_error(404, fmt::format("Invalid URL ({} {})", std::string_view(req.method_string()), path),
                               "invalid_request_error"));
}

std::optional<ApiError> Server::Impl::prepare(GenerateRequest& g, std::vector<std::vector<int32_t>>* prompts) {
  if (g.model != model.name) {
    ApiError e = api_error(404, fmt::format("The model `{}` does not exist.", g.model), "invalid_request_error",
                           "model_not_found");
    e.param = "model";
    return e;
  }
  const tokenizer::Tokenizer& tok = *model.tokenizer;
  const bool chat = g.kind == ApiKind::kChat;
  if (chat) {
    auto text = model.chat->render(g.messages, /*add_generation_prompt=*/true);
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
  return std::nullopt;
}

awaitable<bool> Server::Impl::generate(beast::tcp_stream& stream, const HttpRequest& req, ApiKind kind) {
  GenerateRequest g;
  std::vector<std::vector<int32_t>> prompts;
  std::optional<ApiError> err = parse_generate_request(kind, req.body(), model.tokenizer->n_vocab(), &g);
  if (!err) err = prepare(g, &prompts);
  if (err) co_return co_await write_reply(stream, error_reply(*err), true);

  ResponseMeta meta;
  meta.kind = kind;
  meta.id = fmt::format("{}-{}{:x}", kind == ApiKind::kChat ? "chatcmpl" : "cmpl", id_prefix, next_id.fetch_add(1));
  meta.created = unix_seconds();
  meta.model = model.name;
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
      spec.cache_key = g.cache_key;
      if (spec.params.seed) *spec.params.seed += static_cast<uint64_t>(i);  // n seeded choices differ
      ids.push_back(spec.id);
      specs.push_back(std::move(spec));
      capacity += static_cast<size_t>(g.params.max_tokens) + 2;  // at most one event per step, plus the end
    }
  }
  const int num_choices = static_cast<int>(specs.size());
  auto channel = std::make_shared<Channel>(co_await asio::this_coro::executor, capacity);
  Status submitted = service.submit(std::move(specs), [channel](Event ev) {
    channel->try_send(error_code{}, std::move(ev));
  });
  if (!submitted.ok()) co_return co_await write_reply(stream, error_reply(status_error(submitted)), true);

  auto watch = std::make_shared<DisconnectWatch>();
  tcp::socket& socket = stream.socket();
  socket.async_wait(tcp::socket::wait_read, [this, watch, ids, &socket](error_code ec) {
    if (ec || !watch->active) return;
    char c;
    const ssize_t r = ::recv(socket.native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) service.abort(ids);
  });
  auto stop_watching = [&] {
    watch->active = false;
    error_code ignored;
    socket.cancel(ignored);
  };

  const tokenizer::Tokenizer& tok = *model.tokenizer;
  std::vector<ChoiceOutput> choices(static_cast<size_t>(num_choices));
  std::vector<bool> started(static_cast<size_t>(num_choices), false);
  int num_finished = 0;
  bool headers_sent = false;
  bool ok = true;
  std::optional<ApiError> failure;
  http::response<http::empty_body> head{http::status::ok, 11};
  http::response_serializer<http::empty_body> serializer{head};
  auto write_chunk = [&](const std::string& data) -> awaitable<bool> {
    stream.expires_after(io_timeout());
    auto [ec, n] = co_await asio::async_write(stream, http::make_chunk(asio::buffer(data)), kAwait);
    co_return !ec;
  };

  while (num_finished < num_choices && ok) {
    auto [ec, ev] = co_await channel->async_receive(kAwait);
    if (ec) break;
    engine::RequestOutput& out = ev.output;
    if (out.finished) ++num_finished;
    if (!ev.error.ok()) {
      failure = status_error(ev.error);
      if (!headers_sent) break;
      ok = co_await write_chunk("data: " + error_body(*failure) + "\n\n");
      continue;
    }
    ChoiceOutput& choice = choices[static_cast<size_t>(ev.index)];
    usage.completion_tokens += static_cast<int64_t>(out.token_ids.size());
    if (!g.stream) {
      choice.text += out.text;
      choice.token_ids.insert(choice.token_ids.end(), out.token_ids.begin(), out.token_ids.end());
      choice.logprobs.insert(choice.logprobs.end(), out.logprobs.begin(), out.logprobs.end());
      choice.finish_reason = out.finish_reason;
      continue;
    }
    if (!headers_sent) {
      head.set(http::field::server, "koi");
      head.set(http::field::content_type, "text/event-stream");
      head.set(http::field::cache_control, "no-cache");
      head.keep_alive(req.keep_alive());
      head.chunked(true);
      metrics.http_responses(200).inc();
      stream.expires_after(io_timeout());
      auto [wec, n] = co_await http::async_write_header(stream, serializer, kAwait);
      headers_sent = true;
      ok = !wec;
      if (!ok) break;
    }
    if (out.text.empty() && !out.finished && out.logprobs.empty()) continue;
    ChoiceOutput delta;
    delta.text = std::move(out.text);
    delta.token_ids = std::move(out.token_ids);
    delta.logprobs = std::move(out.logprobs);
    delta.finish_reason = out.finish_reason;
    const bool first = !started[static_cast<size_t>(ev.index)];
    started[static_cast<size_t>(ev.index)] = true;
    ok = co_await write_chunk(sse(stream_chunk(meta, ev.index, delta, first, choice.text.size(), tok)));
    choice.text += delta.text;
  }
  stop_watching();
  if (num_finished < num_choices) service.abort(ids);  // a failed write, an error, or a closed channel
  if (!headers_sent) {
    if (failure) co_return co_await write_reply(stream, error_reply(*failure), true);
    if (!ok || num_finished < num_choices) co_return false;
    co_return co_await write_reply(stream, json_reply(full_response(meta, choices, usage, tok)), true);
  }
  if (!ok) co_return false;
  if (g.include_usage) ok = co_await write_chunk(sse(usage_chunk(meta, usage)));
  if (ok) ok = co_await write_chunk("data: [DONE]\n\n");
  if (ok) {
    stream.expires_after(io_timeout());
    auto [ec, n] = co_await asio::async_write(stream, http::make_chunk_last(), kAwait);
    ok = !ec;
  }
  co_return ok;
}

}  // namespace koi::serve
