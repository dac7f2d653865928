// koi bench model: the llama-bench pair for one model file — prompt processing (pp: a prompt
// of --prompt tokens in one forward pass) and text generation (tg: --gen tokens one at a
// time from an empty cache), in tokens per second over --repetitions runs, plus peak memory
// against the file size and the KV cache.
#include <sys/resource.h>
#include <sys/stat.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <numeric>

#include "base/random.h"
#include "base/thread_pool.h"
#include "cli/command.h"
#include "kernels/isa.h"
#include "model/llama.h"
#include "model/loader.h"

namespace koi::cli {
namespace {

struct ModelBenchOptions {
  std::string model;
  int prompt = 512;
  int gen = 128;
  int repetitions = 3;
  int threads = 0;
  std::string json;
};

struct Figure {
  double mean = 0, stddev = 0;
};

Figure summarize(const std::vector<double>& v) {
  Figure f;
  for (double x : v) f.mean += x / v.size();
  for (double x : v) f.stddev += (x - f.mean) * (x - f.mean) / std::max<size_t>(1, v.size() - 1);
  f.stddev = std::sqrt(f.stddev);
  return f;
}

int64_t file_bytes(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) ? st.st_size : 0;
}

int run_model_bench(const ModelBenchOptions& o) {
  if (o.prompt < 1 || o.gen < 1 || o.repetitions < 1) return fail("--prompt, --gen and --repetitions must be positive");
  auto loaded = model::load_weights(o.model);
  if (!loaded.ok()) return fail(loaded.status().message());
  model::LlamaModel m(loaded->config, std::move(loaded->weights));
  const model::ModelConfig& c = m.config();
  const int ctx = std::max(o.prompt, o.gen);
  if (ctx > c.max_seq_len) return fail("--prompt/--gen exceed the model's context of " + std::to_string(c.max_seq_len));
  constexpr int kBlockSize = 16;
  const int num_blocks = (ctx + kBlockSize - 1) / kBlockSize;
  model::KvCache kv(m.kv_shape(num_blocks, kBlockSize));
  std::vector<int32_t> table(static_cast<size_t>(num_blocks));
  std::iota(table.begin(), table.end(), 0);
  ThreadPool pool(o.threads);
  std::vector<float> logits(static_cast<size_t>(c.n_vocab));
  Rng rng(1);
  auto token = [&] { return static_cast<int32_t>(rng.below(static_cast<uint64_t>(c.n_vocab))); };
  auto seconds = [](auto t0) { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };

  model::ForwardBatch batch;
  batch.sequences.push_back({table});
  std::vector<double> pp, tg;
  for (int rep = 0; rep < o.repetitions + 1; ++rep) {  // the first repetition warms up and is dropped
    batch.token_ids.clear();
    batch.positions.clear();
    batch.seq_index.clear();
    for (int i = 0; i < o.prompt; ++i) {
      batch.token_ids.push_back(token());
      batch.positions.push_back(i);
      batch.seq_index.push_back(0);
    }
    batch.logit_indices = {o.prompt - 1};
    auto t0 = std::chrono::steady_clock::now();
    if (Status s = m.forward(batch, kv, logits.data(), &pool); !s.ok()) return fail(s.message());
    if (rep > 0) pp.push_back(o.prompt / seconds(t0));

    t0 = std::chrono::steady_clock::now();
    batch.logit_indices = {0};
    batch.seq_index = {0};
    for (int i = 0; i < o.gen; ++i) {
      batch.token_ids = {token()};
      batch.positions = {i};
      if (Status s = m.forward(batch, kv, logits.data(), &pool); !s.ok()) return fail(s.message());
    }
    if (rep > 0) tg.push_back(o.gen / seconds(t0));
  }
  Figure fpp = summarize(pp), ftg = summarize(tg);
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  const double rss_mb = ru.ru_maxrss / 1024.0;
  const double file_mb = static_cast<double>(file_bytes(o.model)) / (1 << 20);
  const double kv_mb = static_cast<double>(kv.shape().bytes_per_block()) * num_blocks / (1 << 20);
  const std::string isa(kernels::isa_name(kernels::active_isa()));
  std::printf("model %s: %.2fB parameters, %d threads, kernels %s\n", o.model.c_str(), c.num_parameters() / 1e9,
              pool.num_threads(), isa.c_str());
  std::printf("pp%d: %8.2f ± %.2f tokens/s\n", o.prompt, fpp.mean, fpp.stddev);
  std::printf("tg%d: %8.2f ± %.2f tokens/s\n", o.gen, ftg.mean, ftg.stddev);
  std::printf("peak RSS %.0f MiB; file %.0f MiB + KV cache %.0f MiB = %.0f MiB\n", rss_mb, file_mb, kv_mb,
              file_mb + kv_mb);
  if (!o.json.empty()) {
    std::ofstream out(o.json);
    out << "{\"model\":\"" << o.model << "\",\"threads\":" << pool.num_threads() << ",\"pp\":" << o.prompt
        << ",\"pp_tokens_per_s\":" << fpp.mean << ",\"pp_stddev\":" << fpp.stddev << ",\"tg\":" << o.gen
        << ",\"tg_tokens_per_s\":" << ftg.mean << ",\"tg_stddev\":" << ftg.stddev << ",\"peak_rss_mib\":" << rss_mb
        << ",\"file_mib\":" << file_mb << ",\"kv_mib\":" << kv_mb << "}\n";
    if (!out) return fail(o.json + ": cannot write the JSON results");
  }
  return 0;
}

Runner setup_model_bench(CLI::App* app) {
  auto o = std::make_shared<ModelBenchOptions>();
  app->add_option("-m,--model", o->model, "GGUF file or Hugging Face directory")->required();
  app->add_option("-p,--prompt", o->prompt, "prompt tokens for pp")->capture_default_str();
  app->add_option("-n,--gen", o->gen, "generated tokens for tg")->capture_default_str();
  app->add_option("-r,--repetitions", o->repetitions, "measured runs (after one warm-up)")->capture_default_str();
  app->add_option("-t,--threads", o->threads, "worker threads (default: physical cores)");
  app->add_option("--json", o->json, "also write the results as JSON to this file");
  return [o] { return run_model_bench(*o); };
}

}  // namespace
KOI_SUBCOMMAND(bench, model, "prompt processing and generation speed of a model (llama-bench pp/tg)", setup_model_bench);
}  // namespace koi::cli
