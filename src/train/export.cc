#include "train/export.h"

#include <boost/json.hpp>

#include <filesystem>
#include <memory>

#include "base/file.h"
#include "base/logging.h"
#include "base/thread_pool.h"
#include "model/gguf_export.h"
#include "model/safetensors.h"
#include "tokenizer/hf_writer.h"
#include "tokenizer/load.h"
#include "train/checkpoint.h"
#include "train/data.h"
#include "train/lora.h"

namespace koi::train {
namespace {

namespace fs = std::filesystem;
namespace json = boost::json;

bool has_adapter(const std::string& checkpoint_dir) {
  return file_exists(path_join(checkpoint_dir, "adapter_config.json"));
}

Result<tokenizer::TokenizerSpec> checkpoint_tokenizer(const std::string& checkpoint_dir, int n_vocab) {
  KOI_ASSIGN_OR_RETURN(TrainState state, read_checkpoint_state(checkpoint_dir));
  if (state.tokenizer) return *state.tokenizer;
  if (state.chars.empty()) {
    return Status::unsupported(checkpoint_dir + ": the checkpoint has no tokenizer (tokenizer.gguf or a character "
                               "vocabulary in state.json) to export");
  }
  const CharVocab vocab = CharVocab::from_chars(state.chars);
  if (vocab.n_vocab() != n_vocab) {
    return Status::corrupt(checkpoint_dir + ": state.json has " + std::to_string(vocab.n_vocab()) +
                           " tokens but config.json a vocabulary of " + std::to_string(n_vocab));
  }
  return vocab.to_spec();
}

// A checkpoint's weights with its LoRA adapters merged in (W + alpha/r B A), and its
// tokenizer: what every full-model export writes.
struct MergedCheckpoint {
  model::ModelConfig config;
  tokenizer::TokenizerSpec tokenizer;
  std::unique_ptr<ThreadPool> pool;
  LlamaTrain model;
};

Result<MergedCheckpoint> load_merged(const std::string& checkpoint_dir) {
  KOI_ASSIGN_OR_RETURN(model::ModelConfig config, read_checkpoint_config(checkpoint_dir));
  KOI_ASSIGN_OR_RETURN(tokenizer::TokenizerSpec spec, checkpoint_tokenizer(checkpoint_dir, config.n_vocab));
  auto pool = std::make_unique<ThreadPool>(1);
  KOI_ASSIGN_OR_RETURN(LlamaTrain model, LlamaTrain::create(config, pool.get()));
  KOI_RETURN_IF_ERROR(read_params(path_join(checkpoint_dir, "model.safetensors"), model.layout(), &model.params()));
  if (has_adapter(checkpoint_dir)) {
    KOI_ASSIGN_OR_RETURN(LoraAdapters lora, LoraAdapters::load(checkpoint_dir, config));
    lora.merge_into(&model.params(), model.layout());
  }
  return MergedCheckpoint{std::move(config), std::move(spec), std::move(pool), std::move(model)};
}

// config.json: the checkpoint's, with the weight type and the special token ids.
std::string export_config_json(const MergedCheckpoint& m, DType weight_type) {
  json::object config = json::parse(hf_config_json(m.config)).as_object();
  config["torch_dtype"] = weight_type == DType::kF32 ? "float32" : weight_type == DType::kF16 ? "float16" : "bfloat16";
  if (m.tokenizer.bos_id) config["bos_token_id"] = *m.tokenizer.bos_id;
  if (m.tokenizer.eos_id) config["eos_token_id"] = *m.tokenizer.eos_id;
  return json::serialize(config);
}

std::string generation_config_json(const tokenizer::TokenizerSpec& spec) {
  json::object config;
  if (spec.bos_id) config["bos_token_id"] = *spec.bos_id;
  if (spec.eos_id) config["eos_token_id"] = *spec.eos_id;
  return json::serialize(config);
}

Status write_hf_weights(const MergedCheckpoint& m, DType weight_type, const std::string& path) {
  std::vector<model::SafetensorsWriteTensor> tensors;
  std::vector<std::vector<uint16_t>> converted;  // f16/bf16 copies, one per tensor
  converted.reserve(m.model.layout().size());
  for (const ParamTensor& t : m.model.layout()) {
    const float* data = m.model.params().data() + t.offset;
    if (weight_type == DType::kF32) {
      tensors.push_back({t.name, DType::kF32, t.shape, data});
      continue;
    }
    std::vector<uint16_t>& half = converted.emplace_back(size_t(t.size));
    for (int64_t i = 0; i < t.size; ++i) {
      half[size_t(i)] = weight_type == DType::kF16 ? f32_to_f16(data[i]) : f32_to_bf16(data[i]);
    }
    tensors.push_back({t.name, weight_type, t.shape, half.data()});
  }
  return model::write_safetensors(path, tensors, {{"format", "pt"}});
}

Status write_hf_files(const MergedCheckpoint& m, DType weight_type, const std::string& dir) {
  KOI_RETURN_IF_ERROR(write_file_atomic(path_join(dir, "config.json"), export_config_json(m, weight_type)));
  KOI_RETURN_IF_ERROR(write_file_atomic(path_join(dir, "generation_config.json"), generation_config_json(m.tokenizer)));
  KOI_RETURN_IF_ERROR(tokenizer::write_hf_tokenizer(m.tokenizer, dir));
  return write_hf_weights(m, weight_type, path_join(dir, "model.safetensors"));
}

}  // namespace

Status export_gguf(const std::string& checkpoint_dir, const std::string& out_path, model::ExportType weight_type) {
  KOI_ASSIGN_OR_RETURN(MergedCheckpoint m, load_merged(checkpoint_dir));
  model::ModelConfig config = m.config;
  config.name = "koi-trained";
  model::GgufWriter writer;
  KOI_RETURN_IF_ERROR(model::add_model_to_gguf(config, m.model.weights_view(), weight_type, writer).status());
  KOI_RETURN_IF_ERROR(tokenizer::spec_to_gguf(m.tokenizer, writer));
  if (Status s = tokenizer::check_gguf_tokenizer(m.tokenizer); !s.ok()) {
    log::warn("{}: Koi reads this file's whole tokenizer (koi.tokenizer.json); llama.cpp reads only its "
              "tokenizer.ggml keys: {}", out_path, s.message());
  }
  return writer.write(out_path);
}

Status export_hf(const std::string& checkpoint_dir, const std::string& out_dir, DType weight_type) {
  if (weight_type != DType::kF32 && weight_type != DType::kF16 && weight_type != DType::kBF16) {
    return Status::invalid_argument(
        "a Hugging Face export holds f32, f16 or bf16 weights; choose one of them with --type");
  }
  KOI_ASSIGN_OR_RETURN(MergedCheckpoint m, load_merged(checkpoint_dir));
  fs::path out = fs::path(out_dir).lexically_normal();
  if (!out.has_filename()) out = out.parent_path();  // "dir/"
  const std::string tmp = out.string() + ".tmp";
  const std::string old = out.string() + ".old";
  remove_all(tmp);
  std::error_code ec;
  fs::create_directories(tmp, ec);
  if (ec) return Status::io_error(tmp + ": cannot create the export directory: " + ec.message());
  if (Status s = write_hf_files(m, weight_type, tmp); !s.ok()) {
    remove_all(tmp);
    return s;
  }
  // A previous export steps aside first: rename cannot replace a directory that has files.
  remove_all(old);
  if (fs::exists(out)) fs::rename(out, old, ec);
  if (!ec) fs::rename(tmp, out, ec);
  if (ec) return Status::io_error(out.string() + ": cannot move the export into place: " + ec.message());
  remove_all(old);
  return ok_status();
}

Status export_adapter(const std::string& checkpoint_dir, const std::string& out_dir) {
  if (!has_adapter(checkpoint_dir)) {
    return Status::not_found(checkpoint_dir + ": no LoRA adapters (adapter_config.json); the run trained every "
                             "weight, export it with -o MODEL.gguf");
  }
  KOI_ASSIGN_OR_RETURN(model::ModelConfig config, read_checkpoint_config(checkpoint_dir));
  KOI_ASSIGN_OR_RETURN(LoraAdapters lora, LoraAdapters::load(checkpoint_dir, config));
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) return Status::io_error(out_dir + ": cannot create the adapter directory: " + ec.message());
  return lora.save(out_dir);
}

}  // namespace koi::train
