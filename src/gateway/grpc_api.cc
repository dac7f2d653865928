#include "gateway/grpc_api.h"

#include <grpcpp/grpcpp.h>

#include <boost/asio.hpp>
#include <boost/json.hpp>
#include <chrono>
#include <functional>

#include "base/logging.h"
#include "gateway/fleet.h"
#include "gateway/proxy.h"
#include "koi/v1/inference.grpc.pb.h"
#include "net/server.h"
#include "net/sse.h"

namespace koi::gateway {

namespace asio = boost::asio;
namespace json = boost::json;
namespace http = boost::beast::http;

int grpc_code_for_http(int s) {
  switch (s) {
    case 200: return grpc::StatusCode::OK;
    case 400: case 413: case 422: return grpc::StatusCode::INVALID_ARGUMENT;
    case 401: return grpc::StatusCode::UNAUTHENTICATED;
    case 403: return grpc::StatusCode::PERMISSION_DENIED;
    case 404: return grpc::StatusCode::NOT_FOUND;
    case 429: return grpc::StatusCode::RESOURCE_EXHAUSTED;
    case 499: return grpc::StatusCode::CANCELLED;
    default: return s >= 500 ? grpc::StatusCode::UNAVAILABLE : grpc::StatusCode::UNKNOWN;
  }
}

namespace {

std::string metadata(const grpc::CallbackServerContext* ctx, std::string_view key) {
  const auto& md = ctx->client_metadata();
  auto it = md.find(grpc::string_ref(key.data(), key.size()));
  return it == md.end() ? std::string() : std::string(it->second.data(), it->second.size());
}

// The sampling fields Complete and Chat share; a field left unset is left out, so the engine's
// defaults and the proxy's errors apply. Streamed with usage at the end, or (the unary calls)
// not streamed.
template <typename R>
void sampling_fields(const R& r, bool stream, json::object& o) {
  if (!r.model().empty()) o["model"] = r.model();
  if (r.max_tokens() != 0) o["max_tokens"] = r.max_tokens();
  if (r.has_temperature()) o["temperature"] = r.temperature();
  if (r.has_top_p()) o["top_p"] = r.top_p();
  if (r.has_seed()) o["seed"] = r.seed();
  if (r.stop_size() > 0) {
    json::array stop;
    for (const std::string& s : r.stop()) stop.emplace_back(s);
    o["stop"] = std::move(stop);
  }
  if (!stream) return;
  o["stream"] = true;
  json::object opts;
  opts["include_usage"] = true;
  o["stream_options"] = std::move(opts);
}

// The OpenAI bodies the requests stand for.
std::string openai_body(const v1::CompleteRequest& r, bool stream) {
  json::object o;
  o["prompt"] = r.prompt();
  sampling_fields(r, stream, o);
  return json::serialize(o);
}
std::string openai_body(const v1::ChatRequest& r, bool stream) {
  json::object o;
  json::array messages;
  for (const v1::ChatMessage& m : r.messages()) {
    json::object jm;
    jm["role"] = m.role();
    jm["content"] = m.content();
    messages.emplace_back(std::move(jm));
  }
  o["messages"] = std::move(messages);
  sampling_fields(r, stream, o);
  return json::serialize(o);
}

template <typename R>
net::Request openai_request(const grpc::CallbackServerContext* ctx, const R& r, const char* target, bool stream) {
  net::Request req{http::verb::post, target, 11};
  req.set(http::field::content_type, "application/json");
  if (std::string auth = metadata(ctx, "authorization"); !auth.empty()) req.set(http::field::authorization, auth);
  if (!r.request_id().empty()) req.set("x-request-id", r.request_id());
  req.body() = openai_body(r, stream);
  req.prepare_payload();
  return req;
}

// The message of an OpenAI-style error body, or the body itself.
std::string error_message(std::string_view body) {
  json::error_code ec;
  json::value v = json::parse(body, ec);
  if (!ec && v.is_object()) {
    if (const json::value* e = v.as_object().if_contains("error"); e && e->is_object()) {
      if (const json::value* m = e->as_object().if_contains("message"); m && m->is_string()) return std::string(m->as_string());
    }
  }
  return std::string(body);
}

template <typename M>  // CompleteChunk or CompleteResponse
void fill_usage(const json::object& o, M* chunk) {
  const json::value* u = o.if_contains("usage");
  if (!u || !u->is_object()) return;
  const json::object& uo = u->as_object();
  auto num = [](const json::object& obj, std::string_view k) -> int64_t {
    const json::value* v = obj.if_contains(k);
    return v && v->is_int64() ? v->as_int64() : 0;
  };
  v1::Usage* out = chunk->mutable_usage();
  out->set_prompt_tokens(num(uo, "prompt_tokens"));
  out->set_completion_tokens(num(uo, "completion_tokens"));
  if (const json::value* d = uo.if_contains("prompt_tokens_details"); d && d->is_object()) {
    out->set_cached_tokens(num(d->as_object(), "cached_tokens"));
  }
}

// One completion chunk (streamed) or whole completion as a message; false with *error set
// when it is an error event.
template <typename M>  // CompleteChunk or CompleteResponse
bool to_chunk(std::string_view data, M* chunk, std::string* error) {
  json::error_code ec;
  json::value v = json::parse(data, ec);
  if (ec || !v.is_object()) {
    *error = "the replica sent an event that is not JSON";
    return false;
  }
  const json::object& o = v.as_object();
  if (o.contains("error")) {
    *error = error_message(data);
    return false;
  }
  if (const json::value* c = o.if_contains("choices"); c && c->is_array() && !c->as_array().empty() && c->as_array()[0].is_object()) {
    const json::object& choice = c->as_array()[0].as_object();
    if (const json::value* t = choice.if_contains("text"); t && t->is_string()) chunk->set_text(std::string(t->as_string()));
    for (const char* part : {"delta", "message"}) {  // chat: streamed, whole
      const json::value* m = choice.if_contains(part);
      if (const json::value* d = m && m->is_object() ? m->as_object().if_contains("content") : nullptr; d && d->is_string()) {
        chunk->set_text(std::string(d->as_string()));
      }
    }
    if (const json::value* f = choice.if_contains("finish_reason"); f && f->is_string()) {
      chunk->set_finish_reason(std::string(f->as_string()));
    }
  }
  fill_usage(o, chunk);
  return true;
}

// One Complete or Chat call: gRPC's write reactor and the net::Responder that Proxy::handle answers.
// Everything but the reactor callbacks runs on `io_`; the callbacks only post there. The call
// deletes itself after OnDone (which follows Finish, the coroutine's last act).
class CompleteCall final : public grpc::ServerWriteReactor<v1::CompleteChunk>, public net::Responder {
 public:
  CompleteCall(Proxy& proxy, asio::io_context& io, grpc::CallbackServerContext* ctx, net::Request req, bool chat)
      : proxy_(proxy), io_(io), ctx_(ctx), req_(std::move(req)), chat_(chat) {
    asio::co_spawn(io_, run(), net::log_task_exception);
  }

  // grpc::ServerWriteReactor
  void OnWriteDone(bool ok) override {
    asio::post(io_, [this, ok] {
      auto h = std::move(write_done_);
      write_done_ = nullptr;
      if (h) h(ok);
    });
  }
  void OnCancel() override {
    asio::post(io_, [this] {
      cancelled_ = true;
      if (on_gone_) std::exchange(on_gone_, nullptr)();
    });
  }
  void OnDone() override {
    asio::post(io_, [this] { delete this; });
  }

  // net::Responder
  bool keep_alive() const override { return false; }
  asio::awaitable<bool> send(int status, std::string body, std::string_view, const net::Headers& extra) override {
    for (const auto& [k, v] : extra) {
      if (k == "Retry-After") ctx_->AddTrailingMetadata("retry-after", v);
    }
    if (status != 200) {
      final_ = grpc::Status(static_cast<grpc::StatusCode>(grpc_code_for_http(status)), error_message(body));
      co_return true;
    }
    v1::CompleteChunk chunk;
    std::string error;
    if (!to_chunk(body, &chunk, &error)) {
      final_ = grpc::Status(grpc::StatusCode::UNAVAILABLE, error);
      co_return true;
    }
    co_return co_await write_message(chunk);
  }
  asio::awaitable<bool> begin_stream(int status, std::string_view, const net::Headers&) override {
    streaming_ = true;
    if (status != 200) final_ = grpc::Status(static_cast<grpc::StatusCode>(grpc_code_for_http(status)), "replica status " + std::to_string(status));
    co_return !cancelled_;
  }
  asio::awaitable<bool> write(std::string_view data) override {
    for (const net::SseEvent& ev : splitter_.feed(data)) {
      if (ev.data == "[DONE]" || ev.data.empty()) continue;
      v1::CompleteChunk chunk;
      std::string error;
      if (!to_chunk(ev.data, &chunk, &error)) {
        final_ = grpc::Status(grpc::StatusCode::UNAVAILABLE, error);
        continue;
      }
      const bool empty = chunk.text().empty() && chunk.finish_reason().empty() && !chunk.has_usage();
      if (empty) continue;  // e.g. chat's first delta, the role alone
      if (!co_await write_message(chunk)) co_return false;
    }
    co_return true;
  }
  asio::awaitable<bool> end_stream() override { co_return !cancelled_; }
  bool streaming() const override { return streaming_; }
  void abort() override {
    if (final_.ok()) final_ = grpc::Status(grpc::StatusCode::UNAVAILABLE, "the replica broke off the stream");
  }
  void watch_disconnect(std::function<void()> on_gone) override {
    if (cancelled_) {
      on_gone();
    } else {
      on_gone_ = std::move(on_gone);
    }
  }

 private:
  asio::awaitable<void> run() {
    co_await proxy_.handle(req_, *this, chat_);
    on_gone_ = nullptr;  // it points into the finished handler's state
    if (cancelled_ && final_.ok()) final_ = grpc::Status::CANCELLED;
    Finish(final_);
  }

  // Writes one message and waits for gRPC to take it (flow control); false when the call is
  // cancelled.
  asio::awaitable<bool> write_message(const v1::CompleteChunk& chunk) {
    if (cancelled_) co_return false;
    out_ = chunk;
    CompleteCall* self = this;
    const bool ok = co_await asio::async_initiate<decltype(asio::use_awaitable), void(bool)>(
        [self](auto handler) {
          auto h = std::make_shared<decltype(handler)>(std::move(handler));
          self->write_done_ = [h](bool ok) { std::move(*h)(ok); };
          self->StartWrite(&self->out_);
        },
        asio::use_awaitable);
    co_return ok && !cancelled_;
  }

  Proxy& proxy_;
  asio::io_context& io_;
  grpc::CallbackServerContext* ctx_;
  net::Request req_;
  const bool chat_;
  net::SseSplitter splitter_;
  v1::CompleteChunk out_;
  std::function<void(bool)> write_done_;
  std::function<void()> on_gone_;
  grpc::Status final_ = grpc::Status::OK;
  bool streaming_ = false;
  bool cancelled_ = false;
};

// One CompleteUnary or ChatUnary call: the non-streamed POST it stands for through
// Proxy::handle, whose whole answer becomes the one CompleteResponse. Same threading and
// lifetime as CompleteCall.
class UnaryCall final : public grpc::ServerUnaryReactor, public net::Responder {
 public:
  UnaryCall(Proxy& proxy, asio::io_context& io, grpc::CallbackServerContext* ctx, net::Request req, bool chat,
            v1::CompleteResponse* response)
      : proxy_(proxy), io_(io), ctx_(ctx), req_(std::move(req)), chat_(chat), response_(response) {
    asio::co_spawn(io_, run(), net::log_task_exception);
  }

  void OnCancel() override {
    asio::post(io_, [this] {
      cancelled_ = true;
      if (on_gone_) std::exchange(on_gone_, nullptr)();
    });
  }
  void OnDone() override {
    asio::post(io_, [this] { delete this; });
  }

  bool keep_alive() const override { return false; }
  asio::awaitable<bool> send(int status, std::string body, std::string_view, const net::Headers& extra) override {
    for (const auto& [k, v] : extra) {
      if (k == "Retry-After") ctx_->AddTrailingMetadata("retry-after", v);
    }
    std::string error;
    if (status != 200) {
      final_ = grpc::Status(static_cast<grpc::StatusCode>(grpc_code_for_http(status)), error_message(body));
    } else if (!to_chunk(body, response_, &error)) {
      final_ = grpc::Status(grpc::StatusCode::UNAVAILABLE, error);
    }
    co_return !cancelled_;
  }
  // The request is not streamed; a replica that streams anyway is a broken replica.
  asio::awaitable<bool> begin_stream(int, std::string_view, const net::Headers&) override {
    final_ = grpc::Status(grpc::StatusCode::UNAVAILABLE, "the replica streamed an answer that was asked for whole");
    co_return false;
  }
  asio::awaitable<bool> write(std::string_view) override { co_return false; }
  asio::awaitable<bool> end_stream() override { co_return false; }
  bool streaming() const override { return false; }
  void abort() override {
    if (final_.ok()) final_ = grpc::Status(grpc::StatusCode::UNAVAILABLE, "the replica broke off its answer");
  }
  void watch_disconnect(std::function<void()> on_gone) override {
    if (cancelled_) {
      on_gone();
    } else {
      on_gone_ = std::move(on_gone);
    }
  }

 private:
  asio::awaitable<void> run() {
    co_await proxy_.handle(req_, *this, chat_);
    on_gone_ = nullptr;
    if (cancelled_ && final_.ok()) final_ = grpc::Status::CANCELLED;
    Finish(final_);
  }

  Proxy& proxy_;
  asio::io_context& io_;
  grpc::CallbackServerContext* ctx_;
  net::Request req_;
  const bool chat_;
  v1::CompleteResponse* response_;
  std::function<void()> on_gone_;
  grpc::Status final_ = grpc::Status::OK;
  bool cancelled_ = false;
};

std::string bearer_key(const grpc::CallbackServerContext* ctx) {
  std::string v = metadata(ctx, "authorization");
  return v.starts_with("Bearer ") ? v.substr(7) : std::string();
}

}  // namespace

class GrpcApi::Service final : public v1::Inference::CallbackService {
 public:
  Service(Proxy& proxy, Fleet& fleet, asio::io_context& io) : proxy_(proxy), fleet_(fleet), io_(io) {}

  grpc::ServerWriteReactor<v1::CompleteChunk>* Complete(grpc::CallbackServerContext* ctx,
                                                         const v1::CompleteRequest* request) override {
    return new CompleteCall(proxy_, io_, ctx, openai_request(ctx, *request, "/v1/completions", true), false);
  }

  grpc::ServerUnaryReactor* CompleteUnary(grpc::CallbackServerContext* ctx, const v1::CompleteRequest* request,
                                          v1::CompleteResponse* response) override {
    return new UnaryCall(proxy_, io_, ctx, openai_request(ctx, *request, "/v1/completions", false), false, response);
  }

  grpc::ServerUnaryReactor* ChatUnary(grpc::CallbackServerContext* ctx, const v1::ChatRequest* request,
                                      v1::CompleteResponse* response) override {
    return new UnaryCall(proxy_, io_, ctx, openai_request(ctx, *request, "/v1/chat/completions", false), true, response);
  }

  grpc::ServerWriteReactor<v1::CompleteChunk>* Chat(grpc::CallbackServerContext* ctx, const v1::ChatRequest* request) override {
    return new CompleteCall(proxy_, io_, ctx, openai_request(ctx, *request, "/v1/chat/completions", true), true);
  }

  grpc::ServerUnaryReactor* ListModels(grpc::CallbackServerContext* ctx, const v1::ListModelsRequest*,
                                       v1::ListModelsResponse* response) override {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    auto key = fleet_.authenticate(bearer_key(ctx));
    if (!key) {
      reactor->Finish(grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "invalid API key; pass 'authorization: Bearer koi-...'"));
      return reactor;
    }
    for (const std::string& m : fleet_.models_for(key->tenant)) response->add_models(m);
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  grpc::ServerUnaryReactor* Health(grpc::CallbackServerContext* ctx, const v1::HealthRequest*,
                                   v1::HealthResponse* response) override {
    response->set_status("ok");
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

 private:
  Proxy& proxy_;
  Fleet& fleet_;
  asio::io_context& io_;
};

GrpcApi::GrpcApi(Proxy& proxy, Fleet& fleet, asio::io_context& io) : service_(std::make_unique<Service>(proxy, fleet, io)) {}

GrpcApi::~GrpcApi() { stop(); }

Result<int> GrpcApi::start(const std::string& host, int port) {
  grpc::ServerBuilder builder;
  int bound = 0;
  builder.AddListeningPort(host + ":" + std::to_string(port), grpc::InsecureServerCredentials(), &bound);
  builder.RegisterService(service_.get());
  server_ = builder.BuildAndStart();
  if (!server_ || bound == 0) {
    server_.reset();
    return Status::unavailable("grpc_listen: cannot listen on " + host + ":" + std::to_string(port));
  }
  return bound;
}

void GrpcApi::stop() {
  if (!server_) return;
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  server_->Wait();
  server_.reset();
}

}  // namespace koi::gateway
