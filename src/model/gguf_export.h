// Export of a loaded model (any source format) into GGUF metadata and tensors, in the
// layout llama.cpp uses: architecture "llama" (Llama, Mistral, SmolLM, TinyLlama, llama2.c
// imports) stores Q/K rows permuted for interleaved rope; "qwen2", "qwen3", "gemma2",
// "gemma3" and "phi3" keep the Hugging Face (neox) order; "phi3" fuses Q/K/V into attn_qkv
// and gate/up into ffn_up. Matrices are converted to the requested weight type (one type for all, or
// one of llama.cpp's K-quant mixes, see ExportType); norms and biases stay f32. Rows that do not
// divide into the type's blocks fall back (ExportType::tensor_type). Tokenizer metadata is
// added separately (tokenizer::spec_to_gguf).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"
#include "model/gguf.h"
#include "model/model_config.h"
#include "model/weights.h"
#include "tensor/dtype.h"

namespace koi::model {

// The type of every matrix, or a llama.cpp K-quant mix (llama.cpp's llama_tensor_get_type for
// LLAMA_FTYPE_MOSTLY_Q4_K_M / Q5_K_M on a dense llama-like model):
//   - output.weight (token_embd.weight when the embeddings are tied): q6_K;
//   - attn_v.weight and ffn_down.weight of layer i of n: q6_K where use_more_bits(i, n), that is
//     i < n/8 || i >= 7n/8 || (i - n/8) % 3 == 2;
//   - Phi-3's fused attn_qkv.weight: q5_K (q4_k_m) or q6_K (q5_k_m);
//   - every other matrix (token_embd included): q4_K (q4_k_m) or q5_K (q5_k_m).
// llama.cpp's rules for 70B models (attn_v q5_K) and for 8 experts do not apply to the models
// Koi exports. With a K-quant type alone (q4_k, q5_k, q6_k) every matrix takes that type, as
// llama-quantize --pure does (llama-quantize's bare "Q4_K"/"Q5_K" names mean the _M mixes).
//
// Fallback, for rows that the chosen type's blocks do not divide: q4_K/q5_K/q6_K -> q8_0 (llama.cpp
// picks q5_0/q5_1 for q4_K/q5_K, which Koi does not write, and q8_0 for q6_K); then any quantized
// type whose 32-value blocks do not divide the rows either -> f16, as llama.cpp does.
struct ExportType {
  enum class Mix { kNone, kQ4_K_M, kQ5_K_M };
  DType base = DType::kF32;
  Mix mix = Mix::kNone;

  ExportType() = default;
  ExportType(DType t) : base(t) {}  // NOLINT: one type for every matrix
  ExportType(DType t, Mix m) : base(t), mix(m) {}

  // "q4_k_m", "q5_k_m", or a dtype_from_name() name of a type Koi can write (not q2_K, q3_K,
  // q8_K); nullopt otherwise.
  static std::optional<ExportType> from_name(std::string_view name);
  std::string name() const;
  // The type of the matrix `tensor` ("blk.3.attn_v.weight", "output.weight", ...) with rows of
  // row_length values, in a model of n_layers layers that has (or not) its own output.weight.
  DType tensor_type(std::string_view tensor, int64_t row_length, int n_layers, bool has_output) const;
  // llama.cpp's general.file_type.
  uint32_t file_type() const;
};

struct ExportStats {
  int tensors = 0;
  int fallback_tensors = 0;  // rows the requested type's blocks do not divide (see ExportType)
  int64_t bytes = 0;         // tensor bytes written
};

// Adds the model's metadata and converted tensors to the writer (which owns the converted
// bytes afterwards). `weights` only needs to stay valid during the call.
Result<ExportStats> add_model_to_gguf(const ModelConfig& config, const ModelWeights& weights, ExportType weight_type,
                                      GgufWriter& writer);

}  // namespace koi::model
