#include "serve/engine_host.h"

#include <algorithm>

namespace koi::serve {

Result<std::unique_ptr<EngineHost>> make_engine_host(const std::string& model_path, const EngineOptions& o) {
  KOI_ASSIGN_OR_RETURN(engine::LoadedModel loaded, engine::load_model(model_path));
  auto host = std::make_unique<EngineHost>(std::move(loaded));
  const model::LlamaModel& m = *host->loaded.model;
  const tokenizer::Tokenizer& tok = host->loaded.tokenizer;
  constexpr int kBlockSize = 16;
  const int64_t block_bytes = m.kv_shape(1, kBlockSize).bytes_per_block();
  const int64_t full_blocks = int64_t{o.max_num_seqs} * ((m.config().max_seq_len + kBlockSize - 1) / kBlockSize);
  const int64_t budget_blocks = static_cast<int64_t>(o.kv_cache_gb * (1 << 30)) / block_bytes;
  if (o.kv_cache_gb > 0 && budget_blocks < 1) return Status::invalid_argument("--kv-cache-gb is too small for one KV block");

  engine::EngineConfig ec;
  ec.block_size = kBlockSize;
  ec.num_kv_blocks = static_cast<int>(std::min<int64_t>(o.kv_cache_gb > 0 ? budget_blocks : full_blocks, 1 << 24));
  ec.max_num_seqs = o.max_num_seqs;
  ec.max_num_batched_tokens = o.max_num_batched_tokens;
  ec.enable_prefix_caching = o.prefix_caching;
  ec.seed = o.seed;
  ec.eos_token_ids = tok.spec().eog_ids;
  if (tok.eos_id()) ec.eos_token_ids.push_back(*tok.eos_id());
  host->runner = std::make_unique<engine::LlamaRunner>(*host->loaded.model, ec.num_kv_blocks, kBlockSize, o.threads);
  host->engine = std::make_unique<engine::Engine>(ec, *host->runner);
  return host;
}

}  // namespace koi::serve
