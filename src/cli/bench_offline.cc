// koi bench offline: offline throughput of the engine — N requests queued at once, run to
// completion at each concurrency level (max running sequences), with request shapes that
// are synthetic or taken from an Azure LLM trace CSV (TIMESTAMP,ContextTokens,GeneratedTokens).
// With --lora adapters and --adapters 0,1,4,16, each level runs once per adapter count, the
// requests spread round robin over that many adapters (0: the base alone), and each row
// prints its output tokens/s as a ratio to the base's at the same concurrency.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include "base/random.h"
#include "cli/command.h"
#include "cli/engine_flags.h"
#include "cli/profile.h"
#include "engine/block_hash.h"
#include "engine/engine_builder.h"

namespace koi::cli {
namespace {

struct OfflineOptions {
  OfflineOptions() {
    engine.kv_cache_memory = "2GiB";
    engine.max_num_batched_tokens = 512;
    engine.detokenize = false;  // token ids are all a throughput run needs
  }
  engine::EngineOptions engine;  // max_num_seqs comes from each --concurrency level
  std::vector<int> concurrency = {1, 8, 32};
  int requests_per_slot = 2;
  int input_len = 128;
  int output_len = 64;
  std::string trace;
  uint64_t seed = 1;
  std::string json;
  std::string profile;
  std::vector<int> adapters;  // --adapters: adapter counts to compare; empty: the base only
};

// The --lora names, in flag order.
std::vector<std::string> lora_names(const engine::EngineOptions& eo) {
  std::vector<std::string> names;
  for (const std::string& value : eo.loras) names.push_back(value.substr(0, value.find('=')));
  return names;
}

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

int run_offline(OfflineOptions o) {
  engine::EngineOptions& eo = o.engine;
  eo.seed = o.seed;
  auto profile = ProfileFile::open(o.profile);
  if (!profile.ok()) return fail(profile.status().message());
  auto host = engine::load_engine_models(eo);
  if (!host.ok()) return fail(host.status().message());
  const model::ModelConfig& cfg = (*host)->model.model->config();
  std::vector<Shape> trace;
  if (!o.trace.empty()) {
    auto t = read_trace(o.trace, cfg.max_seq_len);
    if (!t.ok()) return fail(t.status().message());
    trace = std::move(*t);
  }
  if (o.input_len + o.output_len > cfg.max_seq_len) {
    return fail("--input-len + --output-len exceed the model's context of " + std::to_string(cfg.max_seq_len));
  }
  for (int conc : o.concurrency) {
    if (conc < 1) return fail("--concurrency levels must be at least 1, got " + std::to_string(conc));
  }
  for (int count : o.adapters) {
    if (count < 0 || count > static_cast<int>(eo.loras.size())) {
      return fail("--adapters counts must be between 0 and the number of --lora adapters (" +
                  std::to_string(eo.loras.size()) + "), got " + std::to_string(count));
    }
  }
  if (!o.adapters.empty() && o.adapters.front() != 0) {
    return fail("--adapters must start with 0 (the base alone), which the other counts are compared with");
  }
  bool printed_header = false;
  std::string json = "[";
  const std::vector<std::string> names = lora_names(eo);
  const std::vector<int> mixes = o.adapters.empty() ? std::vector<int>{0} : o.adapters;
  for (int conc : o.concurrency) {
    double base_tps = 0;
    for (int num_adapters : mixes) {
      Rng rng(o.seed + static_cast<uint64_t>(conc));  // the same requests for every adapter count
      const int n = std::max(4, conc * o.requests_per_slot);
      eo.max_num_seqs = conc;
      if (Status s = engine::start_engine(**host, eo); !s.ok()) return fail(s.message());
      engine::Engine& eng = *(*host)->engine;
      eng.set_trace(profile->recorder());  // the levels follow each other on the same tracks
      if (!printed_header) {
        const int blocks = eng.kv_cache().pool().num_blocks();
        std::printf("model %s: %d layers, dim %d, %.2fB parameters; KV cache %d blocks (%lld tokens)\n",
                    eo.model.c_str(), cfg.n_layers, cfg.dim, cfg.num_parameters() / 1e9, blocks,
                    static_cast<long long>(blocks) * eo.block_size);
        std::printf("%6s %6s %10s %12s %12s %10s %10s %10s %10s %12s %12s", "conc", "reqs", "req/s", "out tok/s",
                    "total tok/s", "ttft p50", "ttft p99", "e2e p50", "e2e p99", "decode tok/s", "decode ms");
        std::printf(o.adapters.empty() ? "\n" : " %8s %8s\n", "adapters", "vs base");
        printed_header = true;
      }
      int64_t in_tokens = 0, out_tokens = 0;
      for (int r = 0; r < n; ++r) {
        Shape shape = trace.empty() ? Shape{o.input_len, o.output_len} : trace[rng.below(trace.size())];
        engine::RequestSpec spec;
        spec.id = std::to_string(r);
        spec.prompt.push_back((*host)->model.tokenizer.bos_id().value_or(1));
        for (int i = 1; i < shape.input; ++i) spec.prompt.push_back(3 + static_cast<int32_t>(rng.below(cfg.n_vocab - 3)));
        spec.params.temperature = 0.0f;
        spec.params.max_tokens = shape.output;
        spec.params.ignore_eos = true;
        if (num_adapters > 0) {  // round robin over the first num_adapters adapters
          auto lora = (*host)->loras->acquire(names[static_cast<size_t>(r % num_adapters)]);
          if (!lora.ok()) return fail(lora.status().message());
          spec.lora = lora->adapter;
          spec.cache_key = engine::cache_key_for_adapter(0, lora->id);
        }
        in_tokens += shape.input;
        if (Status s = eng.add_request(std::move(spec)); !s.ok()) return fail(s.message());
      }
      std::map<std::string, double> first, done;
      const auto start = std::chrono::steady_clock::now();
      auto now = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
      // Decode-only steps (every token computed was a token returned: no prompt chunk, no draft):
      // aggregate decode throughput and the time of one step at this concurrency.
      int64_t decode_tokens = 0, decode_steps = 0;
      double decode_secs = 0;
      while (eng.has_unfinished()) {
        const int64_t computed = eng.stats().num_computed_tokens, generated = eng.stats().num_generated_tokens;
        const double before = now();
        auto outs = eng.step();
        if (!outs.ok()) return fail(outs.status().message());
        const double t = now();
        const int64_t step_generated = eng.stats().num_generated_tokens - generated;
        if (step_generated > 0 && eng.stats().num_computed_tokens - computed == step_generated) {
          decode_tokens += step_generated;
          decode_secs += t - before;
          ++decode_steps;
        }
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
      const double decode_tps = decode_secs > 0 ? decode_tokens / decode_secs : 0;
      const double decode_ms = decode_steps > 0 ? 1e3 * decode_secs / decode_steps : 0;
      std::printf("%6d %6d %10.2f %12.1f %12.1f %10.3f %10.3f %10.3f %10.3f %12.1f %12.1f", conc, n, n / secs,
                  out_tokens / secs, (in_tokens + out_tokens) / secs, percentile(ttft, 50), percentile(ttft, 99),
                  percentile(e2e, 50), percentile(e2e, 99), decode_tps, decode_ms);
      if (num_adapters == 0) base_tps = out_tokens / secs;
      if (!o.adapters.empty()) std::printf(" %8d %8.3f", num_adapters, base_tps > 0 ? out_tokens / secs / base_tps : 0.0);
      std::printf("\n");
      if (!eo.speculative.empty()) {
        std::printf("       speculative %s: %lld drafts, %lld accepted (acceptance %.3f)\n", eo.speculative.c_str(),
                    static_cast<long long>(eng.stats().num_draft_tokens),
                    static_cast<long long>(eng.stats().num_accepted_tokens), eng.stats().spec_acceptance_rate);
      }
      std::fflush(stdout);
      char buf[768];
      std::snprintf(buf, sizeof buf,
                    "%s{\"concurrency\":%d,\"requests\":%d,\"seconds\":%.4f,\"requests_per_s\":%.4f,\"output_tokens_per_s\":%.3f,"
                    "\"total_tokens_per_s\":%.3f,\"ttft_p50\":%.4f,\"ttft_p99\":%.4f,\"e2e_p50\":%.4f,\"e2e_p90\":%.4f,\"e2e_p99\":%.4f,"
                    "\"decode_tokens_per_s\":%.3f,\"decode_step_ms\":%.3f,\"preemptions\":%lld,\"adapters\":%d}",
                    json.size() > 1 ? "," : "", conc, n, secs, n / secs, out_tokens / secs, (in_tokens + out_tokens) / secs,
                    percentile(ttft, 50), percentile(ttft, 99), percentile(e2e, 50), percentile(e2e, 90),
                    percentile(e2e, 99), decode_tps, decode_ms, static_cast<long long>(eng.stats().num_preemptions),
                    num_adapters);
      json += buf;
    }
  }
  json += "]\n";
  if (!o.json.empty()) {
    std::ofstream out(o.json);
    out << json;
    if (!out) return fail(o.json + ": cannot write the JSON results");
  }
  if (Status s = profile->finish(); !s.ok()) return fail(s.message());
  return 0;
}

Runner setup_offline(CLI::App* app) {
  auto o = std::make_shared<OfflineOptions>();
  add_engine_flags(app, &o->engine, kModelFlags | kMemoryFlags | kPrefixCacheFlags | kSpeculativeFlags | kLoraFlags);
  app->add_option("--concurrency", o->concurrency, "concurrency levels (max running sequences)")
      ->delimiter(',')->capture_default_str();
  app->add_option("--requests-per-slot", o->requests_per_slot, "requests per level = max(4, this x concurrency)")
      ->capture_default_str();
  app->add_option("--input-len", o->input_len, "prompt tokens of synthetic requests")->capture_default_str();
  app->add_option("--output-len", o->output_len, "output tokens of synthetic requests")->capture_default_str();
  app->add_option("--trace", o->trace, "take request shapes from an Azure LLM trace CSV instead");
  app->add_option("--seed", o->seed, "seed for prompts, trace sampling and the engine")->capture_default_str();
  app->add_option("--json", o->json, "also write the results as JSON to this file");
  app->add_option("--profile", o->profile,
                  "write a Chrome trace (Perfetto JSON) of the engine's steps and requests to FILE (as koi serve "
                  "--profile)");
  app->add_option("--adapters", o->adapters,
                  "LoRA adapter counts to compare, starting with 0 (the base alone): each level runs once per count "
                  "with its requests spread round robin over the first N --lora adapters")
      ->delimiter(',');
  return [o] { return run_offline(*o); };
}

}  // namespace
KOI_SUBCOMMAND(bench, offline, "offline engine throughput at several concurrency levels", setup_offline);
}  // namespace koi::cli
