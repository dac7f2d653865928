// LlamaTrain: forward and backward passes of the Llama family for training, in fp32 on CPU
// (the llm.c train_gpt2.c design: one flat parameter buffer, one flat gradient buffer of
// the same layout, every activation of the forward pass kept for the backward pass).
//
// Shapes in comments use B (batch), T (sequence length), N = B*T tokens, C (dim), H/KV
// (query/key-value heads), D (head_dim), F (ffn_dim), V (vocabulary). Weight matrices are
// row-major [out, in] (the Hugging Face layout, ggml {in, out}), so params() can be written
// as a safetensors file and read back by Koi's loader or by PyTorch.
//
// forward() computes the mean cross-entropy of next-token prediction; backward() adds
// loss_scale * d(sum of per-token losses)/d(params) into grads() (with experts, each token's
// loss also carries the router's load-balancing term, aux_loss()) (accumulation: call
// zero_grad() yourself); with LoRA adapters (add_lora) the base is frozen and the gradient
// goes to the adapters only. Results do not depend on the number of threads: every reduction
// has a fixed order (the kernels' determinism contract), which is what makes a resumed run
// bit-identical. Not thread-safe; the work runs on the ThreadPool given at construction,
// whose owner must be the caller.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "base/trace.h"
#include "model/model_config.h"
#include "model/weights.h"
#include "train/collectives.h"
#include "train/lora.h"
#include "train/moe_train.h"
#include "train/param_tensor.h"

namespace koi::train {

// The parameter tensors of a config, in a fixed order; the last one ends at the total size.
std::vector<ParamTensor> param_layout(const model::ModelConfig& config);

// Sharded data parallel (ZeRO-2/3, zero.h) streams the weights and the gradients through the
// passes one unit at a time. Unit l < n_layers is layer l; the last unit (the root) holds the
// rest: the embedding, the final norm and the output. A unit's buffer holds its pieces of the
// flat layout (LlamaTrain::unit_pieces) one after the other. Calls come in this order:
//   forward:  forward_params(root); per layer l = 0..: forward_params(l), forward_done(l);
//             forward_done(root)
//   backward: backward_params(root), backward_grads(root); per layer l = n_layers-1..0:
//             backward_params(l), backward_grads(l), backward_done(l); backward_done(root)
// A returned pointer stays valid until the unit's *_done call. The implementation decides
// what to do about failures (LlamaTrain's passes do not return a Status).
class UnitStream {
 public:
  virtual ~UnitStream() = default;
  // The unit's weights; nullptr: they are in params().
  virtual const float* forward_params(int unit) = 0;
  virtual void forward_done(int unit) = 0;
  virtual const float* backward_params(int unit) = 0;
  // A zeroed buffer the unit's gradient is written into (the stream sums it over the ranks
  // and micro-batches after backward_done).
  virtual float* backward_grads(int unit) = 0;
  virtual void backward_done(int unit) = 0;
};

// Pointers into a flat buffer laid out by param_layout (params or grads).
struct LayerParams {
  float *attn_norm, *wq, *wk, *wv, *wo, *bq, *bk, *bv;  // biases nullptr without qkv_bias
  float *ffn_norm, *w_gate, *w_up, *w_down;  // nullptr with experts (moe)
  MoeParams moe;                              // Mixtral / Qwen-MoE FFN (moe_train.h)
};
struct Params {
  float* token_embd;  // (V, C)
  std::vector<LayerParams> layers;
  float* output_norm;  // (C)
  float* output;       // (V, C); == token_embd when tied
};

// init_random's value of tensor `index` of a model's layout (t = layout[index], of a model of
// n_layers layers) into dst (t.size floats): each tensor is a function of (seed, index) alone,
// so a tensor-parallel shard can be made one tensor at a time (TensorParallel::init_random).
void init_random_tensor(const ParamTensor& t, size_t index, int n_layers, uint64_t seed, float* dst);

class LlamaTrain {
 public:
  // config must validate(); rope_scaling and rope_factors are not supported for training.
  static Result<LlamaTrain> create(const model::ModelConfig& config, ThreadPool* pool);

  const model::ModelConfig& config() const { return config_; }
  const std::vector<ParamTensor>& layout() const { return layout_; }
  std::vector<float>& params() { return params_; }
  const std::vector<float>& params() const { return params_; }
  std::vector<float>& grads() { return grads_; }

  // Adds LoRA adapters (lora.h, initialised with seed) and freezes every base weight: from
  // then on backward() computes only the adapters' gradients (the base gradient buffer is
  // released) and forward() adds the adapters' outputs.
  Status add_lora(const LoraConfig& config, uint64_t seed);
  LoraAdapters* lora() { return lora_ ? &*lora_ : nullptr; }
  const LoraAdapters* lora() const { return lora_ ? &*lora_ : nullptr; }
  // What an optimizer updates: the adapters with LoRA, else every weight.
  std::vector<float>& trainable_params() { return lora_ ? lora_->params() : params_; }
  std::vector<float>& trainable_grads() { return lora_ ? lora_->grads() : grads_; }
  const std::vector<ParamTensor>& trainable_layout() const { return lora_ ? lora_->layout() : layout_; }

  // GPT-2 style initialisation: N(0, 0.02) matrices and embeddings, output projections
  // (o_proj, down_proj) scaled by 1/sqrt(2 * n_layers), norms 1, biases 0.
  void init_random(uint64_t seed);
  // Copies weights of the same config (any dtype the loader gives) into params().
  Status load(const model::ModelWeights& weights);
  // Views of params() in the model module's layout (for export and inference); valid while
  // this object lives and params() is not resized.
  model::ModelWeights weights_view() const;

  // inputs, targets: (B, T) token ids; T <= max_seq_len. Returns the mean loss over N.
  float forward(const int32_t* inputs, const int32_t* targets, int B, int T);
  // Mixture of experts: the weight of the router's load-balancing loss (moe_train.h) in the
  // trained objective; 0 (the default) trains without it.
  void set_moe_aux_loss_coef(float coef) { moe_aux_coef_ = coef; }
  // coef * mean over layers of the last forward()'s aux loss (0 for dense models). forward()
  // returns the cross-entropy alone; the objective backward() differentiates is their sum.
  float aux_loss() const { return aux_loss_; }
  // (B*T, V) softmax of the logits of the last forward() (under tp: this shard's columns).
  const float* probs() const { return probs_.data(); }
  // Zeroes the gradients of what is trained (trainable_grads()).
  void zero_grad();
  // After forward(): grads += loss_scale * d(sum of the N token losses)/d(params).
  // loss_scale = 1/N gives the gradient of the mean loss.
  void backward(float loss_scale);
  // Units (UnitStream): n_layers + 1, the root last; a unit's ranges of the flat layout.
  int num_units() const { return config_.n_layers + 1; }
  std::vector<Range> unit_pieces(int unit) const;
  // Takes weights and gradients from `stream` (owned by the caller; nullptr: params() and
  // grads() as usual). The caller may then release params() and grads(). Not with LoRA.
  void set_unit_stream(UnitStream* stream) { stream_ = stream; }
  // Records a span per layer ("layer L") and for the head ("head") inside forward() and
  // backward() on track 0 of `trace` (koi train --profile); nullptr: none.
  void set_trace(trace::Recorder* trace) { trace_ = trace; }
  // Tensor parallelism (tensor_parallel.h): this model is one rank's shard (its config is the
  // shard's) and tp (which must outlive it) sums the row-parallel outputs in forward() and the
  // column-parallel inputs' gradients in backward(). The vocabulary is split too: this shard's
  // embedding and head rows are token ids [vocab_begin, vocab_begin + n_vocab) of vocab_full
  // (rows past vocab_full are padding). A failed collective is kept in parallel_status()
  // (check it after forward() and backward()); later ones are skipped.
  void set_tensor_parallel(Communicator* tp, int64_t vocab_begin, int64_t vocab_full) {
    tp_ = tp, vocab_begin_ = vocab_begin, vocab_full_ = vocab_full;
  }
  const Status& parallel_status() const { return tp_status_; }

  // Expert parallelism (moe_train.h): the experts of every MoE layer split over comm's ranks,
  // each of which runs forward() and backward() on its own share of the batch together;
  // comm must outlive this. nullptr: every expert here (the default).
  void set_expert_parallel(Communicator* comm) { ep_.comm = comm; }
  // Data parallelism over comm's ranks (and under expert parallelism the ep group): their
  // shares make one batch, so statistics of the whole batch (the router's load-balancing loss,
  // moe_train.h) are summed over them in forward(). comm must outlive this; nullptr: this
  // rank's share is the batch (the default).
  void set_batch_group(Communicator* comm) { batch_group_ = comm; }

  // Pipeline parallelism (pipeline.h): from now on forward() and backward() run layers
  // [begin, end) only, and activations are kept for those layers only. A stage with
  // begin > 0 has no embedding: its input residual is written into stage_input() before
  // forward(), and backward() leaves the gradient of that input in stage_input_grad(). A stage
  // with end < n_layers has no head: forward() stops at the residual leaving layer end - 1
  // (stage_output()) and returns 0, and backward() starts from the gradient written into
  // stage_output_grad() (loss_scale then unused). The default range is every layer.
  void set_layer_range(int begin, int end);
  int layer_begin() const { return layer_begin_; }
  int layer_end() const { return layer_end_; }
  float* stage_input(int B, int T);           // (B*T, C); sizes the activations for B x T
  const float* stage_output() const { return x_out_.data(); }  // (B*T, C) after forward()
  float* stage_output_grad(int B, int T);     // (B*T, C)
  const float* stage_input_grad() const { return dx_.data(); }  // (B*T, C) after backward()

  // Everything forward() keeps for backward() (SavedActivations, below): a pipeline stage
  // keeps one set per micro-batch in flight and swaps it in before that micro-batch's
  // forward() or backward() and out after.
  struct SavedActivations;
  void swap_activations(SavedActivations& other);

 private:
  LlamaTrain(model::ModelConfig config, ThreadPool* pool);
  Params bind(float* base) const;
  // Slots of the tensors of `unit` in its buffer (pieces one after the other); others nullptr.
  Params bind_unit(const float* buffer, int unit) const;
  // The weights of unit (from the stream, or params()), for the forward or the backward pass.
  Params unit_params(int unit, bool backward);
  // Its gradient slots (from the stream, or grads(); every slot nullptr with LoRA).
  Params unit_grads(int unit);
  void unit_done(int unit, bool backward) {
    if (stream_ == nullptr) return;
    if (backward) {
      stream_->backward_done(unit);
    } else {
      stream_->forward_done(unit);
    }
  }
  void resize_activations(int B, int T);
  void head_backward(const Params& p, const Params& g, float loss_scale);
  void attention_forward(int layer);
  void attention_backward(int layer, const float* dout, float* dq, float* dk, float* dv);
  void lora_forward(int layer, LoraTarget target, const float* x, float* y, int64_t N);
  void lora_backward(int layer, LoraTarget target, const float* x, const float* dy, float* dx, int64_t N);
  // Sums x over the tensor-parallel ranks (nothing without them).
  void tp_allreduce(float* x, int64_t n, const char* what);

  model::ModelConfig config_;
  ThreadPool* pool_;
  trace::Recorder* trace_ = nullptr;
  Communicator* tp_ = nullptr;
  Status tp_status_;
  int64_t vocab_begin_ = 0, vocab_full_ = 0;  // vocab_full_ 0: not split
  // Token ids [vocab_begin_, ...) this model's embedding and head rows hold (all but padding).
  int64_t vocab_valid() const;
  // probs_ = softmax of the logits in it; returns the sum of the N tokens' -log p[target].
  double softmax_cross_entropy(int64_t N);
  UnitStream* stream_ = nullptr;
  std::vector<ParamTensor> layout_;
  std::vector<float> params_, grads_;
  std::optional<LoraAdapters> lora_;
  std::vector<float> rope_cos_, rope_sin_;  // (max_seq_len, D/2)

  int layer_begin_ = 0, layer_end_;  // set_layer_range()
  ExpertParallel ep_;                 // set_expert_parallel(); comm nullptr: off
  Communicator* batch_group_ = nullptr;  // set_batch_group()

 public:
  // Activations of the last forward(), sized for B x T.
  struct LayerActs {
    std::vector<float> x_in;      // (N, C) residual stream entering the layer
    std::vector<float> rstd1;     // (N) 1/rms of x_in
    std::vector<float> xn1;       // (N, C) attention norm output
    std::vector<float> q, k, v;   // (N, H*D), (N, KV*D), (N, KV*D); q and k after bias and rope
    std::vector<float> att;       // (B, H, T, T) softmax probabilities, causal
    std::vector<float> attn_out;  // (N, H*D)
    std::vector<float> x_mid;     // (N, C) residual after attention
    std::vector<float> rstd2;     // (N)
    std::vector<float> xn2;       // (N, C)
    std::vector<float> gate, up;  // (N, F) before the activation
    std::vector<float> sig;       // (N, F) sigmoid(gate)
    std::vector<float> h;         // (N, F) silu(gate) * up = gate * sig * up
  };
  struct SavedActivations {
    int B = 0, T = 0;
    float aux_loss = 0.0f;
    std::vector<LayerActs> acts;
    std::vector<MoeActs> moe_acts;
    std::vector<float> x_out, rstd_f, xn_f, probs;
    std::vector<int32_t> inputs, targets;
  };

 private:
  int B_ = 0, T_ = 0;
  std::vector<LayerActs> acts_;
  std::vector<MoeActs> moe_acts_;  // per layer, with experts
  MoeScratch moe_scratch_;
  float moe_aux_coef_ = 0.0f, aux_loss_ = 0.0f;
  std::vector<float> x_out_, rstd_f_, xn_f_;  // (N, C), (N), (N, C)
  std::vector<float> probs_;                  // (N, V) softmax of the logits
  std::vector<int32_t> inputs_, targets_;     // (N)
  // Backward scratch.
  std::vector<float> dx_, dxn_, dq_, dk_, dv_, dattn_, dh_, dgate_, dup_, dlogits_;
};

}  // namespace koi::train
