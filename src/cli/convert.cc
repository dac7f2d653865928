// koi convert: model import and export. Reads a llama2.c checkpoint (+ its tokenizer.bin),
// a Hugging Face directory or a GGUF file, and writes one GGUF file with the tokenizer
// included, at a chosen weight type.
#include <chrono>
#include <cstdio>

#include "base/logging.h"
#include "cli/command.h"
#include "engine/loaded_model.h"
#include "model/gguf.h"
#include "model/gguf_export.h"
#include "model/llama2c.h"
#include "model/loader.h"
#include "model/random_model.h"
#include "tokenizer/load.h"
#include "tokenizer/synthetic_vocab.h"

namespace koi::cli {
namespace {

struct ConvertOptions {
  std::string input;
  std::string llama2c;
  std::string tokenizer;
  std::string output;
  std::string type = "auto";
  std::string name;
  std::string random_shape;
  uint64_t seed = 1;
};

constexpr const char* kTypeNames = "auto, f32, f16, bf16, q8_0, q4_0, q4_k_m, q5_k_m, q4_k, q5_k, q6_k";

// The type "auto" resolves to: the source's own type for 16-bit sources, f32 otherwise.
// (Random models are f32 in memory and so default to f32 too.)
DType auto_type(const model::ModelWeights& w) {
  DType t = w.token_embd.type;
  return t == DType::kF16 || t == DType::kBF16 ? t : DType::kF32;
}

int run_convert(const ConvertOptions& o) {
  const auto start = std::chrono::steady_clock::now();
  model::ModelConfig config;
  model::ModelWeights weights;
  tokenizer::TokenizerSpec spec;
  std::string source = !o.random_shape.empty() ? "random:" + o.random_shape : o.llama2c.empty() ? o.input : o.llama2c;
  if (source.empty()) return fail("nothing to convert: give an input path, --llama2c FILE or --random SHAPE");

  if (!o.random_shape.empty()) {
    auto shape = model::named_shape(o.random_shape);
    if (!shape) return fail("--random must be one of tiny, tiny-moe, tinyllama, tinyllama-8k; got '" + o.random_shape + "'");
    config = *shape;
    weights = model::random_weights(config, o.seed);
    spec = tokenizer::synthetic_spm_spec(config.n_vocab);
  } else if (!o.llama2c.empty()) {
    if (o.tokenizer.empty()) {
      return fail("--llama2c needs --tokenizer FILE (the llama2.c tokenizer.bin that belongs to the checkpoint)");
    }
    auto m = model::load_llama2c(o.llama2c);
    if (!m.ok()) return fail(m.status().message());
    config = m->config;
    weights = std::move(m->weights);
    auto s = tokenizer::load_llama2c_tokenizer(o.tokenizer, config.n_vocab);
    if (!s.ok()) return fail(s.status().message());
    spec = std::move(*s);
  } else {
    auto w = model::load_weights(source);
    if (!w.ok()) return fail(w.status().message());
    config = w->config;
    weights = std::move(w->weights);
    auto s = engine::load_tokenizer_spec(source);
    if (!s.ok()) return fail(s.status().message());
    spec = std::move(*s);
  }
  if (!o.name.empty()) config.name = o.name;
  if (config.name.empty()) {
    std::string base = source.substr(source.find_last_of('/') + 1);
    config.name = base.substr(0, base.find('.'));
  }

  model::ExportType type = auto_type(weights);
  if (o.type != "auto") {
    auto t = model::ExportType::from_name(o.type);
    if (!t) return fail("--type must be one of " + std::string(kTypeNames) + "; got '" + o.type + "'");
    type = *t;
  }
  log::info("converting {} ({} layers, dim {}, vocab {}, {:.1f}M parameters) to {} at {}", source, config.n_layers,
            config.dim, config.n_vocab, config.num_parameters() / 1e6, o.output, type.name());
  model::GgufWriter writer;
  auto stats = model::add_model_to_gguf(config, weights, type, writer);
  if (!stats.ok()) return fail(stats.status().message());
  if (Status s = tokenizer::spec_to_gguf(spec, writer); !s.ok()) return fail(source + ": " + s.message());
  if (Status s = tokenizer::check_gguf_tokenizer(spec); !s.ok()) {
    log::warn("{}: Koi reads the whole tokenizer from the file (koi.tokenizer.json); llama.cpp reads only its "
              "tokenizer.ggml keys: {}", o.output, s.message());
  }
  if (Status s = writer.write(o.output); !s.ok()) return fail(s.message());
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (stats->fallback_tensors > 0) {
    log::info("{} tensors have rows that {} blocks do not divide and were written as q8_0 or f16 (as llama.cpp falls back)",
              stats->fallback_tensors, type.name());
  }
  std::printf("wrote %s: %d tensors, %.1f MB of weights, tokenizer with %zu tokens, in %.1f s\n", o.output.c_str(),
              stats->tensors, stats->bytes / 1e6, spec.tokens.size(), secs);
  return 0;
}

Runner setup_convert(CLI::App* app) {
  auto o = std::make_shared<ConvertOptions>();
  app->add_option("input", o->input, "a Hugging Face model directory or a GGUF file");
  app->add_option("--llama2c", o->llama2c, "import a llama2.c checkpoint (needs --tokenizer)");
  app->add_option("--hf", o->input, "a Hugging Face model directory (same as the positional input)");
  app->add_option("--tokenizer", o->tokenizer, "the llama2.c tokenizer.bin of a --llama2c checkpoint");
  app->add_option("-o,--output", o->output, "the GGUF file to write")->required();
  app->add_option("--type", o->type,
                  "weight type: " + std::string(kTypeNames) +
                      " (auto keeps 16-bit sources, else f32; q4_k_m/q5_k_m are llama.cpp's mixes with q6_K output, "
                      "attn_v and ffn_down layers; q4_k/q5_k/q6_k use one type for every matrix)")
      ->capture_default_str();
  app->add_option("--random", o->random_shape,
                  "write a random-weight model of a named shape instead (tiny, tiny-moe: tiny with 4 Mixtral-style experts, tinyllama, tinyllama-8k: TinyLlama with an 8192-token context) with a synthetic vocabulary");
  app->add_option("--seed", o->seed, "seed of the --random weights")->capture_default_str();
  app->add_option("--name", o->name, "model name stored in the file (default: from the input file name)");
  return [o] { return run_convert(*o); };
}

}  // namespace
KOI_COMMAND(convert, "import/export models into GGUF (llama2.c, Hugging Face, GGUF), with quantization",
            setup_convert);
}  // namespace koi::cli
