// koi generate: offline generation from a model file, streaming text as it is produced
// (the llama2.c `run` experience), then prompt and generation speed on stderr. One request
// through the Engine, built as `koi serve` builds it (engine/engine_builder.h), so the
// engine flags (KV memory, speculative decoding, ...) mean the same here.
#include <chrono>
#include <cstdio>

#include "cli/command.h"
#include "cli/engine_flags.h"
#include "engine/engine_builder.h"

namespace koi::cli {
namespace {

struct GenerateOptions {
  engine::EngineOptions engine;
  std::string prompt;
  int steps = 256;
  std::optional<float> temperature;
  std::optional<float> top_p;
  std::optional<int> top_k;
  std::optional<uint64_t> seed;
  bool ignore_eos = false;
};

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

int run_generate(GenerateOptions o) {
  if (o.steps < 0) return fail("-n must be zero or more, got " + std::to_string(o.steps));
  o.engine.max_num_seqs = 1;
  auto host = engine::load_engine_models(o.engine);
  if (!host.ok()) return fail(host.status().message());
  const engine::LoadedModel& loaded = (*host)->model;
  const tokenizer::Tokenizer& tok = loaded.tokenizer;
  const int n_ctx = loaded.model->config().max_seq_len;

  engine::RequestSpec request;
  request.id = "generate";
  engine::SamplingParams& params = request.params;
  params.temperature = o.temperature.value_or(loaded.defaults.temperature.value_or(1.0f));
  params.top_p = o.top_p.value_or(loaded.defaults.top_p.value_or(1.0f));
  params.top_k = o.top_k.value_or(loaded.defaults.top_k.value_or(0));
  params.max_tokens = std::max(1, o.steps);
  params.ignore_eos = o.ignore_eos;
  if (Status s = engine::validate(params, loaded.model->config().n_vocab); !s.ok()) return fail(s.message());
  const uint64_t seed = o.seed.value_or(static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count()));
  params.seed = seed;

  request.prompt = tok.encode(o.prompt, /*add_special=*/true, /*parse_special=*/false);
  const size_t prompt_len = request.prompt.size();
  if (prompt_len == 0) return fail("the prompt encodes to no tokens and the tokenizer has no BOS token to start from");
  if (static_cast<int>(prompt_len) >= n_ctx) {
    return fail("the prompt is " + std::to_string(prompt_len) + " tokens; the model's context is " +
                std::to_string(n_ctx));
  }
  engine::Engine* core = nullptr;
  if (o.steps > 0) {  // built before any output, so that its start-up log line comes first
    if (Status s = engine::start_engine(**host, o.engine); !s.ok()) return fail(s.message());
    core = (*host)->engine.get();
    if (Status s = core->add_request(std::move(request)); !s.ok()) return fail(s.message());
  }
  std::fputs(o.prompt.c_str(), stdout);  // the prompt's text is the user's; the output continues it
  std::fflush(stdout);
  size_t num_output = 0;
  double prompt_secs = 0;
  auto t1 = std::chrono::steady_clock::now();
  if (core) {
    // The prompt is computed (in one step unless it is longer than --max-num-batched-tokens)
    // up to the first token; each later step adds one token, or more with speculation.
    const auto t0 = std::chrono::steady_clock::now();
    bool prompt_done = false;
    while (core->has_unfinished()) {
      auto outputs = core->step();
      if (!outputs.ok()) return fail(outputs.status().message());
      for (const engine::RequestOutput& out : *outputs) {
        if (!prompt_done && !out.token_ids.empty()) {
          prompt_secs = seconds_since(t0);
          t1 = std::chrono::steady_clock::now();
          prompt_done = true;
        }
        num_output += out.token_ids.size();
        // An end-of-sequence token ends the output; it is not part of it.
        if (out.finish_reason == engine::FinishReason::kStop) --num_output;
        std::fwrite(out.text.data(), 1, out.text.size(), stdout);
      }
      std::fflush(stdout);
    }
  }
  std::fputc('\n', stdout);
  std::fflush(stdout);
  if (!core) {
    std::fprintf(stderr, "prompt: %zu tokens, not computed with -n 0; generation: 0 tokens; seed %llu\n", prompt_len,
                 static_cast<unsigned long long>(seed));
    return 0;
  }
  const double gen_secs = seconds_since(t1);
  std::fprintf(stderr, "prompt: %zu tokens in %.3f s (%.1f tok/s); generation: %zu tokens in %.3f s (%.1f tok/s); seed %llu\n",
               prompt_len, prompt_secs, prompt_len / std::max(prompt_secs, 1e-9), num_output, gen_secs,
               num_output / std::max(gen_secs, 1e-9), static_cast<unsigned long long>(seed));
  return 0;
}

Runner setup_generate(CLI::App* app) {
  auto o = std::make_shared<GenerateOptions>();
  add_engine_flags(app, &o->engine, kModelFlags | kMemoryFlags | kSpeculativeFlags);
  app->add_option("-p,--prompt", o->prompt, "text to continue (default: empty, start from BOS)");
  app->add_option("-n,--steps", o->steps, "tokens to generate (capped by the context)")->capture_default_str();
  app->add_option("-t,--temperature", o->temperature, "sampling temperature; 0 is greedy (default: the model's, else 1.0)");
  app->add_option("--top-p", o->top_p, "nucleus sampling mass (default: the model's, else 1.0)");
  app->add_option("--top-k", o->top_k, "keep the k most likely tokens; 0 is off");
  app->add_option("-s,--seed", o->seed, "random seed (default: from the clock; printed at the end)");
  app->add_flag("--ignore-eos", o->ignore_eos, "keep generating past end-of-sequence tokens");
  return [o] { return run_generate(*o); };
}

}  // namespace
KOI_COMMAND(generate, "generate text from a model file, streaming it", setup_generate);
}  // namespace koi::cli
