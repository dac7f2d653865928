// TensorParallel: Megatron-LM tensor parallelism for LlamaTrain over the tp group of a mesh
// (mesh.h).
//
// A tensor-parallel shard of a Llama model is itself a Llama model: the same dim and head_dim
// with n_heads / tp query heads, n_kv_heads / tp key-value heads and ffn_dim / tp hidden units.
// Rank r of tp holds
//   column-parallel (rows of [out, in] split): q_proj, k_proj, v_proj (and their biases) for
//     heads [r H/tp, (r+1) H/tp) and kv heads [r KV/tp, (r+1) KV/tp), so every query head
//     finds its GQA kv head (h / (H/KV)) on the same rank; gate_proj and up_proj rows
//     [r F/tp, (r+1) F/tp);
//   row-parallel (columns split): o_proj and down_proj, the same ranges of their inputs;
//   vocabulary-parallel: the embedding and the output head, rows (token ids)
//     [r Vs, (r+1) Vs) with Vs = ceil(V/tp); rows past V pad the last shards with zeros and
//     take no part (their logits are left out of the softmax);
//   replicated: the norms (computed on every rank).
// LlamaTrain runs its own forward and backward on shard_config() (n_vocab = Vs) and, given the
// tp communicator (set_tensor_parallel), sums the row-parallel outputs (attention output, down
// projection) in the forward pass and the gradients of the column-parallel inputs (the two
// normed activations) in the backward pass: one allreduce each, four per layer per step. The
// embedding lookup is summed over the ranks (each has its ids' rows), the cross-entropy runs
// on the vocabulary shards (vocab_parallel_cross_entropy) and the head's input gradient is
// summed. Replicated parameters then get the same gradient on every rank.
//
// This class maps between the full parameter vector (param_layout of the full config, what a
// checkpoint holds) and a rank's shard, and computes the gradient norm of the whole model.
// A plain value; the communicator must outlive it. Every method that communicates must be
// called on every rank of the tp group. create() fails with InvalidArgument when the heads, kv
// heads or ffn_dim do not divide by tp, and with Unsupported for experts or LoRA (the
// vocabulary need not divide: it is padded).
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "model/model_config.h"
#include "train/collectives.h"
#include "train/param_tensor.h"

namespace koi::train {

class TensorParallel {
 public:
  static Result<TensorParallel> create(const model::ModelConfig& full, Communicator* tp, bool lora);

  const model::ModelConfig& shard_config() const { return shard_config_; }
  // This rank's first token id and the full vocabulary (for LlamaTrain::set_tensor_parallel).
  int64_t vocab_begin() const { return tp_->rank() * shard_config_.n_vocab; }
  int64_t vocab_full() const { return vocab_full_; }
  int64_t full_size() const { return full_size_; }
  int64_t shard_size() const { return shard_size_; }

  // This rank's shard (shard_size floats) of a full parameter-shaped vector (weights, or
  // AdamW's m or v).
  void slice(const float* full, float* shard) const;
  // This rank's shard of LlamaTrain::init_random(seed) on the full model, bitwise slice() of
  // it, made one full tensor at a time: the largest tensor (the embedding), not the whole
  // model, is held besides the shard. No communication.
  void init_random(uint64_t seed, float* shard) const;
  // Copies this rank's slice of tensor `index` of the full layout (whole: that tensor alone, as
  // a checkpoint holds it) into its place in shard.
  void slice_tensor(size_t index, const float* whole, float* shard) const;
  const std::vector<ParamTensor>& full_layout() const { return full_layout_; }
  // The full vector from every rank's shard (an allgather over tp; every rank gets it).
  Status gather(const std::vector<float>& shard, std::vector<float>* full, const char* what) const;
  // Clips the gradient of the whole model (this rank's shard in grads) to max_norm as
  // clip_grad_norm does on the full vector; returns the norm before clipping.
  Result<float> clip_grad_norm(std::vector<float>& grads, float max_norm) const;
  // The squared gradient norm of the whole model's tensors whose shards lie in [begin, end) of
  // the shard (a pipeline stage's slice; tensors never straddle it): the split tensors summed
  // over the tp group, the replicated ones counted once. Every tp rank gets the same value.
  Result<double> grad_sum_of_squares(const std::vector<float>& grads, int64_t begin, int64_t end) const;

 private:
  // One tensor: where it lies in the full and the shard vector, and how it is cut.
  struct Piece {
    int64_t full_offset = 0, shard_offset = 0;
    int64_t rows = 0, cols = 0;  // of the full tensor (a vector: rows x 1)
    int64_t shard_rows = 0, shard_cols = 0;
    enum class Cut { kReplicated, kRows, kCols } cut = Cut::kReplicated;
  };
  // Copies between the full tensor and rank `part`'s shard of it (to_shard: full -> shard).
  void copy_piece(const Piece& p, int part, float* full, float* shard, bool to_shard) const;

  Communicator* tp_ = nullptr;
  model::ModelConfig shard_config_;
  std::vector<Piece> pieces_;
  std::vector<ParamTensor> full_layout_;  // pieces_[i] is full_layout_[i]
  int64_t full_size_ = 0, shard_size_ = 0, vocab_full_ = 0;
};

// Megatron's vocabulary-parallel softmax cross-entropy. logits (N, V_local) hold this rank's
// columns [vocab_begin, vocab_begin + V_local) of the full logits, the first `valid` of them real
// (the rest pad the vocabulary). Replaces them by the same columns of the softmax over the full
// vocabulary (padding 0) and returns sum_n -log p[n, targets[n]], the same on every rank.
// Collectives over tp: an allgather of the row maxima, one allreduce of the row sums.
Result<double> vocab_parallel_cross_entropy(Communicator& tp, ThreadPool* pool, float* logits, const int32_t* targets,
                                            int64_t N, int64_t V_local, int64_t vocab_begin, int64_t valid);

}  // namespace koi::train
