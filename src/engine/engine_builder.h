// The engine builder: the one way model files and engine flags become a running Engine, used
// by `koi serve`, `koi generate`, `koi eval`, `koi bench offline`, `koi bench model` and
// `koi bench serve --in-process` (cli/engine_flags.h registers the flags, one field each).
//
// Two stages, so that a command can look at the model between them (generate encodes and
// checks its prompt; bench offline builds one engine per concurrency level):
//   load_engine_models()  checks the options and loads the model (and the draft model);
//   start_engine()        (re)builds the runners (KV memory, thread pools) and the Engine.
// build_engine() does both.
//
// Ownership: an EngineHost owns everything it holds; the Engine points into the host (its
// runners, the tokenizer), so the host stays on the heap and outlives any use of the Engine.
// The Engine is used by one thread at a time. Every failure is a Status whose message names
// the flag or file at fault; no option value reaches a KOI_CHECK.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "engine/engine.h"
#include "engine/llama_runner.h"
#include "engine/loaded_model.h"
#include "engine/lora_pool.h"

namespace koi::engine {

// One field per flag (the flag in the comment) unless marked otherwise.
struct EngineOptions {
  std::string model;                  // --model: a GGUF file or a Hugging Face directory
  std::string kv_cache_memory;        // --kv-cache-memory (kv_memory.h); "": room for
                                      // max_num_seqs sequences of max_model_len tokens, within
                                      // a share of the available memory (default_kv_cache_memory)
  int max_num_seqs = 256;             // --max-num-seqs
  int max_num_batched_tokens = 2048;  // --max-num-batched-tokens
  int block_size = 16;                // --block-size: tokens per KV block
  std::string kv_dtype = "f32";       // --kv-dtype: f32, f16 or q8_0 (kv_memory.h parse_kv_dtype)
  bool enable_prefix_caching = true;  // cleared by --no-prefix-caching
  std::string speculative;            // --speculative: "" (off), "ngram" or "draft"
  int num_speculative_tokens = 4;     // --num-speculative-tokens
  std::string draft_model;            // --draft-model, for --speculative draft
  int threads = 0;                    // --threads: forward-pass threads; 0: the physical cores
  bool pin_threads = true;            // cleared by --no-pin-threads: each forward-pass thread on
                                      // a CPU of its own (ThreadPool::Placement::kPinned)
  uint64_t seed = 0;                  // --seed where a command has one: seeds requests that bring none
  std::vector<std::string> loras;     // --lora NAME=DIR, repeatable: PEFT adapters served by name
  int max_loras = 8;                  // --max-loras: adapters resident at once
  int lora_memory_mib = 1024;         // --lora-memory-mib: their weights at most
  // Not flags: set by commands.
  int max_model_len = 0;              // tokens per sequence at most; 0: the model's context
  bool detokenize = true;             // outputs carry text and stop strings apply
  bool publish_kv_events = false;     // the engine logs prefix-cache changes (koi serve --kv-events)
  bool release_window_kv = true;      // sliding-window layers keep only their window's KV blocks
                                      // (false: every block, one table; koi serve's PD roles, whose
                                      // transfer carries one table)
};

// Range-checks every field; the message names the flag, its accepted range and the value.
Status check(const EngineOptions& options);

// Where the forward-pass threads run: pinned unless --no-pin-threads.
inline ThreadPool::Placement thread_placement(const EngineOptions& options) {
  return options.pin_threads ? ThreadPool::Placement::kPinned : ThreadPool::Placement::kFloat;
}

// NAME and DIR of one --lora value "NAME=DIR".
Result<std::pair<std::string, std::string>> parse_lora_flag(const std::string& value);

struct EngineHost {
  explicit EngineHost(LoadedModel m) : model(std::move(m)) {}
  LoadedModel model;
  std::optional<LoadedModel> draft;             // set for --speculative draft
  std::unique_ptr<LoraPool> loras;              // the LoRA adapters (--lora and those added later)
  std::unique_ptr<LlamaRunner> runner;          // null before start_engine()
  std::unique_ptr<LlamaRunner> draft_runner;    // set with `draft`
  std::unique_ptr<Engine> engine;               // null before start_engine()
};

// check(options), then loads options.model (and options.draft_model for --speculative draft)
// and every --lora adapter into the host's LoraPool.
Result<std::unique_ptr<EngineHost>> load_engine_models(const EngineOptions& options);
// Builds the runners and the Engine from the host's models, replacing any built before
// (which must not be in use). KV memory: options.kv_cache_memory for the target, or the
// machine-dependent default (logged with its reason at info level); the draft
// model gets as many blocks of its own (smaller) size.
Status start_engine(EngineHost& host, const EngineOptions& options);
// load_engine_models() then start_engine().
Result<std::unique_ptr<EngineHost>> build_engine(const EngineOptions& options);

}  // namespace koi::engine
