#include "train/export.h"

#include <filesystem>

#include "base/file.h"
#include "base/thread_pool.h"
#include "model/gguf_export.h"
#include "tokenizer/load.h"
#include "train/checkpoint.h"
#include "train/data.h"
#include "train/lora.h"

namespace koi::train {
namespace {

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

}  // namespace

Status export_gguf(const std::string& checkpoint_dir, const std::string& out_path, DType weight_type) {
  KOI_ASSIGN_OR_RETURN(model::ModelConfig config, read_checkpoint_config(checkpoint_dir));
  KOI_ASSIGN_OR_RETURN(tokenizer::TokenizerSpec spec, checkpoint_tokenizer(checkpoint_dir, config.n_vocab));
  ThreadPool pool(1);
  KOI_ASSIGN_OR_RETURN(LlamaTrain model, LlamaTrain::create(config, &pool));
  KOI_RETURN_IF_ERROR(read_params(path_join(checkpoint_dir, "model.safetensors"), model.layout(), &model.params()));
  if (has_adapter(checkpoint_dir)) {
    KOI_ASSIGN_OR_RETURN(LoraAdapters lora, LoraAdapters::load(checkpoint_dir, config));
    lora.merge_into(&model.params(), model.layout());
  }
  config.name = "koi-trained";
  model::GgufWriter writer;
  KOI_RETURN_IF_ERROR(model::add_model_to_gguf(config, model.weights_view(), weight_type, writer).status());
  tokenizer::spec_to_gguf(spec, writer);
  return writer.write(out_path);
}

Status export_adapter(const std::string& checkpoint_dir, const std::string& out_dir) {
  if (!has_adapter(checkpoint_dir)) {
    return Status::not_found(checkpoint_dir + ": no LoRA adapters (adapter_config.json); the run trained every "
                             "weight, export it with -o MODEL.gguf");
  }
  KOI_ASSIGN_OR_RETURN(model::ModelConfig config, read_checkpoint_config(checkpoint_dir));
  KOI_ASSIGN_OR_RETURN(LoraAdapters lora, LoraAdapters::load(checkpoint_dir, config));
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) return Status::io_error(out_dir + ": cannot create the adapter directory: " + ec.message());
  return lora.save(out_dir);
}

}  // namespace koi::train
