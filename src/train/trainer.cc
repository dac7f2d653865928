#include "train/trainer.h"

#include <yaml-cpp/yaml.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>

#include "base/file.h"
#include "base/thread_pool.h"
#include "train/checkpoint.h"
#include "train/data.h"
#include "train/llama_train.h"

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

// Mean loss over eval_iters batches of a fixed sequence (the same batches at every call).
float estimate_loss(LlamaTrain& model, const std::vector<int32_t>& tokens, const TrainConfig& c, int T,
                    uint64_t seed) {
  BatchLoader loader(&tokens, c.batch_size, T, seed);
  std::vector<int32_t> inputs(static_cast<size_t>(c.batch_size) * T), targets(inputs.size());
  double sum = 0.0;
  for (int i = 0; i < c.eval_iters; ++i) {
    loader.next(inputs.data(), targets.data());
    sum += model.forward(inputs.data(), targets.data(), c.batch_size, T);
  }
  return static_cast<float>(sum / std::max(1, c.eval_iters));
}

}  // namespace

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
  std::string tokenizer = "char";
  KOI_RETURN_IF_ERROR(read_section(root, "model",
                                   {field("dim", &m.dim), field("layers", &m.n_layers), field("heads", &m.n_heads),
                                    field("kv_heads", &m.n_kv_heads), field("ffn_dim", &m.ffn_dim),
                                    field("context", &m.max_seq_len), field("tied_embeddings", &m.tied_embeddings),
                                    field("qkv_bias", &m.qkv_bias), field("rope_theta", &m.rope_theta),
                                    field("norm_eps", &m.norm_eps)},
                                   file_name));
  KOI_RETURN_IF_ERROR(read_section(
      root, "data", {field("text", &c.text_path), field("tokenizer", &tokenizer), field("val_fraction", &c.val_fraction)},
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
       field("out", &c.out_dir), field("threads", &c.threads)},
      file_name));
  for (const auto& kv : root) {
    const std::string s = kv.first.as<std::string>();
    if (s != "model" && s != "data" && s != "train") {
      return Status::invalid_argument(file_name + ": unknown section '" + s + "' (known: model, data, train)");
    }
  }
  if (tokenizer != "char") {
    return Status::unsupported(file_name + ": data.tokenizer '" + tokenizer + "' is not supported yet; use char");
  }
  if (m.n_kv_heads == 0) m.n_kv_heads = m.n_heads;
  if (m.n_heads > 0) m.head_dim = m.dim / m.n_heads;
  if (c.seq_len == 0) c.seq_len = m.max_seq_len;
  if (c.schedule.decay_steps == 0) c.schedule.decay_steps = c.steps;
  if (c.text_path.empty()) return Status::invalid_argument(file_name + ": data.text (the corpus) is required");
  if (c.out_dir.empty()) return Status::invalid_argument(file_name + ": train.out (the run directory) is required");
  if (c.seq_len > m.max_seq_len || c.seq_len < 1) {
    return Status::invalid_argument(file_name + ": train.seq_len must be between 1 and model.context");
  }
  if (c.batch_size < 1 || c.grad_accum < 1 || c.steps < 1) {
    return Status::invalid_argument(file_name + ": train.batch_size, grad_accum and steps must be at least 1");
  }
  if (!(c.val_fraction > 0.0 && c.val_fraction < 1.0)) {
    return Status::invalid_argument(file_name + ": data.val_fraction must be between 0 and 1 (exclusive)");
  }
  return c;
}

Result<TrainResult> run_training(const TrainConfig& c, bool resume, const std::atomic<bool>* stop) {
  KOI_ASSIGN_OR_RETURN(std::string text, read_file(c.text_path));
  CharVocab vocab = CharVocab::from_text(text);
  std::string ckpt_dir;
  TrainState state;
  if (resume) {
    auto latest = latest_checkpoint(c.out_dir);
    if (latest.ok()) {
      ckpt_dir = *latest;
      KOI_ASSIGN_OR_RETURN(state, read_checkpoint_state(ckpt_dir));
      vocab = CharVocab::from_chars(state.chars);
    } else if (latest.status().code() != StatusCode::kNotFound) {
      return latest.status();
    }
  }
  KOI_ASSIGN_OR_RETURN(std::vector<int32_t> tokens, vocab.encode(text));
  const size_t n_train = static_cast<size_t>(static_cast<double>(tokens.size()) * (1.0 - c.val_fraction));
  const std::vector<int32_t> train_tokens(tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(n_train));
  const std::vector<int32_t> val_tokens(tokens.begin() + static_cast<std::ptrdiff_t>(n_train), tokens.end());
  const int T = c.seq_len, B = c.batch_size;
  if (static_cast<int>(val_tokens.size()) <= T || static_cast<int>(train_tokens.size()) <= T) {
    return Status::invalid_argument(c.text_path + ": too short for windows of " + std::to_string(T + 1) +
                                    " tokens in both the train and validation parts");
  }

  model::ModelConfig mc = c.model;
  mc.n_vocab = vocab.n_vocab();
  ThreadPool pool(c.threads);
  KOI_ASSIGN_OR_RETURN(LlamaTrain model, LlamaTrain::create(mc, &pool));
  AdamW opt(c.adam, static_cast<int64_t>(model.params().size()));
  state.chars = vocab.chars();
  if (ckpt_dir.empty()) {
    model.init_random(c.seed);
  } else {
    KOI_RETURN_IF_ERROR(load_checkpoint(ckpt_dir, &model, &opt));
    std::fprintf(stderr, "resuming from %s (step %lld)\n", ckpt_dir.c_str(), static_cast<long long>(state.step));
  }
  std::error_code ec;
  std::filesystem::create_directories(c.out_dir, ec);
  if (ec) return Status::io_error(c.out_dir + ": cannot create the run directory: " + ec.message());
  const std::string metrics = path_join(c.out_dir, "metrics.jsonl");
  std::fprintf(stderr, "model: %lld parameters, vocabulary %d; data: %zu train / %zu val tokens; %d threads\n",
               static_cast<long long>(model.params().size()), mc.n_vocab, train_tokens.size(), val_tokens.size(),
               pool.num_threads());

  BatchLoader loader(&train_tokens, B, T, c.seed);
  loader.set_position(state.loader_position);
  std::vector<int32_t> inputs(static_cast<size_t>(B) * T), targets(inputs.size());
  TrainResult result;
  auto checkpoint = [&]() -> Status {
    state.loader_position = loader.position();
    KOI_ASSIGN_OR_RETURN(result.checkpoint, save_checkpoint(c.out_dir, state, model, opt));
    prune_checkpoints(c.out_dir, c.keep_checkpoints);
    return ok_status();
  };
  auto evaluate = [&](bool with_train) {
    const float val = estimate_loss(model, val_tokens, c, T, c.seed + 1);
    const float train = with_train ? estimate_loss(model, train_tokens, c, T, c.seed + 2) : 0.0f;
    std::fprintf(stderr, "step %lld: val loss %.4f%s\n", static_cast<long long>(state.step), val,
                 with_train ? (", train loss " + std::to_string(train)).c_str() : "");
    append_line(metrics, "{\"step\":" + std::to_string(state.step) + ",\"val_loss\":" + std::to_string(val) +
                             (with_train ? ",\"train_loss\":" + std::to_string(train) : "") + "}");
    result.val_loss = val, result.train_loss = train;
  };

  const auto start = std::chrono::steady_clock::now();
  const int64_t first_step = state.step;
  while (state.step < c.steps) {
    if (c.eval_interval > 0 && state.step % c.eval_interval == 0) evaluate(false);
    const auto t0 = std::chrono::steady_clock::now();
    model.zero_grad();
    double loss = 0.0;
    for (int micro = 0; micro < c.grad_accum; ++micro) {
      loader.next(inputs.data(), targets.data());
      loss += model.forward(inputs.data(), targets.data(), B, T);
      model.backward(1.0f / static_cast<float>(B * T * c.grad_accum));
    }
    loss /= c.grad_accum;
    const float norm = clip_grad_norm(model.grads(), c.grad_clip);
    const float lr = lr_at(c.schedule, state.step);
    opt.step(model.params(), model.grads(), model.layout(), lr);
    ++state.step;

    const double step_secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double avg = elapsed / static_cast<double>(state.step - first_step);
    const double tok_s = static_cast<double>(B) * T * c.grad_accum / step_secs;
    if (c.log_interval > 0 && (state.step % c.log_interval == 0 || state.step == c.steps)) {
      std::fprintf(stderr, "step %lld/%d | loss %.4f | lr %.2e | norm %.3f | %.0f tok/s | %.1f ms/step | left %s\n",
                   static_cast<long long>(state.step), c.steps, loss, lr, norm, tok_s, step_secs * 1e3,
                   format_duration(avg * static_cast<double>(c.steps - state.step)).c_str());
    }
    char line[256];
    std::snprintf(line, sizeof(line),
                  "{\"step\":%lld,\"loss\":%.6f,\"lr\":%.6g,\"grad_norm\":%.6f,\"tokens_per_s\":%.1f,\"step_ms\":%.3f}",
                  static_cast<long long>(state.step), loss, lr, norm, tok_s, step_secs * 1e3);
    append_line(metrics, line);
    result.seconds_per_step = avg;

    const bool stopping = stop != nullptr && stop->load();
    if (stopping || (c.checkpoint_interval > 0 && state.step % c.checkpoint_interval == 0)) {
      KOI_RETURN_IF_ERROR(checkpoint());
    }
    if (stopping) {
      result.steps = state.step;
      result.stopped = true;
      return result;
    }
  }
  evaluate(true);
  if (result.checkpoint.empty() || c.checkpoint_interval <= 0 || state.step % c.checkpoint_interval != 0) {
    KOI_RETURN_IF_ERROR(checkpoint());
  }
  result.steps = state.step;
  return result;
}

}  // namespace koi::train
