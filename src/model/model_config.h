// ModelConfig: the shape and hyper-parameters of a Llama-family model (Llama 1/2/3,
// Mistral, Qwen2, Qwen3, Gemma 2/3, Phi-3, SmolLM, TinyLlama), whatever file it came from.
// Plain value type.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "kernels/ops.h"

namespace koi::model {

// Rope scaling from Hugging Face rope_scaling: Llama 3.x "llama3" (frequencies divided by a
// factor that depends on their wavelength) or "linear" (every frequency divided by `factor`).
struct RopeScaling {
  enum class Type { kLlama3, kLinear };
  bool enabled = false;
  Type type = Type::kLlama3;
  float factor = 1.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int original_max_position = 8192;
};

enum class FfnActivation { kSilu, kGeluTanh };  // SwiGLU (Llama) or GeGLU (Gemma)

// Mixture of experts (Mixtral, Qwen2-MoE, Qwen3-MoE; src/model/moe.h): every layer's FFN is
// n_experts SwiGLU experts of expert_ffn_dim, of which a router picks n_experts_used per token.
// Routing weights are softmax(router logits) at the chosen experts, renormalised to sum to 1
// when norm_topk_prob (Mixtral's softmax over the top-k logits is exactly that; Qwen's
// norm_topk_prob flag). shared_ffn_dim > 0 adds Qwen2-MoE's shared expert, scaled by
// sigmoid(shared gate . x). n_experts == 0: a dense FFN of ffn_dim.
struct MoeConfig {
  int n_experts = 0;
  int n_experts_used = 0;
  int expert_ffn_dim = 0;
  bool norm_topk_prob = true;
  int shared_ffn_dim = 0;

  bool enabled() const { return n_experts > 0; }
};

struct ModelConfig {
  // "llama" (Llama, Mistral, SmolLM, TinyLlama, Mixtral), "qwen2" or "qwen3"; also the GGUF
  // general.architecture the model is written as (with moe: qwen2moe, qwen3moe; see
  // gguf_architecture() in moe.h).
  std::string arch = "llama";
  std::string name;
  int n_vocab = 0;
  int dim = 0;
  int n_layers = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int ffn_dim = 0;
  int max_seq_len = 2048;
  float norm_eps = 1e-5f;
  float rope_theta = 10000.0f;
  RopeScaling rope_scaling;
  // Explicit per-pair frequency divisors (GGUF "rope_freqs.weight"); when set, they replace
  // the ones rope_scaling implies.
  std::vector<float> rope_factors;
  // Phi-3 LongRoPE (rope_scaling "longrope" / "su"): per-pair divisors for a context up to
  // rope_original_context (short) and beyond it (long). The set is chosen once, by
  // max_seq_len, as llama.cpp chooses by its context (transformers switches per forward call
  // on the sequence length, which a KV cache cannot follow).
  std::vector<float> rope_factors_short, rope_factors_long;
  int rope_original_context = 0;
  // cos and sin are multiplied by this (transformers' attention_scaling, ggml's attn_factor),
  // so q.k by its square; Koi scales q by the square after rope.
  float rope_attn_factor = 1.0f;
  // Gemma 3: the sliding-window layers rotate with this base and no rope scaling; 0 means
  // they rotate as the global layers do.
  float rope_local_theta = 0.0f;
  bool tied_embeddings = false;
  bool qkv_bias = false;
  // Qwen3: each head of Q and K is RMS-normalised (weights [head_dim]) before rope.
  bool qk_norm = false;
  // Gemma 2. post_norms: the attention and FFN outputs are RMS-normalised (attn_post_norm,
  // ffn_post_norm) before they join the residual stream. Norm weights are always stored as
  // the factor itself (Gemma's 1 + w is added at load, as llama.cpp's converter does).
  bool post_norms = false;
  FfnActivation ffn_activation = FfnActivation::kSilu;
  float embedding_scale = 1.0f;   // token embeddings are multiplied by this (Gemma: sqrt(dim))
  float attn_scale = 0.0f;        // q.k multiplier; 0 means 1 / sqrt(head_dim)
  float attn_softcap = 0.0f;      // scores = cap * tanh(scores / cap) when > 0
  float final_softcap = 0.0f;     // the same on the output logits
  // Sliding-window attention: layer l attends to the last sliding_window positions (itself
  // included) when sliding_pattern is 0 (every layer: Mistral, Phi-3) or when
  // l % sliding_pattern < sliding_pattern - 1 (llama.cpp's swa pattern; Gemma 2: pattern 2,
  // the even layers; Gemma 3: pattern 6, five local layers to one global). A sliding_window
  // of 0 means every layer attends to the whole context.
  int sliding_window = 0;
  int sliding_pattern = 0;
  kernels::RopeStyle rope_style = kernels::RopeStyle::kNeox;
  MoeConfig moe;

  int q_dim() const { return n_heads * head_dim; }
  int kv_dim() const { return n_kv_heads * head_dim; }
  // The attention window of `layer` in positions, or 0 for the whole context.
  int window_of(int layer) const {
    if (sliding_window <= 0) return 0;
    return sliding_pattern == 0 || layer % sliding_pattern < sliding_pattern - 1 ? sliding_window : 0;
  }
  float attention_scale() const { return attn_scale > 0.0f ? attn_scale : 1.0f / std::sqrt(static_cast<float>(head_dim)); }
  // Checks that the numbers describe a model Koi can run; names the offending field.
  Status validate() const;
  // Rotation frequency of each of the head_dim/2 rope pairs, after rope scaling.
  std::vector<float> rope_inv_freq() const;
  // The same for `layer`: the sliding-window layers of a model with rope_local_theta rotate
  // with that base, unscaled (Gemma 3); every other layer with rope_inv_freq().
  std::vector<float> rope_inv_freq_of(int layer) const;
  // Per-pair divisors that turn the unscaled frequencies into rope_inv_freq() (the
  // "rope_freqs" tensor llama.cpp stores for Llama 3; the LongRoPE set max_seq_len picks);
  // empty when there is no scaling.
  std::vector<float> rope_freq_factors() const;
  // Number of parameters implied by the shape (for reports).
  int64_t num_parameters() const;
};

}  // namespace koi::model
