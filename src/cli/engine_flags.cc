#include "cli/engine_flags.h"

#include <fmt/format.h>

#include "engine/kv_memory.h"

namespace koi::cli {

void add_engine_flags(CLI::App* app, engine::EngineOptions* o, unsigned groups, const std::string& threads_names) {
  if (groups & kModelFlags) {
    app->add_option("-m,--model", o->model, "GGUF file or Hugging Face directory")->required();
    app->add_option(threads_names, o->threads, "forward-pass threads (default: the physical cores)");
    app->add_flag("--pin-threads,!--no-pin-threads", o->pin_threads,
                  "run each forward-pass thread on a CPU of its own, so that another busy process shares a core "
                  "with one of them, not two (default: on when there are enough CPUs)");
  }
  if (groups & kMemoryFlags) {
    app->add_option("--kv-cache-memory", o->kv_cache_memory,
                    std::string("KV cache size: bytes with a unit (2GiB, 512MiB) or a fraction of RAM (0.3)") +
                        (o->kv_cache_memory.empty()
                             ? fmt::format(" (default: room for every running sequence at full length, at most "
                                           "{:.0f}% of the memory available beside the model)",
                                           100 * engine::kDefaultKvFraction)
                             : std::string()))
        ->capture_default_str();
    app->add_option("--block-size", o->block_size, "tokens per KV block")->capture_default_str();
    app->add_option("--max-num-batched-tokens", o->max_num_batched_tokens, "tokens computed per engine step")
        ->capture_default_str();
  }
  if (groups & (kMemoryFlags | kKvDtypeFlags)) {
    app->add_option("--kv-dtype", o->kv_dtype,
                    "KV cache element type: f32, f16 (half the memory) or q8_0 (32 int8 values and an f16 scale per "
                    "block: 0.27 of it; head_dim a multiple of 32)")
        ->capture_default_str();
  }
  if (groups & kBatchFlags) {
    app->add_option("--max-num-seqs", o->max_num_seqs, "requests running at once")->capture_default_str();
  }
  if (groups & kPrefixCacheFlags) {
    app->add_flag_function(
        "--no-prefix-caching", [o](int64_t) { o->enable_prefix_caching = false; },
        "do not share KV blocks between prompts");
  }
  if (groups & kSpeculativeFlags) {
    app->add_option("--speculative", o->speculative, "speculative decoding: ngram (prompt lookup) or draft (a model)");
    app->add_option("--num-speculative-tokens", o->num_speculative_tokens, "draft tokens per step")
        ->capture_default_str();
    app->add_option("--draft-model", o->draft_model, "the draft model for --speculative draft (the target's tokenizer)");
  }
  if (groups & kLoraFlags) {
    app->add_option("--lora", o->loras,
                    "NAME=DIR: serve the LoRA adapter in DIR (PEFT format: adapter_config.json, "
                    "adapter_model.safetensors, as koi train export --adapter writes) as model NAME; repeatable");
    app->add_option("--max-loras", o->max_loras, "LoRA adapters resident in memory at once (least recently used evicted)")
        ->capture_default_str();
    app->add_option("--lora-memory-mib", o->lora_memory_mib, "memory for resident LoRA adapter weights, in MiB")
        ->capture_default_str();
  }
}

}  // namespace koi::cli
