// EngineHost: a loaded model with its runner and Engine, built the way `koi serve` builds
// them (also used by `koi bench serve --in-process` so both measure the same engine).
// Owns everything; the Engine is used by one thread at a time. Loading failures come back
// as a Status naming the file or flag.
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "engine/engine.h"
#include "engine/llama_runner.h"
#include "engine/loaded_model.h"

namespace koi::serve {

struct EngineOptions {
  int max_num_seqs = 256;
  int max_num_batched_tokens = 2048;
  double kv_cache_gb = 0.0;  // 0: room for every running sequence at full length
  int threads = 0;           // forward-pass threads; 0: the physical cores
  uint64_t seed = 0;
  bool prefix_caching = true;
};

struct EngineHost {
  explicit EngineHost(engine::LoadedModel m) : loaded(std::move(m)) {}
  engine::LoadedModel loaded;
  std::unique_ptr<engine::LlamaRunner> runner;
  std::unique_ptr<engine::Engine> engine;
};

Result<std::unique_ptr<EngineHost>> make_engine_host(const std::string& model_path, const EngineOptions& options);

}  // namespace koi::serve
