// koi serve: one inference engine behind the OpenAI-compatible HTTP API.
//
//   koi serve --model model.gguf --port 8000 [--served-model-name NAME] [--api-key KEY]
//             [--role both|prefill|decode] [--kv-port N] [--kv-transfer-timeout S]
//             [--lora NAME=DIR ...] [--max-loras N] [--lora-memory-mib M]
//
// Prints "listening on http://HOST:PORT" once it accepts connections (with --port 0, the
// port it got); with --role prefill, "kv transfer on HOST:PORT" before it. SIGTERM or SIGINT shut it down gracefully; it then exits 0.
#include <csignal>
#include <cstdio>
#include <filesystem>

#include "base/file.h"
#include "base/logging.h"
#include "cli/command.h"
#include "cli/engine_flags.h"
#include "cli/profile.h"
#include "serve/chat_prompt.h"
#include "serve/engine_service.h"
#include "serve/http_server.h"
#include "serve/kv_transfer_client.h"
#include "serve/kv_transfer_server.h"
#include "serve/metrics.h"

namespace koi::cli {
namespace {

struct ServeOptions {
  std::string served_model_name;
  std::string chat_template;
  serve::ServerConfig server;
  engine::EngineOptions engine;
  int max_waiting = 1024;
  std::string role = "both";          // --role: both, prefill or decode (docs/kv-transfer.md)
  int kv_port = 0;                    // --kv-port: the prefill role's KV transfer listener
  double kv_transfer_timeout_s = 30;  // --kv-transfer-timeout: the decode role's lease on reserved blocks
  bool kv_events = false;             // --kv-events: publish prefix-cache changes
  std::string profile;                // --profile: Chrome trace of the engine's steps, written at shutdown
  std::string kv_cache_gb;  // the old spelling of --kv-cache-memory: an error that says so
};

// The served name of a model path: its last component ("models/llama/" -> "llama").
std::string model_name_of(const std::string& path) {
  std::filesystem::path p(path);
  while (p.has_relative_path() && p.filename().empty()) p = p.parent_path();
  return p.filename().string();
}

// This engine's KV layout and model identity, for the transfer handshake.
Result<engine::KvLayout> kv_transfer_layout(const engine::Engine& core, const std::string& model_path) {
  if (!core.can_transfer_kv()) return Status::unsupported("--role: this model's runner cannot share its KV memory");
  engine::KvLayout layout = core.kv_layout();
  KOI_ASSIGN_OR_RETURN(layout.model_fingerprint, engine::model_fingerprint(model_path));
  return layout;
}

int run_serve(ServeOptions o) {
  if (!o.kv_cache_gb.empty()) {
    return fail("--kv-cache-gb is gone; use --kv-cache-memory " + o.kv_cache_gb +
                "GiB (bytes with a unit, or a fraction of RAM such as 0.3)");
  }
  if (o.max_waiting < 1) return fail("--max-waiting must be at least 1, got " + std::to_string(o.max_waiting));
  o.engine.publish_kv_events = o.kv_events;
  auto profile = ProfileFile::open(o.profile);
  if (!profile.ok()) return fail(profile.status().message());
  auto host = engine::build_engine(o.engine);
  if (!host.ok()) return fail(host.status().message());
  engine::Engine& core = *(*host)->engine;
  core.set_trace(profile->recorder());
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
  info.loras = (*host)->loras.get();
  for (const std::string& value : o.engine.loras) {
    if (value.substr(0, value.find('=')) == info.name) {
      return fail("--lora " + value + ": the adapter's name is the base model's; give it another");
    }
  }
  serve::ServeMetrics metrics(info.name);
  serve::EngineService service(core, metrics, o.max_waiting);
  serve::KvEventLog kv_events(o.engine.block_size);
  if (o.kv_events) {
    service.publish_kv_events(&kv_events);
    info.kv_events = &kv_events;
  }
  std::optional<serve::KvTransferServer> kv_server;
  std::optional<serve::KvTransferClient> kv_client;
  if (o.role != "both") {
    auto layout = kv_transfer_layout(core, o.engine.model);
    if (!layout.ok()) return fail(layout.status().message());
    if (o.role == "decode") {
      kv_client.emplace(*layout, o.kv_transfer_timeout_s, metrics);
      info.kv_client = &*kv_client;
    } else {
      kv_server.emplace(*layout, service);
      auto kv_port = kv_server->listen(o.server.host, o.kv_port);
      if (!kv_port.ok()) return fail(kv_port.status().message());
      std::printf("kv transfer on %s:%d\n", o.server.host.c_str(), *kv_port);
    }
  }
  {
    serve::Server server(o.server, info, service, metrics);
    server.set_trace(profile->recorder());
    auto port = server.listen();
    if (!port.ok()) return fail(port.status().message());
    service.start();
    if (kv_server) kv_server->start();
    log::info("serving model '{}' ({} tokens of context) with {} forward threads", info.name, info.max_model_len,
              (*host)->runner->num_threads());
    std::printf("listening on http://%s:%d\n", o.server.host.c_str(), *port);
    std::fflush(stdout);
    server.run();
  }
  // The drain is over: serve::Server's destructor left SIGTERM and SIGINT ignored while the
  // model is torn down. The engine thread ends before the profile is read.
  service.stop();
  if (Status s = profile->finish(); !s.ok()) return fail(s.message());
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
  app->add_option("--profile", o->profile,
                  "write a Chrome trace (Perfetto JSON) of the engine to FILE at shutdown: steps (schedule, forward "
                  "per layer and op, sample, update), each request (waiting, prefill, decode) and its HTTP handling "
                  "(parse, queued, respond)");
  app->add_option("--max-waiting", o->max_waiting, "requests waiting for the engine before 429s")->capture_default_str();
  app->add_option("--seed", o->engine.seed, "seed for requests that bring none")->capture_default_str();
  app->add_option("--role", o->role,
                  "both: prefill and decode here; prefill: also serve prompts to decode workers over --kv-port; "
                  "decode: take prompts' KV from the prefill worker a request names (docs/kv-transfer.md)")
      ->check(CLI::IsMember({"both", "prefill", "decode"}))
      ->capture_default_str();
  CLI::Option* kv_port = app->add_option("--kv-port", o->kv_port, "--role prefill: TCP port for KV transfers; 0 picks a free one")
                             ->capture_default_str();
  CLI::Option* kv_timeout =
      app->add_option("--kv-transfer-timeout", o->kv_transfer_timeout_s,
                      "--role decode: seconds a transfer may hold reserved blocks before the request is prefilled here")
          ->check(CLI::PositiveNumber)
          ->capture_default_str();
  app->add_flag("--kv-events", o->kv_events,
               "publish prefix-cache block stored/removed events at GET /kv/events?after=N and /kv/snapshot");
  app->add_option("--kv-cache-gb", o->kv_cache_gb)->group("");  // hidden: tells users the new spelling
  return [o, kv_port, kv_timeout] {
    if (kv_port->count() && o->role != "prefill") return fail("--kv-port applies to --role prefill only");
    if (kv_timeout->count() && o->role != "decode") return fail("--kv-transfer-timeout applies to --role decode only");
    if (std::string e = port_error("--port", o->server.port); !e.empty()) return fail(e);
    if (std::string e = port_error("--kv-port", o->kv_port); !e.empty()) return fail(e);
    return run_serve(*o);
  };
}

}  // namespace
KOI_COMMAND(serve, "serve a model over the OpenAI-compatible HTTP API", setup_serve);
}  // namespace koi::cli
