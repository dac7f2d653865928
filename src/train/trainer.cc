#include "train/trainer.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>

#include "base/file.h"
#include "base/metrics.h"
#include "base/thread_pool.h"
#include "train/checkpoint.h"
#include "tokenizer/load.h"
#include "tokenizer/tokenizer.h"
#include "train/data.h"
#include "train/data_parallel.h"
#include "train/finetune.h"
#include "train/flops.h"
#include "train/llama_train.h"
#include "train/parallel_layout.h"
#include "train/parallel_strategy.h"
#include "train/timed_communicator.h"
#include "train/tensor_parallel.h"
#include "train/train_metrics.h"
#include "train/zero.h"

namespace koi::train {
namespace {

struct Field {
  const char* key;
  std::function<void(const YAML::Node&)> set;
};

template <typename T>
Field field(const char* key, T* dst) {
  return {key, [dst](const YAML::Node& n) { *dst = n.as<T>(); }};
}

// Reads root[section] into the fields; unknown keys and values of the wrong type are
// errors naming "file: section.key".
Status read_section(const YAML::Node& root, const std::string& section, const std::vector<Field>& fields,
                    const std::string& file_name) {
  const YAML::Node node = root[section];
  if (!node) return ok_status();
  if (!node.IsMap()) return Status::invalid_argument(file_name + ": '" + section + "' must be a mapping");
  for (const auto& kv : node) {
    const std::string key = kv.first.as<std::string>();
    auto it = std::find_if(fields.begin(), fields.end(), [&](const Field& f) { return key == f.key; });
    if (it == fields.end()) {
      std::string known;
      for (const Field& f : fields) known += std::string(known.empty() ? "" : ", ") + f.key;
      return Status::invalid_argument(file_name + ": unknown key " + section + "." + key + " (known: " + known + ")");
    }
    try {
      it->set(kv.second);
    } catch (const YAML::Exception&) {
      return Status::invalid_argument(file_name + ": " + section + "." + key + " has a value of the wrong type");
    }
  }
  return ok_status();
}

void append_line(const std::string& path, const std::string& line) {
  if (FILE* f = std::fopen(path.c_str(), "a")) {
    std::fputs((line + "\n").c_str(), f);
    std::fclose(f);
  }
}

std::string format_duration(double seconds) {
  const long s = std::lround(std::max(0.0, seconds));
  char buf[32];
  if (s >= 3600) {
    std::snprintf(buf, sizeof(buf), "%ldh%02ldm", s / 3600, s / 60 % 60);
  } else {
    std::snprintf(buf, sizeof(buf), "%ldm%02lds", s / 60, s % 60);
  }
  return buf;
}

// "a.txt, b.txt": the corpus in error messages.
std::string corpus_name(const TrainConfig& c) {
  std::string name;
  for (const std::string& path : c.text_paths) name += (name.empty() ? "" : ", ") + path;
  return name;
}

// The vocabulary size of the run's tokenizer: the characters', or the tokenizer's.
int tokenizer_vocab(const TrainState& state) {
  if (state.tokenizer) return static_cast<int>(state.tokenizer->tokens.size());
  return CharVocab::from_chars(state.chars).n_vocab();
}

// The corpus in tokens of the run's tokenizer (the characters, a tokenizer file, the
// fine-tuned model's): the shards of the shard directory when they were made from these
// texts with this tokenizer, else tokenized now by rank 0 while the other ranks wait.
Result<TokenShards> corpus_tokens(const TrainConfig& c, const TrainState& state, const std::vector<MappedFile>& texts,
                                  Communicator& comm) {
  const std::string dir = c.shards_dir.empty() ? path_join(c.out_dir, "data") : c.shards_dir;
  std::vector<std::string_view> views;
  for (const MappedFile& text : texts) views.push_back(text.view());
  std::string identity;
  EncodeFn encode;
  if (!state.tokenizer) {
    CharVocab vocab = CharVocab::from_chars(state.chars);
    identity = tokenizer_identity(vocab);
    encode = [vocab](std::string_view text, bool) { return vocab.encode(text); };
  } else {
    // A chunk that continues a text gets no SentencePiece space prefix, as in one encode().
    tokenizer::TokenizerSpec continued = tokenizer::continuation_spec(*state.tokenizer);
    KOI_ASSIGN_OR_RETURN(tokenizer::Tokenizer first, tokenizer::Tokenizer::create(*state.tokenizer));
    KOI_ASSIGN_OR_RETURN(tokenizer::Tokenizer rest, tokenizer::Tokenizer::create(std::move(continued)));
    identity = tokenizer_identity(*state.tokenizer);
    encode = [first, rest](std::string_view text, bool file_start) -> Result<std::vector<int32_t>> {
      return (file_start ? first : rest).encode(text, /*add_special=*/false, /*parse_special=*/false);
    };
  }
  const uint64_t key = shard_key(views, identity);
  if (comm.rank() == 0) {
    Result<TokenShards> cached = TokenShards::open(dir, key);
    if (!cached.ok() && cached.status().code() != StatusCode::kNotFound) return cached.status();
    if (!cached.ok()) {
      ShardOptions options;
      options.shard_tokens = c.shard_tokens;
      KOI_RETURN_IF_ERROR(write_token_shards(dir, key, texts, encode, tokenizer_vocab(state), options));
    }
  }
  KOI_RETURN_IF_ERROR(comm.barrier("barrier after tokenizing the corpus"));
  return TokenShards::open(dir, key);
}

// Mean loss over eval_iters batches of a fixed sequence (the same batches at every call);
// each data-parallel rank computes its part of every batch (dp: the mesh's dp group; with a
// pipeline, every stage of the dp rank runs its layers on that part and the last has the loss,
// summed over the stages by pp).
Result<float> estimate_loss(LlamaTrain& model, Pipeline* pipeline, Communicator& dp, Communicator& pp,
                            TokenRange tokens, const TrainConfig& c, int T, uint64_t seed) {
  BatchLoader loader(tokens, c.batch_size, T, seed);
  std::vector<int32_t> inputs(static_cast<size_t>(c.batch_size) * T), targets(inputs.size());
  const int rank_batch = c.batch_size / dp.size();
  const int64_t first = int64_t{dp.rank()} * rank_batch * T;  // this rank's first token of a batch
  double sum = 0.0;
  for (int i = 0; i < c.eval_iters; ++i) {
    loader.next(inputs.data(), targets.data());
    if (pipeline) {
      KOI_ASSIGN_OR_RETURN(const double part,
                           pipeline->eval_batch(inputs.data() + first, targets.data() + first, rank_batch, T));
      sum += part;
      continue;
    }
    sum += model.forward(inputs.data() + first, targets.data() + first, rank_batch, T) * rank_batch;
    KOI_RETURN_IF_ERROR(model.parallel_status());
  }
  KOI_RETURN_IF_ERROR(dp.allreduce_sum(&sum, 1, "allreduce eval loss"));
  if (pipeline) KOI_RETURN_IF_ERROR(pp.allreduce_sum(&sum, 1, "allreduce eval loss over the stages"));
  return static_cast<float>(sum / c.batch_size / std::max(1, c.eval_iters));
}

// ZeRO-2/3: every rank's memory over the steps (zero.h), printed by rank 0 and appended to
// metrics.jsonl as one {"memory_rank":R,...} line per rank.
Status report_memory(const ShardedDataParallel& zero, Communicator& comm, const std::string& metrics) {
  const ZeroMemory m = zero.memory();
  constexpr int kFields = 5;
  std::vector<double> all(static_cast<size_t>(kFields * comm.size()), 0.0);
  double* mine = all.data() + kFields * comm.rank();
  mine[0] = static_cast<double>(m.own), mine[1] = static_cast<double>(m.working_set);
  mine[2] = static_cast<double>(m.tracked_peak), mine[3] = static_cast<double>(m.peak_rss);
  mine[4] = static_cast<double>(m.one_process);
  KOI_RETURN_IF_ERROR(comm.allreduce_sum(all.data(), static_cast<int64_t>(all.size()), "allreduce memory report"));
  if (comm.rank() != 0) return ok_status();
  std::fprintf(stderr, "memory per rank: %s\n", m.arithmetic.c_str());
  for (int r = 0; r < comm.size(); ++r) {
    const double* v = all.data() + kFields * r;
    std::fprintf(stderr,
                 "memory rank %d: tracked peak %.0f B <= own %.0f B + working set %.0f B = %.0f B (one process: %.0f "
                 "B); peak RSS %.1f MiB\n",
                 r, v[2], v[0], v[1], v[0] + v[1], v[4], v[3] / (1 << 20));
    append_line(metrics, fmt::format("{{\"memory_rank\":{},\"own_bytes\":{:.0f},\"working_set_bytes\":{:.0f},"
                                     "\"tracked_peak_bytes\":{:.0f},\"peak_rss_bytes\":{:.0f},"
                                     "\"one_process_bytes\":{:.0f}}}",
                                     r, v[0], v[1], v[2], v[3], v[4]));
  }
  return ok_status();
}

// data.tokenizer and the fine-tuning keys. model.init_from takes the place of the shape keys
// and brings its tokenizer (data.tokenizer "model"); a new model takes the characters
// ("char") or a tokenizer path; LoRA needs a model to adapt.
Status check_finetune_keys(const YAML::Node& root, const std::string& tokenizer,
                           const std::vector<std::string>& lora_targets, const std::string& file_name, TrainConfig* c) {
  if (!lora_targets.empty()) {
    c->lora.targets.clear();
    for (const std::string& name : lora_targets) {
      Result<LoraTarget> t = lora_target_from_name(name);
      if (!t.ok()) return t.status().with_prefix(file_name + ": train.lora_targets");
      c->lora.targets.push_back(*t);
    }
  }
  if (c->init_from.empty()) {
    if (tokenizer == "model") {
      return Status::invalid_argument(file_name +
                                      ": data.tokenizer 'model' needs model.init_from; use char or the path of a "
                                      "tokenizer (a directory with tokenizer.json, a .gguf, a tokenizer.bin)");
    }
    if (tokenizer != "char") c->tokenizer_path = tokenizer;
    if (c->lora.rank != 0) {
      return Status::invalid_argument(file_name + ": train.lora_rank needs model.init_from (the model to adapt)");
    }
    return ok_status();
  }
  if (root["model"].size() != 1) {
    return Status::invalid_argument(file_name + ": model.init_from takes the shape from that model; remove the other " +
                                    "model keys");
  }
  if (tokenizer != "model") {
    return Status::invalid_argument(file_name + ": data.tokenizer must be 'model' (the tokenizer of model.init_from) " +
                                    "when fine-tuning");
  }
  if (c->lora.rank < 0) return Status::invalid_argument(file_name + ": train.lora_rank must be 0 (off) or more");
  return ok_status();
}

// Fails unless every rank has rank 0's values: the same model size and resume point, so
// that no rank trains something else silently.
Status check_same_run(Communicator& comm, const std::vector<int64_t>& mine) {
  std::vector<int64_t> root = mine;
  KOI_RETURN_IF_ERROR(comm.broadcast(root.data(), static_cast<int64_t>(root.size() * sizeof(int64_t)), 0,
                                     "broadcast run fingerprint"));
  if (root == mine) return ok_status();
  return Status::failed_precondition(fmt::format(
      "rank {} has {} parameters and starts at step {} (loader position {}), rank 0 has {}, {} and {}; every rank "
      "must run the same recipe on the same run directory",
      comm.rank(), mine[0], mine[1], mine[2], root[0], root[1], root[2]));
}

// The step log's " | bubble 0.21 (ideal 0.20)" of a pipeline (empty without one); sets the
// bubble gauges.
std::string pipeline_log(const std::vector<double>& stage_bubble, const PipelineConfig& p, TrainMetrics& metrics) {
  if (stage_bubble.empty()) return "";
  double mean = 0.0;
  for (double b : stage_bubble) mean += b / static_cast<double>(stage_bubble.size());
  const double ideal = theoretical_bubble(p.stages, p.micro_batches);
  metrics.pipeline_bubble.set(mean);
  metrics.pipeline_bubble_theory.set(ideal);
  return fmt::format(" | bubble {:.2f} (ideal {:.2f})", mean, ideal);
}

// metrics.jsonl fields of a pipeline step: the mean bubble, the ideal one, every stage's.
std::string pipeline_json(const std::vector<double>& stage_bubble, const PipelineConfig& p) {
  double mean = 0.0;
  std::string stages;
  for (size_t s = 0; s < stage_bubble.size(); ++s) {
    mean += stage_bubble[s] / static_cast<double>(stage_bubble.size());
    stages += fmt::format("{}{:.4f}", s ? "," : "", stage_bubble[s]);
  }
  return fmt::format(",\"bubble\":{:.4f},\"bubble_ideal\":{:.4f},\"stage_bubble\":[{}]", mean,
                     theoretical_bubble(p.stages, p.micro_batches), stages);
}

}  // namespace

Status set_pipeline_config(std::string_view schedule, PipelineConfig* p) {
  KOI_ASSIGN_OR_RETURN(p->schedule, pipeline_schedule_from_name(schedule));
  if (p->stages < 1) return Status::invalid_argument("pp (pipeline stages) must be at least 1");
  if (p->micro_batches < 1) return Status::invalid_argument("pp_microbatches must be at least 1");
  if (p->stages == 1 && p->micro_batches > 1) {
    return Status::invalid_argument("pp_microbatches needs pp > 1 (without a pipeline, use grad_accum)");
  }
  if (p->stages == 1 && p->schedule != PipelineSchedule::k1F1B) {
    return Status::invalid_argument("pp_schedule " + std::string(schedule) +
                                    " orders a pipeline's micro-batches and needs pp > 1; leave it out without --pp");
  }
  return ok_status();
}

Result<TrainConfig> parse_train_config(const std::string& yaml_text, const std::string& file_name) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    return Status::invalid_argument(file_name + ": not valid YAML: " + e.what());
  }
  if (!root.IsMap()) return Status::invalid_argument(file_name + ": expected sections model, data and train");
  TrainConfig c;
  model::ModelConfig& m = c.model;
  m.arch = "llama";
  m.rope_style = kernels::RopeStyle::kNeox;
  m.n_kv_heads = 0;
  std::string tokenizer;
  std::vector<std::string> lora_targets;
  std::string pp_schedule = pipeline_schedule_name(c.pipeline.schedule);
  KOI_RETURN_IF_ERROR(read_section(root, "model",
                                   {field("dim", &m.dim), field("layers", &m.n_layers), field("heads", &m.n_heads),
                                    field("kv_heads", &m.n_kv_heads), field("ffn_dim", &m.ffn_dim),
                                    field("context", &m.max_seq_len), field("tied_embeddings", &m.tied_embeddings),
                                    field("qkv_bias", &m.qkv_bias), field("rope_theta", &m.rope_theta),
                                    field("norm_eps", &m.norm_eps), field("init_from", &c.init_from),
                                    field("experts", &m.moe.n_experts),
                                    field("experts_per_token", &m.moe.n_experts_used)},
                                   file_name));
  // data.text: one file or a list of them.
  const Field text{"text", [&c](const YAML::Node& n) {
                     c.text_paths = n.IsSequence() ? n.as<std::vector<std::string>>()
                                                   : std::vector<std::string>{n.as<std::string>()};
                   }};
  KOI_RETURN_IF_ERROR(read_section(root, "data",
                                   {text, field("tokenizer", &tokenizer), field("val_fraction", &c.val_fraction),
                                    field("shards", &c.shards_dir), field("shard_tokens", &c.shard_tokens)},
                                   file_name));
  KOI_RETURN_IF_ERROR(read_section(
      root, "train",
      {field("batch_size", &c.batch_size), field("seq_len", &c.seq_len), field("steps", &c.steps),
       field("grad_accum", &c.grad_accum), field("lr", &c.schedule.lr), field("min_lr", &c.schedule.min_lr),
       field("warmup_steps", &c.schedule.warmup_steps), field("decay_steps", &c.schedule.decay_steps),
       field("weight_decay", &c.adam.weight_decay), field("beta1", &c.adam.beta1), field("beta2", &c.adam.beta2),
       field("grad_clip", &c.grad_clip), field("seed", &c.seed), field("eval_interval", &c.eval_interval),
       field("eval_iters", &c.eval_iters), field("log_interval", &c.log_interval),
       field("checkpoint_interval", &c.checkpoint_interval), field("keep_checkpoints", &c.keep_checkpoints),
       field("lora_rank", &c.lora.rank), field("lora_alpha", &c.lora.alpha), field("lora_targets", &lora_targets),
       field("out", &c.out_dir), field("threads", &c.threads), field("zero", &c.zero_stage),
       field("overlap", &c.overlap), field("bucket_mb", &c.bucket_mb),
       field("moe_aux_loss_coef", &c.moe_aux_loss_coef), field("dp", &c.mesh.dp), field("tp", &c.mesh.tp),
       field("pp", &c.mesh.pp), field("ep", &c.mesh.ep), field("pp_microbatches", &c.pipeline.micro_batches),
       field("pp_schedule", &pp_schedule)},
      file_name));
  for (const auto& kv : root) {
    const std::string s = kv.first.as<std::string>();
    if (s != "model" && s != "data" && s != "train") {
      return Status::invalid_argument(file_name + ": unknown section '" + s + "' (known: model, data, train)");
    }
  }
  if (tokenizer.empty()) tokenizer = c.init_from.empty() ? "char" : "model";
  KOI_RETURN_IF_ERROR(check_finetune_keys(root, tokenizer, lora_targets, file_name, &c));
  if (m.n_kv_heads == 0) m.n_kv_heads = m.n_heads;
  if (m.moe.n_experts > 0) m.moe.expert_ffn_dim = m.ffn_dim;  // Mixtral-style: each expert is ffn_dim wide
  if (m.n_heads > 0) m.head_dim = m.dim / m.n_heads;
  if (c.seq_len == 0 && c.init_from.empty()) c.seq_len = m.max_seq_len;
  if (c.schedule.decay_steps == 0) c.schedule.decay_steps = c.steps;
  if (c.text_paths.empty()) return Status::invalid_argument(file_name + ": data.text (the corpus) is required");
  if (c.shard_tokens < 1) return Status::invalid_argument(file_name + ": data.shard_tokens must be at least 1");
  if (c.out_dir.empty()) return Status::invalid_argument(file_name + ": train.out (the run directory) is required");
  if (c.init_from.empty() && (c.seq_len > m.max_seq_len || c.seq_len < 1)) {
    return Status::invalid_argument(file_name + ": train.seq_len must be between 1 and model.context");
  }
  if (c.batch_size < 1 || c.grad_accum < 1 || c.steps < 1) {
    return Status::invalid_argument(file_name + ": train.batch_size, grad_accum and steps must be at least 1");
  }
  if (c.zero_stage < 0 || c.zero_stage > 3) {
    return Status::invalid_argument(file_name +
                                    ": train.zero must be 0 (plain data parallel), 1 (ZeRO-1: sharded AdamW state), 2 "
                                    "(ZeRO-2: and gradients) or 3 (ZeRO-3/FSDP: and weights)");
  }
  c.pipeline.stages = c.mesh.pp;
  KOI_RETURN_IF_ERROR(set_pipeline_config(pp_schedule, &c.pipeline).with_prefix(file_name + ": train"));
  if (!(c.bucket_mb > 0.0)) return Status::invalid_argument(file_name + ": train.bucket_mb must be positive");
  if (!(c.moe_aux_loss_coef >= 0.0f) || !std::isfinite(c.moe_aux_loss_coef)) {
    return Status::invalid_argument(file_name + ": train.moe_aux_loss_coef must be a finite number >= 0");
  }
  if (!(c.val_fraction > 0.0 && c.val_fraction < 1.0)) {
    return Status::invalid_argument(file_name + ": data.val_fraction must be between 0 and 1 (exclusive)");
  }
  return c;
}

// The run's starting weights and optimizer state in model (of the full config) and full:
// the fine-tuned model's, a random initialisation, or the checkpoint's.
Status initial_state(const TrainConfig& c, const std::optional<BaseModel>& base, const std::string& ckpt_dir,
                     LlamaTrain* model, AdamW* full) {
  if (ckpt_dir.empty() && base) return load_base_weights(*base, model);
  if (ckpt_dir.empty()) {
    model->init_random(c.seed);
    return ok_status();
  }
  return load_checkpoint(ckpt_dir, model, full);
}

// The model (this rank's part under tensor parallelism) and the optimizer state to load with
// DistributedAdamW::load_full_state, from initial_state on the full model (full_config): sliced
// under tp, except that a new model's shard is initialised alone (TensorParallel::init_random) and
// a checkpoint's is read tensor by tensor (load_checkpoint_sliced): only fine-tuning builds it whole.
// opt_state is sized for model's parameters.
Status load_initial_state(const TrainConfig& c, const std::optional<BaseModel>& base, const std::string& ckpt_dir,
                          const model::ModelConfig& full_config, const TensorParallel* tp, ThreadPool* pool,
                          LlamaTrain* model, AdamW* opt_state) {
  if (tp == nullptr) return initial_state(c, base, ckpt_dir, model, opt_state);
  if (ckpt_dir.empty() && !base) {  // a new model: only this rank's shard is made
    tp->init_random(c.seed, model->params().data());
    return ok_status();
  }
  if (!ckpt_dir.empty()) {  // each whole tensor sliced as it is read
    return load_checkpoint_sliced(
        ckpt_dir, tp->full_layout(), [tp](size_t i, const float* whole, float* shard) { tp->slice_tensor(i, whole, shard); },
        &model->params(), opt_state);
  }
  KOI_ASSIGN_OR_RETURN(LlamaTrain whole, LlamaTrain::create(full_config, pool));
  AdamW full(c.adam, tp->full_size());
  KOI_RETURN_IF_ERROR(initial_state(c, base, ckpt_dir, &whole, &full));
  tp->slice(whole.params().data(), model->params().data());
  opt_state->set_steps(full.steps());
  tp->slice(full.m().data(), opt_state->m().data());
  tp->slice(full.v().data(), opt_state->v().data());
  return ok_status();
}

// load_initial_state, then a resumed checkpoint's optimizer state to whichever holds it: opt,
// the pipeline's stage, or (for ZeRO-2/3, which is made later from the weights) *resumed.
Status load_initial_state(const TrainConfig& c, const std::optional<BaseModel>& base, const std::string& ckpt_dir,
                          const model::ModelConfig& full_config, const TensorParallel* tp, ThreadPool* pool,
                          LlamaTrain* model, DistributedAdamW* opt, Pipeline* pipeline, std::optional<AdamW>* resumed) {
  AdamW opt_state(c.adam, static_cast<int64_t>(model->trainable_params().size()));
  KOI_RETURN_IF_ERROR(load_initial_state(c, base, ckpt_dir, full_config, tp, pool, model, &opt_state));
  if (ckpt_dir.empty()) return ok_status();
  if (opt != nullptr) {
    opt->load_full_state(opt_state);
  } else if (pipeline != nullptr) {
    pipeline->load_full_state(opt_state);
  } else {
    resumed->emplace(std::move(opt_state));
  }
  return ok_status();
}

// ZeRO-2/3 over `data` from the model's weights (and a resumed checkpoint's optimizer state),
// or null.
std::unique_ptr<ShardedDataParallel> create_zero(const TrainConfig& c, Communicator* data, LlamaTrain* model,
                                                 std::optional<AdamW> resumed) {
  if (c.zero_stage < 2) return nullptr;
  auto zero = std::make_unique<ShardedDataParallel>(data, model, c.adam, c.zero_stage, c.overlap);
  if (resumed) zero->load_full_state(*resumed);
  return zero;
}

// The banner's " x 4 ranks (dp=1 tp=2 pp=2 ep=1), ZeRO-1, 1f1b schedule, 4 micro-batches" (empty
// for one process without ZeRO-2/3).
std::string parallel_banner(const TrainConfig& c, const MeshShape& mesh, int ranks) {
  if (ranks == 1 && c.zero_stage < 2) return "";
  std::string out = fmt::format(" x {} ranks ({})", ranks, mesh.to_string());
  if (c.zero_stage > 0) out += fmt::format(", ZeRO-{}", c.zero_stage);
  if (mesh.pp > 1) {
    out += fmt::format(", {} schedule, {} micro-batches", pipeline_schedule_name(c.pipeline.schedule),
                       c.pipeline.micro_batches);
  }
  return out;
}

// Under tensor parallelism: the full weights and optimizer state gathered from every tp rank
// into *whole and *whole_opt (created on first use) when keep (the rank that writes the
// checkpoint); the other ranks take part in the gathers and drop the result.
Status gather_full_state(const TensorParallel& tp, const LlamaTrain& shard, AdamW& shard_opt, bool keep,
                         const AdamWConfig& adam, std::optional<LlamaTrain>* whole, std::optional<AdamW>* whole_opt,
                         const model::ModelConfig& full_config, ThreadPool* pool) {
  if (!keep) {
    std::vector<float> dropped;
    KOI_RETURN_IF_ERROR(tp.gather(shard.params(), &dropped, "allgather tp params"));
    KOI_RETURN_IF_ERROR(tp.gather(shard_opt.m(), &dropped, "allgather tp adam m"));
    return tp.gather(shard_opt.v(), &dropped, "allgather tp adam v");
  }
  if (!whole->has_value()) {
    KOI_ASSIGN_OR_RETURN(LlamaTrain created, LlamaTrain::create(full_config, pool));
    whole->emplace(std::move(created));
    std::vector<float>().swap((*whole)->grads());  // it is only written out, never trained
    whole_opt->emplace(adam, tp.full_size());
  }
  KOI_RETURN_IF_ERROR(tp.gather(shard.params(), &(*whole)->params(), "allgather tp params"));
  KOI_RETURN_IF_ERROR(tp.gather(shard_opt.m(), &(*whole_opt)->m(), "allgather tp adam m"));
  KOI_RETURN_IF_ERROR(tp.gather(shard_opt.v(), &(*whole_opt)->v(), "allgather tp adam v"));
  (*whole_opt)->set_steps(shard_opt.steps());
  return ok_status();
}

// Expert parallel (mesh ep > 1, moe_train.h): the experts of a mixture-of-experts model split
// over the ep group.
Status setup_expert_parallel(const model::ModelConfig& mc, Mesh& mesh, LlamaTrain* model) {
  const int ep = mesh.shape().ep;
  if (ep == 1) return ok_status();
  if (mc.moe.n_experts < ep) {
    return Status::invalid_argument("--ep " + std::to_string(ep) +
                                    " needs a mixture-of-experts model with at least that many experts (model.experts "
                                    "is " + std::to_string(mc.moe.n_experts) + ")");
  }
  model->set_expert_parallel(&mesh.ep());
  return ok_status();
}

// Under --pp: this rank's stage of a pipeline over the mesh's pp group, with its own AdamW
// (pipeline.h), each dp rank's batch_per_rank sequences going through it; nullopt otherwise.
Result<std::optional<Pipeline>> create_pipeline(const TrainConfig& c, Mesh& mesh, const TensorParallel* tp,
                                                int batch_per_rank, LlamaTrain* model) {
  if (mesh.shape().pp == 1) return std::optional<Pipeline>();
  PipelineConfig config = c.pipeline;
  config.stages = mesh.shape().pp;
  KOI_ASSIGN_OR_RETURN(Pipeline pipeline, Pipeline::create(&mesh.pp(), model, config, c.adam, batch_per_rank));
  pipeline.set_tensor_parallel(tp);
  return std::optional<Pipeline>(std::move(pipeline));
}

Result<TrainResult> run_training(const TrainConfig& c, bool resume, const std::atomic<bool>* stop,
                                 Communicator* comm, metrics::Registry* registry, trace::Recorder* trace) {
  LocalCommunicator local;
  metrics::Registry own_registry;
  TrainMetrics step_metrics(registry != nullptr ? *registry : own_registry);
  TimedCommunicator timed_comm(comm != nullptr ? *comm : local, step_metrics);
  Communicator& cm = timed_comm;
  const int rank = cm.rank(), ranks = cm.size();
  KOI_ASSIGN_OR_RETURN(Mesh mesh, Mesh::create(cm, c.mesh));
  KOI_RETURN_IF_ERROR(check_parallel_layout(c, mesh.shape()));
  // The ranks that split the batch: the dp group, or under expert parallelism the ep group
  // (the experts' ranks take different sequences; check_parallel_layout keeps ep alone).
  Communicator& data = mesh.shape().ep > 1 ? mesh.ep() : mesh.dp();
  const int dp_ranks = data.size();
  std::vector<MappedFile> texts;
  for (const std::string& path : c.text_paths) {
    Result<MappedFile> text = MappedFile::open(path);
    if (!text.ok() && text.status().code() == StatusCode::kNotFound && !path.starts_with('/')) {
      return Status::not_found("data.text: " + text.status().message() +
                               "; a relative path in a recipe is resolved from the current directory (" +
                               std::filesystem::current_path().string() +
                               "), not from the recipe's; run koi from the directory the recipe expects or give an absolute path");
    }
    if (!text.ok()) return text.status();
    texts.push_back(std::move(*text));
  }
  std::optional<BaseModel> base;  // the model fine-tuned
  if (!c.init_from.empty()) {
    KOI_ASSIGN_OR_RETURN(base, load_base_model(c.init_from));
  }
  TrainState state;
  std::string ckpt_dir;
  if (resume) {
    auto latest = latest_checkpoint(c.out_dir);
    if (latest.ok()) {
      ckpt_dir = *latest;
      KOI_ASSIGN_OR_RETURN(state, read_checkpoint_state(ckpt_dir));
    } else if (latest.status().code() != StatusCode::kNotFound) {
      return latest.status();
    }
  }
  if (ckpt_dir.empty() && base) {
    state.tokenizer = base->tokenizer;
  } else if (ckpt_dir.empty() && !c.tokenizer_path.empty()) {
    Result<tokenizer::Tokenizer> tok = tokenizer::load_tokenizer(c.tokenizer_path);
    if (!tok.ok()) return tok.status().with_prefix("data.tokenizer");
    state.tokenizer = tok->spec();
  } else if (ckpt_dir.empty()) {
    std::vector<std::string_view> views;
    for (const MappedFile& text : texts) views.push_back(text.view());
    state.chars = CharVocab::from_texts(views).chars();
  }
  const int T = c.seq_len > 0 ? c.seq_len : base->config.max_seq_len, B = c.batch_size, rank_batch = B / dp_ranks;
  const int64_t first = int64_t{data.rank()} * rank_batch * T;  // this rank's first token of a batch
  if (base && T > base->config.max_seq_len) {
    return Status::invalid_argument("train.seq_len " + std::to_string(T) + " exceeds the context of " + c.init_from +
                                    " (" + std::to_string(base->config.max_seq_len) + " tokens)");
  }
  model::ModelConfig mc = base ? base->config : c.model;
  if (!base) mc.n_vocab = tokenizer_vocab(state);
  ThreadPool pool(c.threads);
  std::optional<TensorParallel> tp;  // this rank's part of every layer
  if (mesh.shape().tp > 1) {
    KOI_ASSIGN_OR_RETURN(tp, TensorParallel::create(mc, &mesh.tp(), c.lora.rank > 0));
  }
  KOI_ASSIGN_OR_RETURN(LlamaTrain model, LlamaTrain::create(tp ? tp->shard_config() : mc, &pool));
  if (c.lora.rank > 0) KOI_RETURN_IF_ERROR(model.add_lora(c.lora, c.seed));
  model.set_trace(trace);
  model.set_moe_aux_loss_coef(c.moe_aux_loss_coef);
  if (tp) model.set_tensor_parallel(&mesh.tp(), tp->vocab_begin(), tp->vocab_full());
  KOI_RETURN_IF_ERROR(setup_expert_parallel(mc, mesh, &model));
  model.set_batch_group(&data);  // the load-balancing statistics of the whole batch
  KOI_ASSIGN_OR_RETURN(std::optional<Pipeline> pipeline,
                       create_pipeline(c, mesh, tp ? &*tp : nullptr, rank_batch, &model));
  // ZeRO-0/1: the optimizer over the whole model here; ZeRO-2/3: `zero` below, from the weights.
  std::optional<DistributedAdamW> opt;
  if (c.zero_stage < 2 && !pipeline) opt.emplace(&data, c.adam, model.trainable_layout(), c.zero_stage);
  std::optional<AdamW> resumed;  // the checkpoint's optimizer state, for ZeRO-2/3
  KOI_RETURN_IF_ERROR(load_initial_state(c, base, ckpt_dir, mc, tp ? &*tp : nullptr, &pool, &model,
                                         opt ? &*opt : nullptr, pipeline ? &*pipeline : nullptr, &resumed));
  if (!ckpt_dir.empty() && rank == 0) {
    std::fprintf(stderr, "resuming from %s (step %lld, saved under %s%s)\n", ckpt_dir.c_str(),
                 static_cast<long long>(state.step), state.mesh.c_str(),
                 state.zero_stage > 0 ? fmt::format(", ZeRO-{}", state.zero_stage).c_str() : "");
  }
  const int64_t num_params = static_cast<int64_t>(model.params().size());
  KOI_RETURN_IF_ERROR(check_same_run(cm, {num_params, state.step, static_cast<int64_t>(state.loader_position)}));
  std::unique_ptr<ShardedDataParallel> zero = create_zero(c, &data, &model, std::move(resumed));
  // ZeRO-0/1 over several ranks: the gradient allreduce overlaps the backward pass unless --no-overlap.
  std::optional<GradientOverlap> overlap;
  if (opt && c.overlap && data.size() > 1 && c.lora.rank == 0) overlap.emplace(&data, &model);
  ParallelStrategy strategy{.model = &model, .data = &data, .opt = opt ? &*opt : nullptr, .zero = zero.get(),
                            .pipeline = pipeline ? &*pipeline : nullptr, .tp = tp ? &*tp : nullptr,
                            .overlap = overlap ? &*overlap : nullptr, .trace = trace};
  KOI_ASSIGN_OR_RETURN(const TokenShards shards, corpus_tokens(c, state, texts, cm));
  const uint64_t n_train = static_cast<uint64_t>(static_cast<double>(shards.size()) * (1.0 - c.val_fraction));
  const TokenRange train_tokens{&shards, 0, n_train}, val_tokens{&shards, n_train, shards.size()};
  if (val_tokens.size() <= static_cast<uint64_t>(T) || train_tokens.size() <= static_cast<uint64_t>(T)) {
    return Status::invalid_argument(corpus_name(c) + ": too short for windows of " + std::to_string(T + 1) +
                                    " tokens in both the train and validation parts");
  }
  if (shards.max_token() >= mc.n_vocab) {
    return Status::invalid_argument(corpus_name(c) + ": the tokenizer gives token id " +
                                    std::to_string(shards.max_token()) + ", outside the model's vocabulary of " +
                                    std::to_string(mc.n_vocab));
  }
  std::error_code ec;
  std::filesystem::create_directories(c.out_dir, ec);
  if (ec) return Status::io_error(c.out_dir + ": cannot create the run directory: " + ec.message());
  const std::string metrics = path_join(c.out_dir, "metrics.jsonl");
  const std::string metrics_prom = path_join(c.out_dir, "metrics.prom");
  const double flops_per_token = train_flops_per_token(model_flops(mc, T), model.lora() != nullptr);
  const double peak_flops = rank == 0 ? measure_peak_flops(&pool) * ranks : 0.0;  // ranks alike
  if (rank == 0) {
    step_metrics.model_flops_per_token.set(flops_per_token);
    step_metrics.peak_flops.set(peak_flops);
    const std::string parallel = parallel_banner(c, mesh.shape(), ranks);
    std::fprintf(stderr, "model: %lld parameters, vocabulary %d; data: %llu train / %llu val tokens; %d threads%s\n",
                 static_cast<long long>(num_params), mc.n_vocab,
                 static_cast<unsigned long long>(train_tokens.size()),
                 static_cast<unsigned long long>(val_tokens.size()), pool.num_threads(), parallel.c_str());
    if (model.lora() != nullptr) {
      std::fprintf(stderr, "LoRA rank %d, alpha %g: %zu trained parameters, the base is frozen\n", c.lora.rank,
                   static_cast<double>(model.lora()->config().alpha), model.trainable_params().size());
    }
  }

  BatchLoader loader(train_tokens, B, T, c.seed);
  loader.set_position(state.loader_position);
  std::vector<int32_t> inputs(static_cast<size_t>(B) * T), targets(inputs.size());
  TrainResult result;
  int64_t saved_step = -1;
  CheckpointWriter writer(c.out_dir, c.keep_checkpoints, c.before_checkpoint_commit);
  // A run killed between a checkpoint's rename and its pruning left one checkpoint too many;
  // honour keep_checkpoints now, since a resumed run may write none (it was already done).
  if (resume && rank == 0) prune_checkpoints(c.out_dir, c.keep_checkpoints);
  writer.on_written([&step_metrics, trace](double seconds) {
    step_metrics.checkpoint_write.observe(seconds);
    if (trace == nullptr) return;
    const auto end = trace::Recorder::Clock::now();
    const auto took = std::chrono::duration_cast<trace::Recorder::Clock::duration>(std::chrono::duration<double>(seconds));
    trace->record("checkpoint write", "checkpoint", end - took, end, 1);
  });
  if (trace) trace->name_track(0, "step loop"), trace->name_track(1, "checkpoint writer");
  // The loop pauses only to copy the state; rank 0's writer thread writes it.
  std::optional<LlamaTrain> whole;  // under tp: the gathered full model and optimizer state
  std::optional<AdamW> whole_opt;
  auto checkpoint = [&]() -> Status {
    state.loader_position = loader.position();
    state.mesh = mesh.shape().to_string();
    state.zero_stage = c.zero_stage;
    saved_step = state.step;
    trace::Span span(trace, "checkpoint snapshot", "checkpoint");
    auto write = [&](AdamW& full) -> Status {
      if (tp) KOI_RETURN_IF_ERROR(gather_full_state(*tp, model, full, rank == 0, c.adam, &whole, &whole_opt, mc, &pool));
      if (rank != 0) return ok_status();
      const auto t0 = std::chrono::steady_clock::now();
      CheckpointSnapshot snapshot = tp ? snapshot_checkpoint(state, *whole, *whole_opt) : snapshot_checkpoint(state, model, full);
      const double stall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      step_metrics.checkpoint_snapshot.observe(stall_s);
      return writer.submit(std::move(snapshot), stall_s * 1e3);
    };
    return strategy.with_full_state(write);
  };
  auto evaluate = [&](bool with_train) -> Status {
    trace::Span span(trace, "evaluate", "eval");
    Pipeline* stages = pipeline ? &*pipeline : nullptr;
    KOI_ASSIGN_OR_RETURN(const float val, estimate_loss(model, stages, data, mesh.pp(), val_tokens, c, T, c.seed + 1));
    float train = 0.0f;
    if (with_train) {
      KOI_ASSIGN_OR_RETURN(train, estimate_loss(model, stages, data, mesh.pp(), train_tokens, c, T, c.seed + 2));
    }
    result.val_loss = val, result.train_loss = train;
    if (rank != 0) return ok_status();
    std::fprintf(stderr, "step %lld: val loss %.4f%s\n", static_cast<long long>(state.step), val,
                 with_train ? (", train loss " + std::to_string(train)).c_str() : "");
    append_line(metrics, "{\"step\":" + std::to_string(state.step) + ",\"val_loss\":" + std::to_string(val) +
                             (with_train ? ",\"train_loss\":" + std::to_string(train) : "") + "}");
    step_metrics.val_loss.set(val);
    return write_file_atomic(metrics_prom, step_metrics.registry.render());
  };

  const int64_t bucket_floats = std::max<int64_t>(1, static_cast<int64_t>(c.bucket_mb * (1 << 20) / sizeof(float)));
  StragglerDetector stragglers(ranks);
  // Summed over the ranks each step: [loss sum, ranks stopping, step ms of rank 0, 1, ...].
  std::vector<double> step_stats(2 + ranks);
  const auto start = std::chrono::steady_clock::now();
  const int64_t first_step = state.step;
  if (zero) zero->reset_peak();
  while (state.step < c.steps) {
    mesh.set_step(state.step + 1);
    if (c.eval_interval > 0 && state.step % c.eval_interval == 0) KOI_RETURN_IF_ERROR(evaluate(false));
    const auto t0 = std::chrono::steady_clock::now();
    const double bytes_before = step_metrics.collective_bytes_total();
    model.zero_grad();
    if (zero) zero->zero_grad();
    double loss = 0.0;
    for (int micro = 0; micro < c.grad_accum; ++micro) {
      loader.next(inputs.data(), targets.data());
      KOI_ASSIGN_OR_RETURN(const double part,
                           strategy.forward_backward(inputs.data() + first, targets.data() + first, rank_batch, T,
                                                     1.0f / static_cast<float>(B * T * c.grad_accum),
                                                     micro + 1 == c.grad_accum));
      loss += part;
    }
    std::fill(step_stats.begin(), step_stats.end(), 0.0);
    step_stats[0] = mesh.tp_rank() == 0 ? loss : 0.0;  // the tp ranks of a dp rank share one loss
    step_stats[1] = stop != nullptr && stop->load() ? 1.0 : 0.0;
    step_stats[2 + rank] = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    KOI_RETURN_IF_ERROR(strategy.reduce_grads(bucket_floats));
    {
      trace::Span span(trace, "allreduce loss and step times", "collective");
      KOI_RETURN_IF_ERROR(cm.allreduce_sum(step_stats.data(), ranks + 2, "allreduce loss and step times"));
    }
    loss = step_stats[0] / B / c.grad_accum;
    KOI_ASSIGN_OR_RETURN(const float norm, strategy.clip_grad_norm(c.grad_clip));
    const float lr = lr_at(c.schedule, state.step);
    KOI_RETURN_IF_ERROR(strategy.step(lr, &pool));
    ++state.step;
    KOI_ASSIGN_OR_RETURN(const std::vector<double> stage_bubble, strategy.bubble());
    const std::string bubble_log = pipeline_log(stage_bubble, c.pipeline, step_metrics);

    const auto t_end = std::chrono::steady_clock::now();
    const double step_secs = std::chrono::duration<double>(t_end - t0).count();
    if (trace) trace->record("step", "step", t0, t_end, 0, fmt::format("\"step\":{}", state.step));
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double avg = elapsed / static_cast<double>(state.step - first_step);
    const double tok_s = static_cast<double>(B) * T * c.grad_accum / step_secs;
    result.seconds_per_step = avg;
    if (rank == 0) {
      step_metrics.step.set(static_cast<double>(state.step));
      step_metrics.loss.set(loss);
      step_metrics.lr.set(lr);
      step_metrics.grad_norm.set(norm);
      step_metrics.tokens_per_second.set(tok_s);
      step_metrics.step_seconds.set(step_secs);
      step_metrics.step_duration.observe(step_secs);
      step_metrics.tokens.inc(static_cast<double>(B) * T * c.grad_accum);
      step_metrics.model_flops_per_second.set(flops_per_token * tok_s);
      step_metrics.mfu.set(peak_flops > 0.0 ? flops_per_token * tok_s / peak_flops : 0.0);
      if (c.log_interval > 0 && (state.step % c.log_interval == 0 || state.step == c.steps)) {
        std::fprintf(stderr, "step %lld/%d | loss %.4f | lr %.2e | norm %.3f | %.0f tok/s | %.1f ms/step%s | left %s\n",
                     static_cast<long long>(state.step), c.steps, loss, lr, norm, tok_s, step_secs * 1e3,
                     bubble_log.c_str(), format_duration(avg * static_cast<double>(c.steps - state.step)).c_str());
        KOI_RETURN_IF_ERROR(write_file_atomic(metrics_prom, step_metrics.registry.render()));
      }
      char line[256];
      std::snprintf(line, sizeof(line),
                    "{\"step\":%lld,\"loss\":%.6f,\"lr\":%.6g,\"grad_norm\":%.6f,\"tokens_per_s\":%.1f,"
                    "\"step_ms\":%.3f",
                    static_cast<long long>(state.step), loss, lr, norm, tok_s, step_secs * 1e3);
      std::string json = line;
      if (pipeline) json += pipeline_json(stage_bubble, c.pipeline);
      if (ranks > 1) {
        const std::vector<double> rank_ms(step_stats.begin() + 2, step_stats.end());
        json += ",\"rank_ms\":[";
        for (int r = 0; r < ranks; ++r) json += (r ? "," : "") + fmt::format("{:.3f}", rank_ms[r]);
        json += "]";
        // Bytes of rank 0's collectives in the step (TimedCommunicator), for the ZeRO benchmarks.
        json += fmt::format(",\"comm_bytes\":{:.0f}", step_metrics.collective_bytes_total() - bytes_before);
        for (int r : stragglers.observe(rank_ms)) {
          std::fprintf(stderr,
                       "straggler: rank %d at step %lld: %.1f ms of compute per step, more than %.1fx the median "
                       "(%.1f ms) for %d steps in a row\n",
                       r, static_cast<long long>(state.step), rank_ms[r], stragglers.ratio(),
                       StragglerDetector::median(rank_ms), stragglers.consecutive());
        }
      }
      append_line(metrics, json + "}");
    }

    const bool stopping = step_stats[1] > 0.0;
    if (stopping || (c.checkpoint_interval > 0 && state.step % c.checkpoint_interval == 0)) {
      KOI_RETURN_IF_ERROR(checkpoint());
    }
    if (stopping) {
      result.stopped = true;
      break;
    }
  }
  if (zero) KOI_RETURN_IF_ERROR(report_memory(*zero, mesh.dp(), metrics));
  if (!result.stopped) {
    KOI_RETURN_IF_ERROR(evaluate(true));
    if (saved_step != state.step) KOI_RETURN_IF_ERROR(checkpoint());
  }
  KOI_ASSIGN_OR_RETURN(result.checkpoint, writer.finish());
  KOI_RETURN_IF_ERROR(cm.barrier("barrier after the last checkpoint"));
  result.steps = state.step;
  return result;
}

}  // namespace koi::train
