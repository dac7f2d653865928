// Export of a training checkpoint:
//  - export_gguf: a GGUF file that `koi generate` and `koi serve` load: the weights
//    (checkpoint.h's model.safetensors with its LoRA adapters merged in, W + alpha/r B A,
//    converted to weight_type) and the tokenizer (the fine-tuned model's, or the character
//    vocabulary as a SentencePiece-style spec, data.h);
//  - export_hf: the same model as a Hugging Face directory that `koi generate` and
//    `koi serve` load (and transformers): config.json, model.safetensors (f32, f16 or bf16),
//    generation_config.json (bos/eos ids), tokenizer.json + tokenizer_config.json
//    (tokenizer/hf_writer.h). Written into a temporary sibling directory that is renamed
//    into place, replacing an older export: out_dir is whole or absent, never half written;
//  - export_adapter: the LoRA adapters alone, as a PEFT directory (adapter_model.safetensors
//    with PEFT names, adapter_config.json).
// Plain functions; errors name the checkpoint file at fault.
#pragma once

#include <string>

#include "base/status.h"
#include "model/gguf_export.h"
#include "tensor/dtype.h"

namespace koi::train {

Status export_gguf(const std::string& checkpoint_dir, const std::string& out_path, model::ExportType weight_type);
Status export_hf(const std::string& checkpoint_dir, const std::string& out_dir, DType weight_type);
Status export_adapter(const std::string& checkpoint_dir, const std::string& out_dir);

}  // namespace koi::train
