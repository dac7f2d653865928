// koi generate: offline generation from a model file, streaming text as it is produced
// (the llama2.c `run` experience), then prompt and generation speed on stderr.
#include <chrono>
#include <cstdio>
#include <numeric>

#include "base/logging.h"
#include "base/thread_pool.h"
#include "cli/command.h"
#include "engine/loaded_model.h"
#include "engine/sampler.h"

namespace koi::cli {
namespace {

struct GenerateOptions {
  std::string model;
  std::string prompt;
  int steps = 256;
  std::optional<float> temperature;
  std::optional<float> top_p;
  std::optional<int> top_k;
  std::optional<uint64_t> seed;
  int threads = 0;
  bool ignore_eos = false;
};

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

int run_generate(const GenerateOptions& o) {
  if (o.steps < 0) return fail("-n must be zero or more, got " + std::to_string(o.steps));
  auto loaded = engine::load_model(o.model);
  if (!loaded.ok()) return fail(loaded.status().message());
  model::LlamaModel& m = *loaded->model;
  const tokenizer::Tokenizer& tok = loaded->tokenizer;
  const int n_ctx = m.config().max_seq_len;

  engine::SamplingParams params;
  params.temperature = o.temperature.value_or(loaded->defaults.temperature.value_or(1.0f));
  params.top_p = o.top_p.value_or(loaded->defaults.top_p.value_or(1.0f));
  params.top_k = o.top_k.value_or(loaded->defaults.top_k.value_or(0));
  params.max_tokens = std::max(1, o.steps);
  params.ignore_eos = o.ignore_eos;
  if (Status s = engine::validate(params, m.config().n_vocab); !s.ok()) return fail(s.message());
  const uint64_t seed = o.seed.value_or(static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count()));
  Rng rng(seed);

  std::vector<int32_t> prompt = tok.encode(o.prompt, /*add_special=*/true, /*parse_special=*/false);
  if (prompt.empty()) return fail("the prompt encodes to no tokens and the tokenizer has no BOS token to start from");
  if (static_cast<int>(prompt.size()) >= n_ctx) {
    return fail("the prompt is " + std::to_string(prompt.size()) + " tokens; the model's context is " +
                std::to_string(n_ctx));
  }
  const int steps = std::min<int>(o.steps, n_ctx - static_cast<int>(prompt.size()));

  constexpr int kBlockSize = 16;
  const int num_blocks = (n_ctx + kBlockSize - 1) / kBlockSize;
  model::KvCache kv(m.kv_shape(num_blocks, kBlockSize));
  std::vector<int32_t> block_table(static_cast<size_t>(num_blocks));
  std::iota(block_table.begin(), block_table.end(), 0);
  ThreadPool pool(o.threads);
  std::vector<float> logits(static_cast<size_t>(m.config().n_vocab));

  // Prompt: one batch, logits for the last token only.
  model::ForwardBatch batch;
  batch.sequences.push_back({block_table});
  for (size_t i = 0; i < prompt.size(); ++i) {
    batch.token_ids.push_back(prompt[i]);
    batch.positions.push_back(static_cast<int32_t>(i));
    batch.seq_index.push_back(0);
  }
  batch.logit_indices.push_back(static_cast<int32_t>(prompt.size()) - 1);
  auto t0 = std::chrono::steady_clock::now();
  if (Status s = m.forward(batch, kv, logits.data(), &pool); !s.ok()) return fail(s.message());
  const double prompt_secs = seconds_since(t0);

  tokenizer::StreamDecoder decoder(&tok, /*skip_special=*/true);
  for (int32_t t : prompt) decoder.push(t);  // the prompt's text is the user's; only continue after it
  std::fputs(o.prompt.c_str(), stdout);
  std::fflush(stdout);
  std::vector<int32_t> output;
  auto t1 = std::chrono::steady_clock::now();
  for (int step = 0; step < steps; ++step) {
    engine::SampledToken next = engine::sample(params, rng, logits, prompt, output);
    if (!o.ignore_eos && tok.is_eog(next.token)) break;
    output.push_back(next.token);
    std::string text = decoder.push(next.token);
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
    if (step + 1 == steps) break;
    batch.token_ids = {next.token};
    batch.positions = {static_cast<int32_t>(prompt.size() + output.size()) - 1};
    batch.seq_index = {0};
    batch.logit_indices = {0};
    if (Status s = m.forward(batch, kv, logits.data(), &pool); !s.ok()) return fail(s.message());
  }
  std::string rest = decoder.flush();
  std::fwrite(rest.data(), 1, rest.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
  const double gen_secs = seconds_since(t1);
  std::fprintf(stderr, "prompt: %zu tokens in %.3f s (%.1f tok/s); generation: %zu tokens in %.3f s (%.1f tok/s); seed %llu\n",
               prompt.size(), prompt_secs, prompt.size() / std::max(prompt_secs, 1e-9), output.size(), gen_secs,
               output.size() / std::max(gen_secs, 1e-9), static_cast<unsigned long long>(seed));
  return 0;
}

Runner setup_generate(CLI::App* app) {
  auto o = std::make_shared<GenerateOptions>();
  app->add_option("-m,--model", o->model, "GGUF file or Hugging Face directory")->required();
  app->add_option("-p,--prompt", o->prompt, "text to continue (default: empty, start from BOS)");
  app->add_option("-n,--steps", o->steps, "tokens to generate (capped by the context)")->capture_default_str();
  app->add_option("-t,--temperature", o->temperature, "sampling temperature; 0 is greedy (default: the model's, else 1.0)");
  app->add_option("--top-p", o->top_p, "nucleus sampling mass (default: the model's, else 1.0)");
  app->add_option("--top-k", o->top_k, "keep the k most likely tokens; 0 is off");
  app->add_option("-s,--seed", o->seed, "random seed (default: from the clock; printed at the end)");
  app->add_option("--threads", o->threads, "worker threads (default: the physical cores)");
  app->add_flag("--ignore-eos", o->ignore_eos, "keep generating past end-of-sequence tokens");
  return [o] { return run_generate(*o); };
}

}  // namespace
KOI_COMMAND(generate, "generate text from a model file, streaming it", setup_generate);
}  // namespace koi::cli
