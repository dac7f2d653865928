#include "train/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <boost/json.hpp>
#include <cstdio>
#include <chrono>
#include <filesystem>

#include "base/file.h"
#include "model/loader.h"
#include "model/moe.h"
#include "model/safetensors.h"
#include "tokenizer/load.h"

namespace koi::train {
namespace {

namespace fs = std::filesystem;
namespace json = boost::json;

constexpr char kPrefix[] = "ckpt-";
constexpr char kMarker[] = "COMPLETE";
constexpr char kTokenizerFile[] = "tokenizer.gguf";

Status fsync_dir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return Status::io_error(dir + ": cannot open directory to sync it");
  const int rc = ::fsync(fd);
  ::close(fd);
  return rc == 0 ? ok_status() : Status::io_error(dir + ": fsync failed");
}

// Complete checkpoints of run_dir, oldest first.
std::vector<std::string> complete_checkpoints(const std::string& run_dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(run_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(kPrefix, 0) == 0 && file_exists(path_join(entry.path().string(), kMarker))) {
      out.push_back(entry.path().string());
    }
  }
  std::sort(out.begin(), out.end());  // zero-padded step numbers sort by step
  return out;
}

// AdamW's step count from a checkpoint's state.json.
Result<int64_t> read_adam_steps(const std::string& dir) {
  KOI_ASSIGN_OR_RETURN(std::string text, read_file(path_join(dir, "state.json")));
  boost::system::error_code ec;
  json::value v = json::parse(text, ec);
  const json::value* steps = ec || !v.is_object() ? nullptr : v.as_object().if_contains("adam_steps");
  if (steps == nullptr || !steps->is_int64()) return Status::corrupt(path_join(dir, "state.json") + ": missing adam_steps");
  return steps->as_int64();
}

}  // namespace

std::string hf_config_json(const model::ModelConfig& c) {
  json::object o;
  o["architectures"] = json::array{"LlamaForCausalLM"};
  o["model_type"] = "llama";
  o["hidden_size"] = c.dim;
  o["num_hidden_layers"] = c.n_layers;
  o["num_attention_heads"] = c.n_heads;
  o["num_key_value_heads"] = c.n_kv_heads;
  o["head_dim"] = c.head_dim;
  o["intermediate_size"] = c.ffn_dim;
  o["vocab_size"] = c.n_vocab;
  o["max_position_embeddings"] = c.max_seq_len;
  o["rms_norm_eps"] = c.norm_eps;
  o["rope_theta"] = c.rope_theta;
  o["attention_bias"] = c.qkv_bias;
  o["tie_word_embeddings"] = c.tied_embeddings;
  o["torch_dtype"] = "float32";
  if (c.moe.enabled()) model::add_moe_hf_config(c, o);
  return json::serialize(o);
}

Status write_params(const std::string& path, const std::vector<ParamTensor>& layout, const std::vector<float>& data,
                    const std::string& prefix) {
  std::vector<model::SafetensorsWriteTensor> tensors;
  for (const ParamTensor& t : layout) tensors.push_back({prefix + t.name, DType::kF32, t.shape, data.data() + t.offset});
  return model::write_safetensors(path, tensors, {{"format", "pt"}});
}

Status for_each_param(const std::string& path, const std::vector<ParamTensor>& layout,
                      const std::function<void(size_t, const float*)>& take, const std::string& prefix) {
  KOI_ASSIGN_OR_RETURN(model::SafetensorsFile file, model::SafetensorsFile::open(path));
  for (size_t i = 0; i < layout.size(); ++i) {
    const ParamTensor& t = layout[i];
    const model::SafetensorsTensor* st = file.find(prefix + t.name);
    if (st == nullptr) return Status::corrupt(path + ": tensor " + prefix + t.name + " is missing");
    if (st->view.type != DType::kF32 || st->view.num_elements() != t.size) {
      return Status::corrupt(path + ": tensor " + prefix + t.name + " is not f32 of " + std::to_string(t.size) +
                             " values; the checkpoint does not match the model config");
    }
    take(i, st->view.f32());
  }
  return ok_status();
}

Status read_params(const std::string& path, const std::vector<ParamTensor>& layout, std::vector<float>* data,
                   const std::string& prefix) {
  return for_each_param(
      path, layout, [&](size_t i, const float* src) { std::copy_n(src, layout[i].size, data->data() + layout[i].offset); },
      prefix);
}

CheckpointSnapshot snapshot_checkpoint(const TrainState& state, const LlamaTrain& model, AdamW& optimizer) {
  CheckpointSnapshot s;
  s.state = state;
  s.config = model.config();
  s.layout = model.layout();
  s.params = model.params();
  if (model.lora() != nullptr) s.lora = *model.lora();
  // m and v in one tensor list: the trained layout twice, "m." names over m, "v." over v.
  const int64_t total = static_cast<int64_t>(optimizer.m().size());
  for (const ParamTensor& t : model.trainable_layout()) {
    s.moments_layout.push_back({"m." + t.name, t.shape, t.offset, t.size, false});
  }
  for (const ParamTensor& t : model.trainable_layout()) {
    s.moments_layout.push_back({"v." + t.name, t.shape, total + t.offset, t.size, false});
  }
  s.moments.reserve(optimizer.m().size() * 2);
  s.moments.insert(s.moments.end(), optimizer.m().begin(), optimizer.m().end());
  s.moments.insert(s.moments.end(), optimizer.v().begin(), optimizer.v().end());
  s.adam_steps = optimizer.steps();
  return s;
}

Result<std::string> write_checkpoint(const std::string& run_dir, const CheckpointSnapshot& snapshot,
                                     const std::function<void()>& before_commit) {
  const TrainState& state = snapshot.state;
  char name[32];
  std::snprintf(name, sizeof(name), "%s%08lld", kPrefix, static_cast<long long>(state.step));
  const std::string final_dir = path_join(run_dir, name);
  const std::string tmp = path_join(run_dir, "." + std::string(name) + ".tmp");
  remove_all(tmp);
  std::error_code ec;
  fs::create_directories(tmp, ec);
  if (ec) return Status::io_error(tmp + ": cannot create the checkpoint directory: " + ec.message());

  KOI_RETURN_IF_ERROR(write_file_atomic(path_join(tmp, "config.json"), hf_config_json(snapshot.config)));
  KOI_RETURN_IF_ERROR(write_params(path_join(tmp, "model.safetensors"), snapshot.layout, snapshot.params));
  if (snapshot.lora) KOI_RETURN_IF_ERROR(snapshot.lora->save(tmp));
  if (state.tokenizer) {
    model::GgufWriter writer;
    KOI_RETURN_IF_ERROR(tokenizer::spec_to_gguf(*state.tokenizer, writer));
    KOI_RETURN_IF_ERROR(writer.write(path_join(tmp, kTokenizerFile)));
  }
  KOI_RETURN_IF_ERROR(
      write_params(path_join(tmp, "optimizer.safetensors"), snapshot.moments_layout, snapshot.moments));

  json::object s;
  s["step"] = state.step;
  s["adam_steps"] = snapshot.adam_steps;
  s["loader_position"] = state.loader_position;
  s["layout"] = json::object{{"tensors", "full"}, {"mesh", state.mesh}, {"zero", state.zero_stage}};
  json::array chars;
  for (const std::string& ch : state.chars) chars.emplace_back(ch);
  s["chars"] = std::move(chars);
  KOI_RETURN_IF_ERROR(write_file_atomic(path_join(tmp, "state.json"), json::serialize(s)));
  if (before_commit) before_commit();
  KOI_RETURN_IF_ERROR(write_file_atomic(path_join(tmp, kMarker), "ok\n"));

  remove_all(final_dir);  // a step saved twice (resume after a crash at that very step)
  fs::rename(tmp, final_dir, ec);
  if (ec) return Status::io_error(final_dir + ": cannot move the checkpoint into place: " + ec.message());
  KOI_RETURN_IF_ERROR(fsync_dir(run_dir));
  return final_dir;
}

Result<std::string> save_checkpoint(const std::string& run_dir, const TrainState& state, const LlamaTrain& model,
                                    AdamW& optimizer) {
  return write_checkpoint(run_dir, snapshot_checkpoint(state, model, optimizer));
}

Result<std::string> latest_checkpoint(const std::string& run_dir) {
  std::vector<std::string> all = complete_checkpoints(run_dir);
  if (all.empty()) return Status::not_found(run_dir + ": no complete checkpoint (ckpt-*/COMPLETE) to resume from");
  return all.back();
}

Result<model::ModelConfig> read_checkpoint_config(const std::string& dir) {
  const std::string path = path_join(dir, "config.json");
  KOI_ASSIGN_OR_RETURN(std::string text, read_file(path));
  return model::parse_hf_config(text, path);
}

Result<TrainState> read_checkpoint_state(const std::string& dir) {
  const std::string path = path_join(dir, "state.json");
  KOI_ASSIGN_OR_RETURN(std::string text, read_file(path));
  boost::system::error_code ec;
  json::value v = json::parse(text, ec);
  const json::object* o = ec ? nullptr : v.if_object();
  if (o == nullptr || !o->contains("step") || !o->contains("loader_position") || !o->contains("chars")) {
    return Status::corrupt(path + ": not a Koi training state (needs step, loader_position, chars)");
  }
  TrainState s;
  try {
    s.step = json::value_to<int64_t>(o->at("step"));
    s.loader_position = json::value_to<uint64_t>(o->at("loader_position"));
    s.chars = json::value_to<std::vector<std::string>>(o->at("chars"));
    if (const json::value* layout = o->if_contains("layout")) {  // older checkpoints: full, one process
      const json::object& l = layout->as_object();
      if (json::value_to<std::string>(l.at("tensors")) != "full") {
        return Status::corrupt(path + ": layout.tensors is not \"full\"; this Koi reads checkpoints of whole tensors only");
      }
      s.mesh = json::value_to<std::string>(l.at("mesh"));
      if (const json::value* zero = l.if_contains("zero")) s.zero_stage = json::value_to<int>(*zero);
    }
  } catch (const std::exception& e) {
    return Status::corrupt(path + ": bad field: " + e.what());
  }
  const std::string tokenizer_path = path_join(dir, kTokenizerFile);
  if (file_exists(tokenizer_path)) {
    KOI_ASSIGN_OR_RETURN(tokenizer::Tokenizer tok, tokenizer::load_tokenizer(tokenizer_path));
    s.tokenizer = tok.spec();
  }
  return s;
}

Status load_checkpoint(const std::string& dir, LlamaTrain* model, AdamW* optimizer) {
  KOI_RETURN_IF_ERROR(read_params(path_join(dir, "model.safetensors"), model->layout(), &model->params()));
  if (LoraAdapters* lora = model->lora()) {
    KOI_RETURN_IF_ERROR(lora->load_params(dir));
  }
  const std::vector<ParamTensor>& trained = model->trainable_layout();
  KOI_RETURN_IF_ERROR(read_params(path_join(dir, "optimizer.safetensors"), trained, &optimizer->m(), "m."));
  KOI_RETURN_IF_ERROR(read_params(path_join(dir, "optimizer.safetensors"), trained, &optimizer->v(), "v."));
  KOI_ASSIGN_OR_RETURN(const int64_t steps, read_adam_steps(dir));
  optimizer->set_steps(steps);
  return ok_status();
}

Status load_checkpoint_sliced(const std::string& dir, const std::vector<ParamTensor>& layout,
                              const std::function<void(size_t, const float*, float*)>& slice,
                              std::vector<float>* params, AdamW* optimizer) {
  auto into = [&](std::vector<float>* dst) { return [&, dst](size_t i, const float* src) { slice(i, src, dst->data()); }; };
  KOI_RETURN_IF_ERROR(for_each_param(path_join(dir, "model.safetensors"), layout, into(params)));
  const std::string moments = path_join(dir, "optimizer.safetensors");
  KOI_RETURN_IF_ERROR(for_each_param(moments, layout, into(&optimizer->m()), "m."));
  KOI_RETURN_IF_ERROR(for_each_param(moments, layout, into(&optimizer->v()), "v."));
  KOI_ASSIGN_OR_RETURN(const int64_t steps, read_adam_steps(dir));
  optimizer->set_steps(steps);
  return ok_status();
}

void prune_checkpoints(const std::string& run_dir, int keep) {
  if (keep <= 0) return;
  std::vector<std::string> all = complete_checkpoints(run_dir);
  for (size_t i = 0; i + static_cast<size_t>(keep) < all.size(); ++i) remove_all(all[i]);
  // A ckpt-* folder without its marker, older than the newest complete one, is one a killed
  // process was pruning (remove_all took the marker first): finish removing it.
  if (all.empty()) return;
  std::error_code ec;
  std::vector<std::string> half_removed;
  for (const auto& entry : fs::directory_iterator(run_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(kPrefix, 0) == 0 && entry.path().string() < all.back() &&
        !file_exists(path_join(entry.path().string(), kMarker))) {
      half_removed.push_back(entry.path().string());
    }
  }
  for (const std::string& dir : half_removed) remove_all(dir);
}

CheckpointWriter::CheckpointWriter(std::string run_dir, int keep, std::function<void(int64_t step)> before_commit)
    : run_dir_(std::move(run_dir)), keep_(keep), before_commit_(std::move(before_commit)) {}

CheckpointWriter::~CheckpointWriter() {
  if (thread_.joinable()) thread_.join();
}

Status CheckpointWriter::submit(CheckpointSnapshot snapshot, double stall_ms) {
  KOI_RETURN_IF_ERROR(finish().status());
  thread_ = std::thread([this, snapshot = std::move(snapshot), stall_ms] {
    const auto start = std::chrono::steady_clock::now();
    const int64_t step = snapshot.state.step;
    written_ = write_checkpoint(run_dir_, snapshot, [&] {
      if (before_commit_) before_commit_(step);
    });
    if (!written_.ok()) return;
    prune_checkpoints(run_dir_, keep_);
    const double write_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    std::fprintf(stderr, "checkpoint %s: written in %.1f ms; the step loop paused %.1f ms for its snapshot\n",
                 written_->c_str(), write_ms, stall_ms);
    if (on_written_) on_written_(write_ms / 1e3);
  });
  return ok_status();
}

Result<std::string> CheckpointWriter::finish() {
  if (thread_.joinable()) thread_.join();
  return written_;
}

}  // namespace koi::train
