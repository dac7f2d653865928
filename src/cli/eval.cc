// koi eval: loss and perplexity of a model over a text file (like llama-perplexity), with
// windows of the model's context (or --context) that overlap by half. A progress line on
// stderr (at most one a second) tells how far it is, how fast, and the perplexity so far.
//
// The model is loaded by the engine builder, as `koi serve` loads it, but scored with the
// model's forward pass directly (train::evaluate_perplexity): perplexity needs the logits of
// every position of a window, and an Engine step returns sampled tokens, not logits. With
// --kv-dtype the window's KV cache is kept in that type (its bytes per token on a second line).
#include <chrono>
#include <cstdio>

#include "base/file.h"
#include "base/thread_pool.h"
#include "cli/command.h"
#include "cli/engine_flags.h"
#include "engine/engine_builder.h"
#include "engine/kv_memory.h"
#include "train/perplexity.h"

namespace koi::cli {
namespace {

struct EvalOptions {
  engine::EngineOptions engine;
  std::string data;
  int context = 0;
  int stride = 0;
};

int run_eval(const EvalOptions& o) {
  auto host = engine::load_engine_models(o.engine);
  if (!host.ok()) return fail(host.status().message());
  const engine::LoadedModel& loaded = (*host)->model;
  auto text = read_file(o.data);
  if (!text.ok()) return fail(text.status().message());
  const std::vector<int32_t> tokens = loaded.tokenizer.encode(*text, /*add_special=*/false, /*parse_special=*/false);
  const int context = o.context > 0 ? o.context : loaded.model->config().max_seq_len;
  const int stride = o.stride > 0 ? o.stride : std::max(1, context / 2);
  ThreadPool pool(o.engine.threads, engine::thread_placement(o.engine));
  auto kv_dtype = engine::parse_kv_dtype(o.engine.kv_dtype);  // checked by load_engine_models
  if (!kv_dtype.ok()) return fail(kv_dtype.status().message());
  const int64_t kv_bytes_per_token = loaded.model->kv_shape(1, 1, *kv_dtype).bytes_per_block();

  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto last_print = start;
  auto progress = [&](const train::PerplexityProgress& p) {
    const auto now = Clock::now();
    if (now - last_print < std::chrono::seconds(1)) return;
    last_print = now;
    const double secs = std::chrono::duration<double>(now - start).count();
    std::fprintf(stderr, "eval: %lld/%lld tokens (%.1f%%) | %.0f tok/s | perplexity %.4f so far\n",
                 static_cast<long long>(p.so_far.tokens), static_cast<long long>(p.total_tokens),
                 100.0 * static_cast<double>(p.so_far.tokens) / static_cast<double>(p.total_tokens),
                 static_cast<double>(p.so_far.tokens) / secs, p.so_far.perplexity);
  };
  auto r = train::evaluate_perplexity(*loaded.model, tokens, context, stride, &pool, progress, *kv_dtype);
  if (!r.ok()) return fail(o.data + ": " + r.status().message());
  std::printf("tokens %lld | windows %lld of %d (stride %d) | loss %.4f | perplexity %.4f\n",
              static_cast<long long>(r->tokens), static_cast<long long>(r->windows), context, stride, r->loss,
              r->perplexity);
  std::printf("kv cache %s: %lld bytes per token\n", std::string(dtype_name(*kv_dtype)).c_str(),
              static_cast<long long>(kv_bytes_per_token));
  return 0;
}

Runner setup_eval(CLI::App* app) {
  auto o = std::make_shared<EvalOptions>();
  add_engine_flags(app, &o->engine, kModelFlags | kKvDtypeFlags);
  app->add_option("-d,--data", o->data, "text file to score")->required();
  app->add_option("--context", o->context, "window length in tokens (default: the model's context)");
  app->add_option("--stride", o->stride, "tokens between window starts (default: half the window)");
  return [o] { return run_eval(*o); };
}

}  // namespace
KOI_COMMAND(eval, "loss and perplexity of a model over a text file", setup_eval);
}  // namespace koi::cli
