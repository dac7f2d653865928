#include "train/export.h"

#include "model/gguf_export.h"
#include "model/loader.h"
#include "tokenizer/load.h"
#include "train/checkpoint.h"
#include "train/data.h"

namespace koi::train {

Status export_gguf(const std::string& checkpoint_dir, const std::string& out_path, DType weight_type) {
  KOI_ASSIGN_OR_RETURN(model::LoadedWeights loaded, model::load_hf_weights(checkpoint_dir));
  KOI_ASSIGN_OR_RETURN(TrainState state, read_checkpoint_state(checkpoint_dir));
  if (state.chars.empty()) {
    return Status::unsupported(checkpoint_dir + ": the checkpoint has no character vocabulary to export");
  }
  const CharVocab vocab = CharVocab::from_chars(state.chars);
  if (vocab.n_vocab() != loaded.config.n_vocab) {
    return Status::corrupt(checkpoint_dir + ": state.json has " + std::to_string(vocab.n_vocab()) +
                           " tokens but config.json a vocabulary of " + std::to_string(loaded.config.n_vocab));
  }
  loaded.config.name = "koi-trained";
  model::GgufWriter writer;
  KOI_RETURN_IF_ERROR(model::add_model_to_gguf(loaded.config, loaded.weights, weight_type, writer).status());
  tokenizer::spec_to_gguf(vocab.to_spec(), writer);
  return writer.write(out_path);
}

}  // namespace koi::train
