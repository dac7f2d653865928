// koi serve: one inference engine behind the OpenAI-compatible HTTP API.
//
//   koi serve --model model.gguf --port 8000 [--served-model-name NAME] [--api-key KEY]
//
// Prints "listening on http://HOST:PORT" once it accepts connections (with --port 0, the
// port it got). SIGTERM or SIGINT shut it down gracefully; it then exits 0.
#include <csignal>
#include <cstdio>
#include <filesystem>

#include "base/file.h"
#include "base/logging.h"
#include "cli/command.h"
#include "cli/engine_flags.h"
#include "serve/chat_prompt.h"
#include "serve/engine_service.h"
#include "serve/http_server.h"
#include "serve/metrics.h"

namespace koi::cli {
namespace {

struct ServeOptions {
  std::string served_model_name;
  std::string chat_template;
  serve::ServerConfig server;
  engine::EngineOptions engine;
  int max_waiting = 1024;
  std::string kv_cache_gb;  // the old spelling of --kv-cache-memory: an error that says so
};

// The served name of a model path: its last component ("models/llama/" -> "llama").
std::string model_name_of(const std::string& path) {
  std::filesystem::path p(path);
  while (p.has_relative_path() && p.filename().empty()) p = p.parent_path();
  return p.filename().string();
}

int run_serve(ServeOptions o) {
  if (!o.kv_cache_gb.empty()) {
    return fail("--kv-cache-gb is gone; use --kv-cache-memory " + o.kv_cache_gb +
                "GiB (bytes with a unit, or a fraction of RAM such as 0.3)");
  }
  if (o.max_waiting < 1) return fail("--max-waiting must be at least 1, got " + std::to_string(o.max_waiting));
  auto host = engine::build_engine(o.engine);
  if (!host.ok()) return fail(host.status().message());
  engine::Engine& core = *(*host)->engine;
  const tokenizer::Tokenizer& tok = (*host)->model.tokenizer;
  std::string template_source;
  if (!o.chat_template.empty()) {
    auto text = read_file(o.chat_template);
    if (!text.ok()) return fail("--chat-template: " + text.status().message());
    template_source = *text;
  }
  auto chat = serve::ChatPrompt::create(template_source, tok);
  if (!chat.ok()) return fail(chat.status().message() + "; pass a working template with --chat-template FILE");

  serve::ModelInfo info;
  info.name = o.served_model_name.empty() ? model_name_of(o.engine.model) : o.served_model_name;
  if (info.name.empty()) return fail("cannot name the model after '" + o.engine.model + "'; pass --served-model-name");
  info.tokenizer = &tok;
  info.chat = &*chat;
  info.max_model_len = core.max_model_len();
  grammar::GrammarCache grammars(grammar::Vocabulary::from_tokenizer(tok, core.eos_token_ids()));
  info.grammars = &grammars;
  serve::ServeMetrics metrics(info.name);
  serve::EngineService service(core, metrics, o.max_waiting);
  {
    serve::Server server(o.server, info, service, metrics);
    auto port = server.listen();
    if (!port.ok()) return fail(port.status().message());
    service.start();
    log::info("serving model '{}' ({} tokens of context) with {} forward threads", info.name, info.max_model_len,
              (*host)->runner->num_threads());
    std::printf("listening on http://%s:%d\n", o.server.host.c_str(), *port);
    std::fflush(stdout);
    server.run();
  }
  // The drain is over: serve::Server's destructor left SIGTERM and SIGINT ignored while the
  // model is torn down.
  return 0;
}

Runner setup_serve(CLI::App* app) {
  auto o = std::make_shared<ServeOptions>();
  serve::ServerConfig& s = o->server;
  add_engine_flags(app, &o->engine, kAllEngineFlags);
  app->add_option("--host", s.host, "address to listen on")->capture_default_str();
  app->add_option("--port", s.port, "port to listen on; 0 picks a free one")->capture_default_str();
  app->add_option("--served-model-name", o->served_model_name, "the model id clients send (default: the file name)");
  app->add_option("--api-key", s.api_key, "require 'Authorization: Bearer KEY' on the API");
  app->add_option("--chat-template", o->chat_template, "Jinja chat template file (default: the model's own)");
  app->add_option("--max-body-bytes", s.max_body_bytes, "largest request body accepted")->capture_default_str();
  app->add_option("--io-timeout", s.io_timeout_s, "seconds a client may take per read or write")->capture_default_str();
  app->add_option("--http-threads", s.http_threads, "threads serving HTTP")->capture_default_str()->check(CLI::Range(1, 64));
  app->add_option("--max-connections", s.max_connections,
                  "open connections at most; beyond it idle ones are closed first, then 503")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  app->add_option("--shutdown-timeout", s.shutdown_timeout_s, "seconds in-flight requests get after SIGTERM")
      ->capture_default_str();
  app->add_option("--max-waiting", o->max_waiting, "requests waiting for the engine before 429s")->capture_default_str();
  app->add_option("--seed", o->engine.seed, "seed for requests that bring none")->capture_default_str();
  app->add_option("--kv-cache-gb", o->kv_cache_gb)->group("");  // hidden: tells users the new spelling
  return [o] {
    if (std::string e = port_error("--port", o->server.port); !e.empty()) return fail(e);
    return run_serve(*o);
  };
}

}  // namespace
KOI_COMMAND(serve, "serve a model over the OpenAI-compatible HTTP API", setup_serve);
}  // namespace koi::cli
