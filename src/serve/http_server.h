// Server: the HTTP front of `koi serve` — the OpenAI-compatible API over one EngineService.
//
// Endpoints: POST /v1/completions, /v1/chat/completions (JSON, or server-sent events with
// "stream": true, ending in "data: [DONE]"), GET /v1/models, /health, /metrics (Prometheus),
// POST /tokenize, /detokenize, /v1/load_lora_adapter, /v1/unload_lora_adapter (vLLM's: a
// request names an adapter by its "model"); with --kv-events, GET /kv/events?after=N and /kv/snapshot. Errors are OpenAI-shaped JSON with the right status: 400 bad
// body or parameter, 401 bad key, 404 unknown model or path, 405 wrong method, 408 slow
// client, 413 body over the limit, 429 queue full and 503 shutting down (both with
// Retry-After). A client that disconnects mid-request aborts its engine requests.
//
// Threads: a small Asio io_context pool runs Beast connections as coroutines, one strand
// per connection; each generation request gets a channel the engine thread posts into.
// run() blocks; stop() (or SIGTERM/SIGINT) begins a graceful shutdown: the listener
// closes, in-flight requests finish, or are cancelled at the deadline, and run() returns
// after stopping the EngineService. Failures to bind come back from listen().
//
// Prefill/decode disaggregation: on a decode worker (ModelInfo::kv_client set), a generation
// request with the header `x-koi-prefill-peer: HOST:PORT` gets its prompt's KV from that
// prefill worker's --kv-port (serve/kv_transfer_client.h); the response is the same.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "base/status.h"
#include "engine/lora_pool.h"
#include "grammar/constraint.h"
#include "serve/chat_prompt.h"
#include "serve/engine_service.h"
#include "serve/http_trace.h"
#include "serve/kv_events.h"
#include "serve/kv_transfer_client.h"
#include "serve/metrics.h"
#include "tokenizer/tokenizer.h"

namespace koi::serve {

struct ServerConfig {
  std::string host = "127.0.0.1";
  int port = 8000;                       // 0: any free port (listen() returns it)
  std::string api_key;                   // empty: no authentication
  size_t max_body_bytes = 4 << 20;
  double io_timeout_s = 30.0;            // per read or write; a slower client is dropped
  int http_threads = 2;
  int max_connections = 8192;            // open connections; idle ones are shed first beyond it
  double shutdown_timeout_s = 30.0;      // in-flight requests are cancelled after this
};

struct ModelInfo {
  std::string name;                      // the served model name (the "model" field)
  const tokenizer::Tokenizer* tokenizer = nullptr;
  const ChatPrompt* chat = nullptr;
  int max_model_len = 0;                 // prompt + output tokens per request
  // Set for --role decode: requests with an x-koi-prefill-peer header take their prompt's KV
  // from that prefill worker. Null: the header is refused.
  KvTransferClient* kv_client = nullptr;
  // Set with --kv-events: GET /kv/events?after=N[&wait_ms=M] and GET /kv/snapshot
  // (serve/kv_events.h). Not const: a long poll registers a waiter.
  KvEventLog* kv_events = nullptr;
  grammar::GrammarCache* grammars = nullptr;  // compiles structured-output constraints (thread-safe)
  // The LoRA adapters served over the base model, by name (the "model" field); listed by
  // /v1/models, changed by POST /v1/load_lora_adapter and /v1/unload_lora_adapter. Null: none.
  engine::LoraPool* loras = nullptr;
};

class Server {
 public:
  // `service` and `metrics` (and what `model` points to) must outlive the server.
  Server(ServerConfig config, ModelInfo model, EngineService& service, ServeMetrics& metrics);
  ~Server();

  // Binds and listens; returns the bound port.
  Result<int> listen();
  // Serves until shutdown completes. Call after listen().
  void run();
  // Begins a graceful shutdown. Thread-safe.
  void stop();
  // Before listen(): records the HTTP handling of generation requests on `recorder`
  // (serve/http_trace.h; `koi serve --profile`), which must outlive the server.
  void set_trace(trace::Recorder* recorder);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace koi::serve
