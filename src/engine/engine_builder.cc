#include "engine/engine_builder.h"

#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "base/logging.h"
#include "engine/kv_memory.h"

namespace koi::engine {

namespace {

constexpr int kMaxBlockSize = 1024;
constexpr int kMaxSpeculativeTokens = 64;
constexpr int kMaxThreads = 1024;
constexpr int64_t kMaxKvBlocks = int64_t{1} << 24;  // the default sizing stops here

Status at_least(std::string_view flag, int64_t value, int64_t lo) {
  if (value >= lo) return ok_status();
  return Status::invalid_argument(fmt::format("{} must be at least {}, got {}", flag, lo, value));
}

Status between(std::string_view flag, int64_t value, int64_t lo, int64_t hi) {
  if (value >= lo && value <= hi) return ok_status();
  return Status::invalid_argument(fmt::format("{} must be between {} and {}, got {}", flag, lo, hi, value));
}

// Bytes of the tensors the forward pass reads (a tied output matrix counted once): what the
// weights occupy once resident, mapped or owned.
int64_t weight_bytes(const model::ModelWeights& w) {
  std::set<const void*> seen;
  int64_t bytes = 0;
  const auto add = [&](const TensorView& t) {
    if (t.data != nullptr && seen.insert(t.data).second) bytes += t.num_bytes();
  };
  add(w.token_embd);
  add(w.output_norm);
  add(w.output);
  for (const model::LayerWeights& l : w.layers) {
    for (const TensorView* t : {&l.attn_norm, &l.wq, &l.wk, &l.wv, &l.wo, &l.bq, &l.bk, &l.bv, &l.attn_q_norm,
                                &l.attn_k_norm, &l.attn_post_norm, &l.ffn_norm, &l.ffn_post_norm, &l.w_gate, &l.w_up, &l.w_down}) {
      add(*t);
    }
  }
  return bytes;
}

}  // namespace

Result<std::pair<std::string, std::string>> parse_lora_flag(const std::string& value) {
  const size_t eq = value.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == value.size()) {
    return Status::invalid_argument(
        fmt::format("--lora must be NAME=DIR (the name requests give as \"model\", a PEFT adapter directory), got '{}'",
                    value));
  }
  return std::make_pair(value.substr(0, eq), value.substr(eq + 1));
}

namespace {

Status check_loras(const EngineOptions& o) {
  KOI_RETURN_IF_ERROR(between("--max-loras", o.max_loras, 1, 4096));
  KOI_RETURN_IF_ERROR(between("--lora-memory-mib", o.lora_memory_mib, 1, int64_t{1} << 24));
  std::set<std::string> names;
  for (const std::string& value : o.loras) {
    KOI_ASSIGN_OR_RETURN(auto name_dir, parse_lora_flag(value));
    if (!names.insert(name_dir.first).second) {
      return Status::invalid_argument(fmt::format("--lora: the name '{}' is given twice", name_dir.first));
    }
  }
  return ok_status();
}

}  // namespace

Status check(const EngineOptions& o) {
  if (o.model.empty()) return Status::invalid_argument("--model is required: a GGUF file or a Hugging Face directory");
  KOI_RETURN_IF_ERROR(check_loras(o));
  KOI_RETURN_IF_ERROR(at_least("--max-num-seqs", o.max_num_seqs, 1));
  KOI_RETURN_IF_ERROR(at_least("--max-num-batched-tokens", o.max_num_batched_tokens, 1));
  KOI_RETURN_IF_ERROR(between("--block-size", o.block_size, 1, kMaxBlockSize));
  KOI_RETURN_IF_ERROR(between("--threads", o.threads, 0, kMaxThreads));
  KOI_RETURN_IF_ERROR(at_least("max_model_len", o.max_model_len, 0));
  KOI_RETURN_IF_ERROR(parse_kv_dtype(o.kv_dtype).status());
  if (!o.kv_cache_memory.empty()) {
    KOI_RETURN_IF_ERROR(parse_kv_cache_memory(o.kv_cache_memory, total_ram_bytes()).status());
  }
  if (o.speculative.empty()) {
    if (!o.draft_model.empty()) return Status::invalid_argument("--draft-model is used only with --speculative draft");
    return ok_status();
  }
  const Result<SpeculativeMethod> method = parse_speculative_method(o.speculative);
  if (!method.ok()) return method.status().with_prefix("--speculative");
  KOI_RETURN_IF_ERROR(between("--num-speculative-tokens", o.num_speculative_tokens, 1, kMaxSpeculativeTokens));
  if (o.max_num_batched_tokens <= o.num_speculative_tokens) {
    return Status::invalid_argument(fmt::format(
        "--max-num-batched-tokens ({}) must be larger than --num-speculative-tokens ({}): a step verifies a token "
        "and its drafts together",
        o.max_num_batched_tokens, o.num_speculative_tokens));
  }
  if (*method == SpeculativeMethod::kDraftModel && o.draft_model.empty()) {
    return Status::invalid_argument("--speculative draft needs --draft-model PATH (a model with the target's tokenizer)");
  }
  if (*method != SpeculativeMethod::kDraftModel && !o.draft_model.empty()) {
    return Status::invalid_argument("--draft-model is used only with --speculative draft");
  }
  return ok_status();
}

Result<std::unique_ptr<EngineHost>> load_engine_models(const EngineOptions& o) {
  KOI_RETURN_IF_ERROR(check(o));
  KOI_ASSIGN_OR_RETURN(LoadedModel loaded, load_model(o.model));
  auto host = std::make_unique<EngineHost>(std::move(loaded));
  LoraPoolOptions pool;
  pool.max_loras = o.max_loras;
  pool.memory_bytes = int64_t{o.lora_memory_mib} << 20;
  host->loras = std::make_unique<LoraPool>(host->model.model->config(), pool);
  for (const std::string& value : o.loras) {
    KOI_ASSIGN_OR_RETURN(auto name_dir, parse_lora_flag(value));
    KOI_RETURN_IF_ERROR(host->loras->add(name_dir.first, name_dir.second).with_prefix("--lora " + value));
  }
  if (!o.draft_model.empty()) {
    KOI_ASSIGN_OR_RETURN(LoadedModel draft, load_model(o.draft_model));
    host->draft = std::move(draft);
  }
  return host;
}

Status start_engine(EngineHost& host, const EngineOptions& o) {
  KOI_RETURN_IF_ERROR(check(o));
  if (!o.draft_model.empty() != host.draft.has_value()) {
    return Status::invalid_argument("start_engine: the options name a different draft model than was loaded");
  }
  host.engine.reset();  // it points into the runners
  host.draft_runner.reset();
  host.runner.reset();

  const model::LlamaModel& m = *host.model.model;
  const int max_len = o.max_model_len > 0 ? std::min(o.max_model_len, m.config().max_seq_len) : m.config().max_seq_len;
  KOI_ASSIGN_OR_RETURN(const DType kv_dtype, parse_kv_dtype(o.kv_dtype));
  KOI_RETURN_IF_ERROR(model::check_kv_dtype(kv_dtype, m.config().head_dim));
  if (host.draft) {
    KOI_RETURN_IF_ERROR(model::check_kv_dtype(kv_dtype, host.draft->model->config().head_dim)
                            .with_prefix("--draft-model " + o.draft_model));
  }
  const model::KvCacheShape shape = m.kv_shape(1, o.block_size, kv_dtype, o.release_window_kv);
  const int64_t block_bytes = shape.bytes_per_block();
  int num_blocks = 0;
  if (o.kv_cache_memory.empty()) {
    // From the machine and the model (kv_memory.h); a draft model's blocks and weights count too.
    int64_t blocks_bytes = block_bytes, model_bytes = weight_bytes(m.weights());
    if (host.draft) {
      blocks_bytes += host.draft->model->kv_shape(1, o.block_size, kv_dtype).bytes_per_block();
      model_bytes += weight_bytes(host.draft->model->weights());
    }
    const int64_t per_seq = shape.blocks_for_sequence(max_len, o.max_num_batched_tokens);
    const KvDefault kv = default_kv_cache_memory(available_ram_bytes(), model_bytes, per_seq * blocks_bytes,
                                                 o.max_num_seqs, max_len);
    num_blocks = static_cast<int>(std::min(kv.bytes / blocks_bytes, kMaxKvBlocks));
    log::info("KV cache memory by default: {:.2f} GiB, {}; --kv-cache-memory sets it",
              static_cast<double>(int64_t{num_blocks} * blocks_bytes) / (1 << 30), kv.reason);
  } else {
    KOI_ASSIGN_OR_RETURN(int64_t bytes, parse_kv_cache_memory(o.kv_cache_memory, total_ram_bytes()));
    KOI_ASSIGN_OR_RETURN(num_blocks, kv_blocks_for_memory(bytes, block_bytes));
  }
  // The KV cache lives in RAM and in a long run every block gets written: more than the machine
  // has can only fail (or be killed) later.
  const int64_t kv_bytes = int64_t{num_blocks} * block_bytes;
  if (kv_bytes > total_ram_bytes()) {
    return Status::invalid_argument(fmt::format(
        "the KV cache would take {:.1f} GiB ({} blocks of {} tokens), more than this machine's {:.1f} GiB of RAM; give "
        "--kv-cache-memory a smaller size or lower --max-num-seqs",
        static_cast<double>(kv_bytes) / (1 << 30), num_blocks, o.block_size,
        static_cast<double>(total_ram_bytes()) / (1 << 30)));
  }

  log::info("KV cache: {} blocks of {} tokens in {}, {} bytes per token{}", num_blocks, o.block_size,
            dtype_name(kv_dtype), block_bytes / o.block_size,
            shape.split() ? fmt::format(" (a block holds {} of the {} layers: sliding-window layers keep only their "
                                        "{}-token window, in blocks of their own)",
                                        shape.page_layers(), shape.n_layers, shape.window)
                          : std::string());

  EngineConfig ec;
  ec.block_size = o.block_size;
  ec.num_kv_blocks = num_blocks;
  ec.max_num_seqs = o.max_num_seqs;
  ec.max_num_batched_tokens = o.max_num_batched_tokens;
  ec.max_model_len = max_len;
  ec.enable_prefix_caching = o.enable_prefix_caching;
  ec.seed = o.seed;
  const tokenizer::Tokenizer& tok = host.model.tokenizer;
  ec.eos_token_ids = tok.spec().eog_ids;
  if (tok.eos_id()) ec.eos_token_ids.push_back(*tok.eos_id());
  if (o.detokenize) ec.tokenizer = &tok;
  ec.publish_kv_events = o.publish_kv_events;

  const ThreadPool::Placement placement = thread_placement(o);
  host.runner = std::make_unique<LlamaRunner>(*host.model.model, num_blocks, o.block_size, o.threads, kv_dtype,
                                              o.release_window_kv, placement);
  if (!o.speculative.empty()) {
    KOI_ASSIGN_OR_RETURN(ec.speculative.method, parse_speculative_method(o.speculative));
    ec.speculative.num_speculative_tokens = o.num_speculative_tokens;
    if (host.draft) {
      host.draft_runner =
          std::make_unique<LlamaRunner>(*host.draft->model, num_blocks, o.block_size, o.threads, kv_dtype, false,
                                        placement);
      ec.speculative.draft_runner = host.draft_runner.get();
      ec.speculative.draft_num_kv_blocks = num_blocks;
    }
    KOI_RETURN_IF_ERROR(validate(ec.speculative, *host.runner).with_prefix("--draft-model " + o.draft_model));
  }
  host.engine = std::make_unique<Engine>(std::move(ec), *host.runner);
  return ok_status();
}

Result<std::unique_ptr<EngineHost>> build_engine(const EngineOptions& o) {
  KOI_ASSIGN_OR_RETURN(std::unique_ptr<EngineHost> host, load_engine_models(o));
  KOI_RETURN_IF_ERROR(start_engine(*host, o));
  return host;
}

}  // namespace koi::engine
