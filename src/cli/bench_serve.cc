// koi bench serve: a load generator for an OpenAI-compatible server (like `vllm bench
// serve`): Poisson rate or fixed concurrency, request shapes from a trace or synthetic,
// streaming; prints throughput and TTFT / ITL / E2E latency and saves them as JSON.
//
//   koi bench serve --url http://127.0.0.1:8000 --model stories --num-prompts 200 --max-concurrency 32
//   koi bench serve --url ... --trace ../shared/traces/azure_llm_conv.csv --request-rate 4
//   koi bench serve --in-process model.gguf ...   # the same workload on the engine, no HTTP
//   koi bench serve --in-process model.gguf --profile t.json ...  # and the engine's profile
//   koi bench serve --url DECODE --header x-koi-prefill-peer:HOST:KVPORT --slo-ttft-ms 2000 --slo-itl-ms 100
#include <cstdio>

#include "base/file.h"
#include "cli/command.h"
#include "cli/profile.h"
#include "serve/load_gen.h"

namespace koi::cli {
namespace {

struct BenchServeOptions {
  serve::LoadConfig load;
  serve::WorkloadConfig workload;
  std::string in_process;
  std::string result_file;
  std::string profile;               // --in-process only: the engine's Chrome trace
  std::vector<std::string> headers;  // NAME:VALUE
};

int run_bench_serve(const BenchServeOptions& o) {
  if (o.load.url.empty() == o.in_process.empty()) return fail("give exactly one of --url and --in-process");
  auto shapes = serve::make_workload(o.workload);
  if (!shapes.ok()) return fail(shapes.status().message());
  if (!o.profile.empty() && o.in_process.empty()) {
    return fail("--profile records the engine in this process: use it with --in-process (profile a server with "
                "koi serve --profile)");
  }
  auto profile = ProfileFile::open(o.profile);
  if (!profile.ok()) return fail(profile.status().message());
  auto report = o.in_process.empty() ? serve::run_http(o.load, *shapes)
                                     : serve::run_in_process(o.in_process, o.load, *shapes, profile->recorder());
  if (!report.ok()) return fail(report.status().message());
  if (Status s = profile->finish(); !s.ok()) return fail(s.message());
  std::printf("%s", serve::report_text(*report).c_str());
  if (!o.result_file.empty()) {
    boost::json::object out = serve::report_json(*report);
    out["target"] = o.in_process.empty() ? o.load.url : "in-process:" + o.in_process;
    out["request_rate"] = o.load.request_rate;
    out["max_concurrency"] = o.load.max_concurrency;
    out["trace"] = o.workload.trace;
    out["input_scale"] = o.workload.input_scale;
    if (Status s = write_file_atomic(o.result_file, boost::json::serialize(out) + "\n"); !s.ok()) return fail(s.message());
  }
  return report->errors == 0 ? 0 : 1;
}

Runner setup_bench_serve(CLI::App* app) {
  auto o = std::make_shared<BenchServeOptions>();
  serve::LoadConfig& l = o->load;
  serve::WorkloadConfig& w = o->workload;
  app->add_option("--url", l.url, "server to load, http://HOST:PORT");
  app->add_option("--in-process", o->in_process, "instead of --url: run the engine on this model file in process");
  app->add_option("--model", l.model, "the model name to send (default: the server's only model, from /v1/models)");
  app->add_option("--api-key", l.api_key, "sent as 'Authorization: Bearer KEY'");
  app->add_option("--request-rate", l.request_rate, "requests per second, Poisson arrivals; 0 sends all at once")
      ->capture_default_str();
  app->add_option("--max-concurrency", l.max_concurrency, "requests in flight at most; 0 is unbounded")->capture_default_str();
  app->add_option("--num-prompts", w.num_requests, "requests to send")->capture_default_str();
  app->add_option("--trace", w.trace, "request shapes: Azure *.csv or Mooncake *.jsonl (default: synthetic)");
  app->add_option("--input-len", w.input_len, "synthetic prompt tokens")->capture_default_str();
  app->add_option("--output-len", w.output_len, "synthetic output tokens")->capture_default_str();
  app->add_option("--max-input-len", w.max_input_len, "clip trace prompts to this many tokens")->capture_default_str();
  app->add_option("--trace-block-tokens", w.trace_block_tokens,
                  "Mooncake traces: tokens per hash id (512 as recorded; fewer fit more of a conversation's "
                  "blocks into a small model's context)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 16));
  app->add_option("--max-output-len", w.max_output_len, "clip trace outputs to this many tokens")->capture_default_str();
  app->add_option("--token-range", w.vocab_hi, "prompt token ids are drawn below this id (and from 100 up)")
      ->capture_default_str();
  app->add_option("--seed", w.seed, "workload and arrival seed")->capture_default_str();
  app->add_option("--result-file", o->result_file, "write the report here as JSON");
  app->add_option("--input-scale", w.input_scale, "multiply Azure trace prompt lengths by this before clipping")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app->add_option("--profile", o->profile,
                  "with --in-process: write a Chrome trace (Perfetto JSON) of the engine's steps and requests to FILE");
  app->add_option("--header", o->headers, "NAME:VALUE sent with every request (repeatable)");
  app->add_option("--slo-ttft-ms", l.slo_ttft_ms, "goodput counts requests with TTFT at most this (0: no bound)")
      ->capture_default_str();
  app->add_option("--slo-itl-ms", l.slo_itl_ms, "goodput counts requests with mean ITL at most this (0: no bound)")
      ->capture_default_str();
  return [o] {
    o->load.seed = o->workload.seed;
    for (const std::string& h : o->headers) {
      const size_t colon = h.find(':');
      if (colon == std::string::npos || colon == 0) return fail("--header must read NAME:VALUE, got '" + h + "'");
      o->load.headers.emplace_back(h.substr(0, colon), h.substr(colon + 1));
    }
    return run_bench_serve(*o);
  };
}

}  // namespace
KOI_SUBCOMMAND(bench, serve, "load an OpenAI-compatible server and report TTFT, ITL and throughput", setup_bench_serve);
}  // namespace koi::cli
