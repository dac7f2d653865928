// LlamaModel: the forward pass of the Llama family (Llama 1/2/3, Mistral, Qwen2, Qwen3,
// Gemma 2/3, Phi-3, SmolLM, TinyLlama, and the mixture-of-experts Mixtral / Qwen2-MoE /
// Qwen3-MoE, whose FFN is MoeFfn, moe.h) on CPU, in fp32 over f32/f16/bf16/q8_0/q4_0 weights.
//
// forward() runs one ForwardBatch (any mix of prefill chunks and decode tokens from many
// sequences) over a paged KvCache and writes the logits of the requested tokens. A token's
// result depends only on its own sequence's tokens, never on the rest of the batch
// (batch invariance), because every kernel keeps a fixed reduction order per row.
// Not thread-safe: one thread (the engine's) calls forward(); the work inside runs on the
// ThreadPool given at construction. Scratch memory is reused across calls. The constructor packs
// the q8_0/q4_0 matrices once (packed_weights.h).
#pragma once

#include <memory>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "base/trace.h"
#include "kernels/attention.h"
#include "model/forward_batch.h"
#include "model/kv_cache.h"
#include "model/lora.h"
#include "model/model_config.h"
#include "model/moe.h"
#include "model/packed_weights.h"
#include "model/weights.h"

namespace koi::model {

class LlamaModel {
 public:
  LlamaModel(ModelConfig config, ModelWeights weights);

  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }
  // The per-step matrices as the forward pass reads them (packed once here, packed_weights.h).
  const PackedWeights& packed() const { return packed_; }

  // Shape of a KV cache for this model with the given number of blocks, stored as `dtype`
  // (check_kv_dtype(dtype, config().head_dim) must hold to build a KvCache of it). With
  // split_windows, a model with sliding-window layers keeps them in the window table
  // (KvCacheShape::windowed), so the engine can release their blocks that left the window.
  KvCacheShape kv_shape(int num_blocks, int block_size = 16, DType dtype = DType::kF32,
                        bool split_windows = false) const;

  // Checks the batch against the cache (block tables long enough, positions in range,
  // token ids in the vocabulary), then computes; logits is [logit_indices.size(), n_vocab].
  Status forward(const ForwardBatch& batch, KvCache& kv, float* logits, ThreadPool* pool);

  // From now on forward() records its parts on track 0 of `trace` (the engine's profile):
  // "embed", per layer "layer N" holding "qkv" (norm, projections, rope, KV write),
  // "attention", "wo", "ffn up" (norm, gate and up, activation) and "ffn down", then "head".
  // nullptr (the default): nothing is recorded. `trace` must outlive its use here.
  void set_trace(trace::Recorder* trace) { trace_ = trace; }

 private:
  // The batch's adapters as a table and, per token, its index there (-1: none); empty when
  // no sequence names one.
  void gather_adapters(const ForwardBatch& batch);
  // y [T, out] += the LoRA update of (layer, target) for the tokens with adapters; x is [T, in].
  void add_lora(int layer, LoraTarget target, const float* x, float* y, int64_t T, ThreadPool* pool);
  void attention(const ForwardBatch& batch, KvCache& kv, int layer, ThreadPool* pool);
  // Scaled, soft-capped or sliding-window layers: the per-(token, head) loop.
  void attention_general(const ForwardBatch& batch, KvCache& kv, int layer, ThreadPool* pool);

  ModelConfig config_;
  ModelWeights weights_;
  PackedWeights packed_;  // views into weights_
  // The distinct rotary frequency sets (Gemma 3's local layers rotate apart from its global ones)
  // and each layer's index into them.
  std::vector<std::vector<float>> inv_freq_;
  std::vector<int> inv_freq_of_layer_;
  // Scratch, sized for the largest batch seen: activations [n_tokens, width].
  std::vector<float> x_, xn_, q_, k_, v_, attn_out_, proj_, gate_, up_, logit_in_;
  // Per frequency set and token: cos then sin of the token's rotary angles [head_dim / 2 each],
  // computed once per forward pass instead of once per layer.
  std::vector<float> rope_cos_sin_;
  std::vector<kernels::AttentionRun> runs_;  // the batch as runs of one sequence (attention())
  trace::Recorder* trace_ = nullptr;
  std::vector<const LoraAdapter*> lora_table_;     // distinct adapters of the batch (gather_adapters())
  std::vector<int32_t> lora_row_;                  // per token: index into lora_table_, or -1
  std::vector<kernels::LoraMatrices> lora_matrices_;  // lora_table_'s matrices of one projection
  MoeFfn moe_;                               // the FFN of mixture-of-experts models
};

// Checks that every tensor has the shape and type the config implies; the message names
// the tensor ("blk.3.attn_k.weight has shape [64, 32], expected [64, 16]").
Status validate_weights(const ModelConfig& config, const ModelWeights& weights);
// One tensor's shape (ne innermost first) and, for norms and biases, type f32.
Status check_tensor(const TensorView& t, const std::string& name, std::initializer_list<int64_t> ne, bool f32_only);

}  // namespace koi::model
