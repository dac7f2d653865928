// koi bench model: the llama-bench pair for one model file — prompt processing (pp: a prompt
// of --prompt tokens in one forward pass) and text generation (tg: --gen tokens one at a
// time from an empty cache), in tokens per second over --repetitions runs, plus peak memory
// against the file size and the KV cache. Both run as one request through the Engine, built
// as every command builds it (engine/engine_builder.h): pp is a request of --prompt tokens
// and one output token, tg a request of one token and --gen outputs (greedy; no text).
// --mfu adds pp's model FLOPs utilisation: the forward FLOPs per token at T = --prompt
// (train/flops.h, per layer) times pp's tokens/s, over the machine's measured fp32 matmul peak
// (train::measure_peak_flops on as many threads as the engine's).
// --profile FILE writes the engine's Chrome trace of every run, the warm-up included
// (engine/step_trace.h: steps with forward per layer and op, one request span per run).
#include <sys/resource.h>
#include <sys/stat.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>

#include "base/random.h"
#include "cli/command.h"
#include "cli/engine_flags.h"
#include "cli/profile.h"
#include "engine/engine_builder.h"
#include "kernels/isa.h"
#include "train/flops.h"

namespace koi::cli {
namespace {

struct ModelBenchOptions {
  engine::EngineOptions engine;
  int prompt = 512;
  int gen = 128;
  int repetitions = 3;
  std::string json;
  std::string profile;
  bool mfu = false;
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

// Runs one request to completion; returns its seconds from add_request to the last token.
Result<double> run_request(engine::Engine& core, engine::RequestSpec request) {
  const auto t0 = std::chrono::steady_clock::now();
  KOI_RETURN_IF_ERROR(core.add_request(std::move(request)));
  while (core.has_unfinished()) KOI_RETURN_IF_ERROR(core.step().status());
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// CPU seconds (user and system, every thread) this process has used.
double cpu_seconds() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

int run_model_bench(ModelBenchOptions o) {
  if (o.prompt < 1 || o.gen < 1 || o.repetitions < 1) return fail("--prompt, --gen and --repetitions must be positive");
  engine::EngineOptions& eo = o.engine;
  eo.max_num_seqs = 1;
  eo.max_num_batched_tokens = o.prompt;  // the whole prompt in one forward pass
  // A request keeps one position for the token it samples after its last one.
  eo.max_model_len = std::max(o.prompt, o.gen) + 1;
  eo.enable_prefix_caching = false;      // every repetition computes its prompt
  eo.detokenize = false;
  auto host = engine::load_engine_models(eo);
  if (!host.ok()) return fail(host.status().message());
  const model::ModelConfig& c = (*host)->model.model->config();
  if (eo.max_model_len > c.max_seq_len) {
    return fail("--prompt and --gen must be below the model's context of " + std::to_string(c.max_seq_len) +
                " tokens (the engine keeps one position for the sampled token)");
  }
  if (Status s = engine::start_engine(**host, eo); !s.ok()) return fail(s.message());
  engine::Engine& core = *(*host)->engine;
  auto profile = ProfileFile::open(o.profile);
  if (!profile.ok()) return fail(profile.status().message());
  core.set_trace(profile->recorder());
  Rng rng(1);
  auto token = [&] { return static_cast<int32_t>(rng.below(static_cast<uint64_t>(c.n_vocab))); };
  auto request = [&](int num_prompt, int num_output) {
    engine::RequestSpec r;
    r.id = "bench";
    for (int i = 0; i < num_prompt; ++i) r.prompt.push_back(token());
    r.params.temperature = 0.0f;
    r.params.max_tokens = num_output;
    r.params.ignore_eos = true;
    return r;
  };

  std::vector<double> pp, tg;
  double pp_cpu_secs = 0, pp_wall_secs = 0;  // the measured pp runs'
  for (int rep = 0; rep < o.repetitions + 1; ++rep) {  // the first repetition warms up and is dropped
    const double cpu_before = cpu_seconds();
    auto pp_secs = run_request(core, request(o.prompt, 1));
    if (!pp_secs.ok()) return fail(pp_secs.status().message());
    if (rep > 0) pp_cpu_secs += cpu_seconds() - cpu_before, pp_wall_secs += *pp_secs;
    auto tg_secs = run_request(core, request(1, o.gen));
    if (!tg_secs.ok()) return fail(tg_secs.status().message());
    if (rep > 0) {
      pp.push_back(o.prompt / *pp_secs);
      tg.push_back(o.gen / *tg_secs);
    }
  }
  if (Status s = profile->finish(); !s.ok()) return fail(s.message());
  Figure fpp = summarize(pp), ftg = summarize(tg);
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  const double rss_mb = ru.ru_maxrss / 1024.0;
  const double file_mb = static_cast<double>(file_bytes(eo.model)) / (1 << 20);
  const model::KvCacheShape& kv = (*host)->runner->kv_cache().shape();
  const double kv_mb = static_cast<double>(kv.bytes_per_block()) * kv.num_blocks / (1 << 20);
  const int threads = (*host)->runner->num_threads();
  const std::string isa(kernels::isa_name(kernels::active_isa()));
  std::printf("model %s: %.2fB parameters, %d threads, kernels %s\n", eo.model.c_str(), c.num_parameters() / 1e9,
              threads, isa.c_str());
  std::printf("pp%d: %8.2f ± %.2f tokens/s\n", o.prompt, fpp.mean, fpp.stddev);
  std::printf("tg%d: %8.2f ± %.2f tokens/s\n", o.gen, ftg.mean, ftg.stddev);
  std::printf("peak RSS %.0f MiB; file %.0f MiB + KV cache %.0f MiB = %.0f MiB\n", rss_mb, file_mb, kv_mb,
              file_mb + kv_mb);
  if (o.mfu) {
    const double flops_per_token = train::model_flops(c, o.prompt).forward_per_token();
    ThreadPool pool(threads);
    const double peak = train::measure_peak_flops(&pool);
    const double achieved = flops_per_token * fpp.mean;
    std::printf("pp%d MFU %.3f: %.3f GFLOP per token (T %d) x %.2f tokens/s = %.1f GFLOP/s of a measured %.1f GFLOP/s "
                "peak (fp32 matmul 256x1024x1024, best of 30, %d threads)\n",
                o.prompt, achieved / peak, flops_per_token / 1e9, o.prompt, fpp.mean, achieved / 1e9, peak / 1e9,
                threads);
    // On a shared machine the threads may not run all the time: the same figure per thread-second
    // of CPU the pp runs got is what a quiet machine would approach.
    const double thread_secs = pp_cpu_secs / threads;
    std::printf("pp%d MFU by CPU time %.3f: the pp runs had %.0f%% of %d threads' wall time\n", o.prompt,
                thread_secs > 0 ? flops_per_token * o.prompt * o.repetitions / thread_secs / peak : 0.0,
                100.0 * thread_secs / pp_wall_secs, threads);
  }
  if (!o.json.empty()) {
    std::ofstream out(o.json);
    out << "{\"model\":\"" << eo.model << "\",\"threads\":" << threads << ",\"pp\":" << o.prompt
        << ",\"pp_tokens_per_s\":" << fpp.mean << ",\"pp_stddev\":" << fpp.stddev << ",\"tg\":" << o.gen
        << ",\"tg_tokens_per_s\":" << ftg.mean << ",\"tg_stddev\":" << ftg.stddev << ",\"peak_rss_mib\":" << rss_mb
        << ",\"file_mib\":" << file_mb << ",\"kv_mib\":" << kv_mb << "}\n";
    if (!out) return fail(o.json + ": cannot write the JSON results");
  }
  return 0;
}

Runner setup_model_bench(CLI::App* app) {
  auto o = std::make_shared<ModelBenchOptions>();
  add_engine_flags(app, &o->engine, kModelFlags, "-t,--threads");
  app->add_option("-p,--prompt", o->prompt, "prompt tokens for pp")->capture_default_str();
  app->add_option("-n,--gen", o->gen, "generated tokens for tg")->capture_default_str();
  app->add_option("-r,--repetitions", o->repetitions, "measured runs (after one warm-up)")->capture_default_str();
  app->add_option("--json", o->json, "also write the results as JSON to this file");
  app->add_option("--profile", o->profile,
                  "write a Chrome trace (Perfetto JSON) of the engine's steps (forward per layer and op) to FILE");
  app->add_flag("--mfu", o->mfu,
                "also print pp's model FLOPs utilisation against the measured fp32 matmul peak (docs/observability.md)");
  return [o] { return run_model_bench(*o); };
}

}  // namespace
KOI_SUBCOMMAND(bench, model, "prompt processing and generation speed of a model (llama-bench pp/tg)", setup_model_bench);
}  // namespace koi::cli
