// Export of a training checkpoint into a GGUF file that `koi generate` and `koi serve` load:
// the weights (checkpoint.h's model.safetensors, converted to weight_type) and the
// tokenizer (the character vocabulary as a SentencePiece-style spec, data.h). A plain
// function; errors name the checkpoint file at fault.
#pragma once

#include <string>

#include "base/status.h"
#include "tensor/dtype.h"

namespace koi::train {

Status export_gguf(const std::string& checkpoint_dir, const std::string& out_path, DType weight_type);

}  // namespace koi::train
