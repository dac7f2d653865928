// The mixture-of-experts FFN block for training (LlamaTrain's FFN when ModelConfig::moe is
// set): forward with every activation kept, backward for the router, the experts and
// Qwen2-MoE's shared expert and its gate, and the router's auxiliary load-balancing loss.
//
// Routing is model::route_token, the rule inference uses (moe.h). Shapes: N tokens, C (dim),
// E experts, K chosen per token, F (expert_ffn_dim), Fs (shared_ffn_dim); weights row-major
// [out, in] in the flat parameter buffer, as the rest of LlamaTrain.
//
// Load-balancing loss (Switch Transformer; Megatron-LM's switch_load_balancing_loss), per MoE
// layer l:  aux_l = E * sum_e f_e * P_e, with f_e = (number of the N*K routing choices that
// picked e) / (N*K), which carries no gradient, and P_e = mean over the N tokens of
// softmax(router logits)_e. Balanced routing gives aux_l = 1. The trained objective is
// mean cross-entropy + coef * mean_l aux_l (coef: train.moe_aux_loss_coef).
//
// Expert parallel (ExpertParallel given): the experts are split over the ranks of a
// Communicator in contiguous ranges; each rank routes its own tokens (its part of the
// batch, as under data parallelism), each expert's rows go to the rank that owns it and its
// outputs come back with alltoallv, and the same in backward for the rows' gradients.
// Dropless: every routed row is computed (no capacity factor). An owner stacks an expert's
// rows by rank, then in slot order, which is the single-process order of the whole batch, so
// the expert passes and gradients are bitwise those of one process. Only the owner computes
// an expert's gradient (the others leave it 0, so the data-parallel gradient sum is it). A
// failed collective ends the job (Communicator::abort), as the caller cannot return it.
//
// The batch group (data parallel, and under expert parallelism the ep group, whose ranks split
// the batch too): the ranks whose tokens together make the batch. f_e and P_e of the
// load-balancing loss are summed over it, so aux_l is the whole batch's on every rank, as in
// one process; the backward pass needs nothing more (each rank's tokens get d aux_l / d P_e of
// the whole batch and the data-parallel gradient sum adds them). Without it each rank's
// statistics are its own tokens'.
//
// Plain functions over caller-owned buffers; every reduction has a fixed order (experts in
// index order, tokens in batch order), so results do not depend on the thread count.
#pragma once

#include <cstdint>
#include <vector>

#include "base/thread_pool.h"
#include "model/model_config.h"

namespace koi::train {

class Communicator;

// Experts split over comm's ranks (every rank holds the same batch share and calls the MoE
// passes together).
struct ExpertParallel {
  Communicator* comm = nullptr;
};

// Pointers into a flat buffer (params or grads) for one layer's MoE block.
struct MoeParams {
  float* router = nullptr;             // (E, C)
  std::vector<float*> gate, up, down;  // per expert (F, C), (F, C), (C, F)
  float* shared_gate_inp = nullptr;    // (1, C); nullptr without a shared expert
  float *shared_gate = nullptr, *shared_up = nullptr, *shared_down = nullptr;  // (Fs, C), (Fs, C), (C, Fs)
};

// The activations of one MoE layer's last forward, kept for its backward.
struct MoeActs {
  std::vector<float> logits, probs;     // (N, E) router logits and their softmax
  std::vector<int32_t> experts;         // (N, K) chosen experts, routing order
  std::vector<float> weights;           // (N, K) their routing weights
  std::vector<float> slot_out;          // (N*K, C) each chosen expert's output for its token
  std::vector<std::vector<int32_t>> routed;  // per expert: its (token * K + slot) rows, ascending
  std::vector<std::vector<float>> xin, gate, up, sig, h;  // per expert: (n_e, C), then (n_e, F)
  std::vector<float> frac;              // (E) f_e
  std::vector<int64_t> ep_counts;       // expert parallel: (ranks, E) rows each rank routed to each expert
  float aux = 0.0f;                     // aux_l
  // Shared expert: (N, Fs) pre-activations, sigmoid, product; (N, C) output; (N) gate.
  std::vector<float> s_gate, s_up, s_sig, s_h, s_out, s_scale;
};

// Backward scratch, reused across layers.
struct MoeScratch {
  std::vector<float> dslot, dw, dprobs, dlogits, dy, dh, dgate, dup, dxin;
};

// out (N, C) = the block applied to xn (N, C), overwriting out; fills acts. batch_group: the
// ranks whose N tokens each make the batch together (each calls this with the same N); nullptr:
// this rank's tokens are the batch.
void moe_forward(ThreadPool* pool, const model::ModelConfig& c, const MoeParams& p, const float* xn, float* out,
                 int64_t N, MoeActs& acts, const ExpertParallel* ep = nullptr, Communicator* batch_group = nullptr);

// After moe_forward: grads g += d/dparams and dxn (N, C) += d/dxn of
//   sum_n dout[n] . out[n]  +  aux_scale * aux_l.
void moe_backward(ThreadPool* pool, const model::ModelConfig& c, const MoeParams& p, const MoeParams& g,
                  const float* dout, const float* xn, const MoeActs& acts, float aux_scale, float* dxn, int64_t N,
                  MoeScratch& s, const ExpertParallel* ep = nullptr);

}  // namespace koi::train
