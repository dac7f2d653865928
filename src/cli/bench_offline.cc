// koi bench offline: offline throughput of the engine — N requests queued at once, run to
// completion at each concurrency level (max running sequences), with request shapes that
// are synthetic or taken from an Azure LLM trace CSV (TIMESTAMP,ContextTokens,GeneratedTokens).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include "base/random.h"
#include "cli/command.h"
#include "engine/engine.h"
#include "engine/kv_memory.h"
#include "engine/llama_runner.h"
#include "engine/loaded_model.h"

namespace koi::cli {
namespace {

struct OfflineOptions {
  std::string model;
  std::vector<int> concurrency = {1, 8, 32};
  int requests_per_slot = 2;
  int input_len = 128;
  int output_len = 64;
  std::string trace;
  uint64_t seed = 1;
  int threads = 0;
  std::string kv_memory = "2GiB";
  int max_batched_tokens = 512;
  std::string json;
  std::string speculative;  // "", "ngram" or "draft"
  int num_speculative_tokens = 4;
  std::string draft_model;
};

struct Shape {
  int input;
  int output;
};

Result<std::vector<Shape>> read_trace(const std::string& path, int max_context) {
  std::ifstream in(path);
  if (!in) return Status::not_found(path + ": cannot open the trace");
  std::string line;
  std::getline(in, line);
  if (line.find("ContextTokens") == std::string::npos) {
    return Status::invalid_argument(path + ": expected the Azure trace header TIMESTAMP,ContextTokens,GeneratedTokens");
  }
  std::vector<Shape> shapes;
  while (std::getline(in, line)) {
    std::stringstream ss(line);
    std::string ts, ctx, gen;
    if (!std::getline(ss, ts, ',') || !std::getline(ss, ctx, ',') || !std::getline(ss, gen, ',')) continue;
    int c = std::atoi(ctx.c_str()), g = std::atoi(gen.c_str());
    if (c <= 0 || g <= 0) continue;
    g = std::min(g, max_context / 4);
    c = std::min(c, max_context - g - 1);
    shapes.push_back({c, g});
  }
  if (shapes.empty()) return Status::invalid_argument(path + ": no usable rows");
  return shapes;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(std::min<double>(v.size() - 1, p / 100.0 * (v.size() - 1) + 0.5))];
}

int run_offline(const OfflineOptions& o) {
  auto loaded = engine::load_model(o.model);
  if (!loaded.ok()) return fail(loaded.status().message());
  const model::ModelConfig& cfg = loaded->model->config();
  std::vector<Shape> trace;
  if (!o.trace.empty()) {
    auto t = read_trace(o.trace, cfg.max_seq_len);
    if (!t.ok()) return fail(t.status().message());
    trace = std::move(*t);
  }
  if (o.input_len + o.output_len > cfg.max_seq_len) {
    return fail("--input-len + --output-len exceed the model's context of " + std::to_string(cfg.max_seq_len));
  }
  auto kv_bytes = engine::parse_kv_cache_memory(o.kv_memory, engine::total_ram_bytes());
  if (!kv_bytes.ok()) return fail(kv_bytes.status().message());
  const int block_size = 16;
  auto blocks = engine::kv_blocks_for_memory(*kv_bytes, loaded->model->kv_shape(1, block_size).bytes_per_block());
  if (!blocks.ok()) return fail(blocks.status().message());

  engine::SpeculativeConfig spec;
  std::optional<engine::LoadedModel> draft;
  if (!o.speculative.empty()) {
    auto method = engine::parse_speculative_method(o.speculative);
    if (!method.ok()) return fail(method.status().message());
    spec.method = *method;
    spec.num_speculative_tokens = o.num_speculative_tokens;
    if (spec.method == engine::SpeculativeMethod::kDraftModel) {
      if (o.draft_model.empty()) return fail("--speculative draft needs --draft-model PATH");
      auto d = engine::load_model(o.draft_model);
      if (!d.ok()) return fail(d.status().message());
      draft = std::move(*d);
    }
  }
  std::printf("model %s: %d layers, dim %d, %.2fB parameters; KV cache %d blocks (%lld tokens)\n", o.model.c_str(),
              cfg.n_layers, cfg.dim, cfg.num_parameters() / 1e9, *blocks,
              static_cast<long long>(*blocks) * block_size);
  std::printf("%6s %6s %10s %12s %12s %10s %10s %10s %10s\n", "conc", "reqs", "req/s", "out tok/s", "total tok/s",
              "ttft p50", "ttft p99", "e2e p50", "e2e p99");
  std::string json = "[";
  Rng rng(o.seed);
  for (int conc : o.concurrency) {
    const int n = std::max(4, conc * o.requests_per_slot);
    engine::LlamaRunner runner(*loaded->model, *blocks, block_size, o.threads);
    std::optional<engine::LlamaRunner> draft_runner;
    if (draft) {
      draft_runner.emplace(*draft->model, *blocks, block_size, o.threads);
      spec.draft_runner = &*draft_runner;
      spec.draft_num_kv_blocks = *blocks;
    }
    if (Status s = engine::validate(spec, runner); !s.ok()) return fail(s.message());
    engine::EngineConfig ec;
    ec.block_size = block_size;
    ec.num_kv_blocks = *blocks;
    ec.max_num_seqs = conc;
    ec.max_num_batched_tokens = o.max_batched_tokens;
    ec.seed = o.seed;
    ec.speculative = spec;
    engine::Engine eng(ec, runner);
    int64_t in_tokens = 0, out_tokens = 0;
    for (int r = 0; r < n; ++r) {
      Shape shape = trace.empty() ? Shape{o.input_len, o.output_len} : trace[rng.below(trace.size())];
      engine::RequestSpec spec;
      spec.id = std::to_string(r);
      spec.prompt.push_back(loaded->tokenizer.bos_id().value_or(1));
      for (int i = 1; i < shape.input; ++i) spec.prompt.push_back(3 + static_cast<int32_t>(rng.below(cfg.n_vocab - 3)));
      spec.params.temperature = 0.0f;
      spec.params.max_tokens = shape.output;
      spec.params.ignore_eos = true;
      in_tokens += shape.input;
      if (Status s = eng.add_request(std::move(spec)); !s.ok()) return fail(s.message());
    }
    std::map<std::string, double> first, done;
    const auto start = std::chrono::steady_clock::now();
    auto now = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
    while (eng.has_unfinished()) {
      auto outs = eng.step();
      if (!outs.ok()) return fail(outs.status().message());
      const double t = now();
      for (const auto& out : *outs) {
        out_tokens += static_cast<int64_t>(out.token_ids.size());
        if (!out.token_ids.empty()) first.emplace(out.request_id, t);
        if (out.finished) done[out.request_id] = t;
      }
    }
    const double secs = now();
    std::vector<double> ttft, e2e;
    for (auto& [id, t] : first) ttft.push_back(t);
    for (auto& [id, t] : done) e2e.push_back(t);
    std::printf("%6d %6d %10.2f %12.1f %12.1f %10.3f %10.3f %10.3f %10.3f\n", conc, n, n / secs, out_tokens / secs,
                (in_tokens + out_tokens) / secs, percentile(ttft, 50), percentile(ttft, 99), percentile(e2e, 50),
                percentile(e2e, 99));
    if (spec.num_speculative_tokens > 0) {
      std::printf("       speculative %s: %lld drafts, %lld accepted (acceptance %.3f)\n", o.speculative.c_str(),
                  static_cast<long long>(eng.stats().num_draft_tokens),
                  static_cast<long long>(eng.stats().num_accepted_tokens), eng.stats().spec_acceptance_rate);
    }
    std::fflush(stdout);
    char buf[512];
    std::snprintf(buf, sizeof buf,
                  "%s{\"concurrency\":%d,\"requests\":%d,\"seconds\":%.4f,\"requests_per_s\":%.4f,\"output_tokens_per_s\":%.3f,"
                  "\"total_tokens_per_s\":%.3f,\"ttft_p50\":%.4f,\"ttft_p99\":%.4f,\"e2e_p50\":%.4f,\"e2e_p90\":%.4f,\"e2e_p99\":%.4f,"
                  "\"preemptions\":%lld}",
                  json.size() > 1 ? "," : "", conc, n, secs, n / secs, out_tokens / secs, (in_tokens + out_tokens) / secs,
                  percentile(ttft, 50), percentile(ttft, 99), percentile(e2e, 50), percentile(e2e, 90),
                  percentile(e2e, 99), static_cast<long long>(eng.stats().num_preemptions));
    json += buf;
  }
  json += "]\n";
  if (!o.json.empty()) {
    std::ofstream out(o.json);
    out << json;
    if (!out) return fail(o.json + ": cannot write the JSON results");
  }
  return 0;
}

Runner setup_offline(CLI::App* app) {
  auto o = std::make_shared<OfflineOptions>();
  app->add_option("-m,--model", o->model, "GGUF file or Hugging Face directory")->required();
  app->add_option("--concurrency", o->concurrency, "concurrency levels (max running sequences)")
      ->delimiter(',')->capture_default_str();
  app->add_option("--requests-per-slot", o->requests_per_slot, "requests per level = max(4, this x concurrency)")
      ->capture_default_str();
  app->add_option("--input-len", o->input_len, "prompt tokens of synthetic requests")->capture_default_str();
  app->add_option("--output-len", o->output_len, "output tokens of synthetic requests")->capture_default_str();
  app->add_option("--trace", o->trace, "take request shapes from an Azure LLM trace CSV instead");
  app->add_option("--seed", o->seed, "seed for prompts and trace sampling")->capture_default_str();
  app->add_option("--threads", o->threads, "worker threads (default: physical cores)");
  app->add_option("--kv-cache-memory", o->kv_memory, "KV cache size: bytes with unit (2GiB) or a fraction of RAM (0.3)")
      ->capture_default_str();
  app->add_option("--max-batched-tokens", o->max_batched_tokens, "token budget per engine step")->capture_default_str();
  app->add_option("--json", o->json, "also write the results as JSON to this file");
  app->add_option("--speculative", o->speculative, "speculative decoding: ngram (prompt lookup) or draft");
  app->add_option("--num-speculative-tokens", o->num_speculative_tokens, "draft tokens per step")->capture_default_str();
  app->add_option("--draft-model", o->draft_model, "the draft model for --speculative draft (same vocabulary)");
  return [o] { return run_offline(*o); };
}

}  // namespace
KOI_SUBCOMMAND(bench, offline, "offline engine throughput at several concurrency levels", setup_offline);
}  // namespace koi::cli
