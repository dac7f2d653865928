// ModelWeights: views of every tensor the forward pass reads, and the storage behind them.
//
// The views usually point into memory-mapped files (GGUF, safetensors) held by `files`;
// weights converted at load time (llama2.c import, tests) live in `owned`. Moving a
// ModelWeights keeps the views valid (mappings and heap buffers do not move).
// Immutable after loading; safe to read from many threads.
#pragma once

#include <any>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace koi::model {

// A mixture-of-experts FFN (ModelConfig::moe). The experts' matrices are one view each,
// whether the file stores them one tensor per expert (Hugging Face) or stacked in 3-D (GGUF
// ffn_*_exps, expert e at row block e).
struct MoeLayerWeights {
  TensorView router;                                 // {dim, n_experts}   (ffn_gate_inp)
  std::vector<TensorView> gate, up, down;            // per expert {dim, F}, {dim, F}, {F, dim}
  TensorView shared_gate_inp;                        // {dim} or {dim, 1} (Qwen2-MoE), or absent
  TensorView shared_gate, shared_up, shared_down;    // {dim, Fs}, {dim, Fs}, {Fs, dim}, or absent
};

struct LayerWeights {
  TensorView attn_norm;            // f32 [dim]
  TensorView wq, wk, wv, wo;       // wq {dim, q_dim}, wk/wv {dim, kv_dim}, wo {q_dim, dim}
  TensorView bq, bk, bv;           // f32 biases (Qwen2), data == nullptr when absent
  TensorView attn_q_norm, attn_k_norm;  // f32 [head_dim] per-head Q/K RMSNorm (Qwen3), or absent
  TensorView attn_post_norm;       // f32 [dim] (Gemma 2), or absent
  TensorView ffn_norm;             // f32 [dim]
  TensorView ffn_post_norm;        // f32 [dim] (Gemma 2), or absent
  TensorView w_gate, w_up;         // {dim, ffn_dim}
  TensorView w_down;               // {ffn_dim, dim}
  MoeLayerWeights moe;             // with ModelConfig::moe instead of w_gate/w_up/w_down
};

struct ModelWeights {
  TensorView token_embd;           // {dim, n_vocab}
  std::vector<LayerWeights> layers;
  TensorView output_norm;          // f32 [dim]
  TensorView output;               // {dim, n_vocab}; the same as token_embd when tied

  // Keeps the storage alive: mapped files and owned buffers, type-erased.
  std::vector<std::shared_ptr<const void>> storage;
  // The read-only shared mappings of model files among the storage: the pages of a tensor that
  // lies in one may be given back (madvise), and read again they fault back in from the file.
  std::vector<std::span<const uint8_t>> file_mappings;

  // Adds an owned buffer and returns a pointer to its bytes.
  template <typename T>
  const T* own(std::vector<T> data) {
    auto p = std::make_shared<const std::vector<T>>(std::move(data));
    storage.push_back(p);
    return p->data();
  }
};

}  // namespace koi::model
