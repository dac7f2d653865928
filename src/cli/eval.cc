// koi eval: loss and perplexity of a model over a text file (like llama-perplexity), with
// windows of the model's context (or --context) that overlap by half.
#include <cstdio>

#include "base/file.h"
#include "base/thread_pool.h"
#include "cli/command.h"
#include "engine/loaded_model.h"
#include "train/perplexity.h"

namespace koi::cli {
namespace {

struct EvalOptions {
  std::string model;
  std::string data;
  int context = 0;
  int stride = 0;
  int threads = 0;
};

int run_eval(const EvalOptions& o) {
  auto loaded = engine::load_model(o.model);
  if (!loaded.ok()) return fail(loaded.status().message());
  auto text = read_file(o.data);
  if (!text.ok()) return fail(text.status().message());
  const std::vector<int32_t> tokens = loaded->tokenizer.encode(*text, /*add_special=*/false, /*parse_special=*/false);
  const int context = o.context > 0 ? o.context : loaded->model->config().max_seq_len;
  const int stride = o.stride > 0 ? o.stride : std::max(1, context / 2);
  ThreadPool pool(o.threads);
  auto r = train::evaluate_perplexity(*loaded->model, tokens, context, stride, &pool);
  if (!r.ok()) return fail(o.data + ": " + r.status().message());
  std::printf("tokens %lld | windows %lld of %d (stride %d) | loss %.4f | perplexity %.4f\n",
              static_cast<long long>(r->tokens), static_cast<long long>(r->windows), context, stride, r->loss,
              r->perplexity);
  return 0;
}

Runner setup_eval(CLI::App* app) {
  auto o = std::make_shared<EvalOptions>();
  app->add_option("-m,--model", o->model, "GGUF file or Hugging Face directory")->required();
  app->add_option("-d,--data", o->data, "text file to score")->required();
  app->add_option("--context", o->context, "window length in tokens (default: the model's context)");
  app->add_option("--stride", o->stride, "tokens between window starts (default: half the window)");
  app->add_option("--threads", o->threads, "worker threads (default: the physical cores)");
  return [o] { return run_eval(*o); };
}

}  // namespace
KOI_COMMAND(eval, "loss and perplexity of a model over a text file", setup_eval);
}  // namespace koi::cli
