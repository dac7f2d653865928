// Model FLOPs of a training step and the machine's measured matmul peak, for model FLOPs
// utilisation (MFU = achieved model FLOP/s / peak FLOP/s, as PaLM defines it: the FLOPs the
// model needs, not the ones the kernels happen to spend; recomputation would not count).
//
// FLOPs per token of the forward pass (a multiply-add is 2 FLOPs; d = dim, q = n_heads *
// head_dim, kv = n_kv_heads * head_dim, f = ffn_dim, V = n_vocab, T = sequence length):
//   per layer
//     q, k, v projections    2 d q + 2 * 2 d kv   (+ q + 2 kv with qkv_bias)
//     attention scores Q K^T 2 q (T + 1) / 2      (causal: token t sees t + 1 keys, mean (T+1)/2)
//     attention values  P V  2 q (T + 1) / 2
//     output projection      2 q d
//     SwiGLU feed-forward    3 * 2 d f            (gate, up, down)
//       with experts:        2 d E + k * 3 * 2 d F (+ 2 d + 3 * 2 d Fs with a shared expert): the
//                            router and only the k experts each token is routed to
//   once
//     LM head                2 d V
// Norms, RoPE, softmax, SiLU and the residual adds are O(d) per token and left out (under 1%
// for every recipe in recipes/), as are the embedding lookups (no FLOPs).
// A training step costs 3x the forward FLOPs (backward: the input gradient and the weight
// gradient, each as much as the forward); with LoRA the frozen base's weight gradients are not
// computed, so 2x (the adapters' own FLOPs are under 1% at the ranks used and left out).
#pragma once

#include <cstdint>

#include "base/thread_pool.h"
#include "model/model_config.h"

namespace koi::train {

struct LayerFlops {
  double qkv = 0.0, attention = 0.0, output = 0.0, ffn = 0.0;  // per token, forward
  double total() const { return qkv + attention + output + ffn; }
};

struct ModelFlops {
  LayerFlops layer;       // one transformer layer
  int n_layers = 0;
  double lm_head = 0.0;   // per token, forward
  double forward_per_token() const { return layer.total() * n_layers + lm_head; }
};

// The forward FLOPs per token of `config` at sequence length T.
ModelFlops model_flops(const model::ModelConfig& config, int T);

// FLOPs of one training token: 3x the forward (2x with frozen base weights, as LoRA).
double train_flops_per_token(const ModelFlops& flops, bool frozen_base);

// The best FLOP/s of the trainer's own fp32 matmul (linear_forward) on `pool`: a 256-token
// (256 x 1024) x (1024 x 1024)^T product timed `repetitions` times, the fastest kept (about
// 5 ms each on one core, short enough that on a shared machine some repetitions run
// unpreempted; fewer repetitions can underestimate the peak there, and MFU then exceeds 1).
double measure_peak_flops(ThreadPool* pool, int repetitions = 30);

}  // namespace koi::train
