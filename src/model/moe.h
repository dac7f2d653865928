// Mixture-of-experts FFN blocks (Mixtral, Qwen2-MoE, Qwen3-MoE) for the Llama family: the
// router, the routing rule shared by inference and training, the forward pass over a batch,
// and the MoE parts of loading (HF config.json, GGUF keys and llama.cpp's expert tensor
// names), validation and GGUF export.
//
// Routing (route_token): p = softmax(router logits over all experts); the k = n_experts_used
// largest p are chosen (ties to the lower expert index), in descending order; their weights
// are p, divided by their sum when norm_topk_prob (Mixtral: softmax over the top-k logits,
// the same numbers; Qwen: its norm_topk_prob flag). The block's output for token x is
//   sum_j w_j * down_ej(silu(gate_ej x) * up_ej x)  [+ sigmoid(s . x) * shared(x)]
// with the shared expert of Qwen2-MoE. A token's result depends only on its own row: the
// experts' rows go through kernels::matmul (fixed reduction order per row) and each token sums
// its k expert outputs in its own routing order, so the engine's batch invariance holds.
//
// MoeFfn owns scratch memory and is not thread-safe (one per LlamaModel, called by the
// engine's thread); the work inside runs on the ThreadPool it is given.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <boost/json/object.hpp>

#include "base/status.h"
#include "base/thread_pool.h"
#include "model/gguf.h"
#include "model/model_config.h"
#include "model/weights.h"

namespace koi::model {

// Picks the experts of one token: experts[k], weights[k] (k = n_experts_used) from logits
// [n_experts]; probs [n_experts] receives softmax(logits). Deterministic, no allocation.
void route_token(const MoeConfig& moe, const float* logits, float* probs, int32_t* experts, float* weights);

class MoeFfn {
 public:
  // out (T, dim) = the MoE block applied to xn (T, dim), overwriting out.
  void forward(const ModelConfig& config, const MoeLayerWeights& w, const float* xn, float* out, int64_t n_tokens,
               ThreadPool* pool);

 private:
  std::vector<float> logits_, probs_, weights_, rows_in_, gate_, up_, rows_out_, slot_out_, shared_;
  std::vector<int32_t> experts_, routed_;  // (T, k) chosen experts; one expert's (token * k + slot) list
};

// The MoE settings of ModelConfig::validate(): experts used in [1, n_experts], positive widths.
Status validate_moe_config(const MoeConfig& moe);
// Checks the shapes of one layer's MoE tensors against the config; names the tensor
// ("tensor blk.1.ffn_up_exps[3] is missing").
Status validate_moe_weights(const ModelConfig& config, const MoeLayerWeights& w, const std::string& prefix);
// Parameters of one layer's MoE block (router, experts, shared expert and its gate).
int64_t moe_layer_parameters(const ModelConfig& config);

// The GGUF general.architecture of a config: "qwen2moe" / "qwen3moe" for Qwen MoE models,
// else config.arch (Mixtral is "llama" with experts, as llama.cpp writes it).
std::string gguf_architecture(const ModelConfig& config);
// The config family of a GGUF architecture ("qwen2moe" -> "qwen2"); others unchanged.
std::string family_of_gguf_architecture(const std::string& gguf_arch);

// True for the HF architecture names of MoE families (MixtralForCausalLM, Qwen2MoeForCausalLM,
// Qwen3MoeForCausalLM and their model_type spellings).
bool is_moe_hf_architecture(const std::string& name);
// Reads the MoE fields of a config.json object for a config whose arch is already set.
// Refuses what Koi does not run (dense layers between sparse ones) with the field's name.
Status moe_from_hf(const boost::json::object& o, const std::string& hf_arch, const std::string& file, ModelConfig& c);
// Reads {arch}.expert_count and the other expert keys of a GGUF file, when it has them.
Status moe_from_gguf(const GgufFile& g, const std::string& gguf_arch, ModelConfig& c);

// A tensor of the loaded file by name (an empty view when absent).
using TensorGetter = std::function<TensorView(const std::string&)>;
// Fills one layer's MoE views: Hugging Face per-expert tensors (Mixtral's block_sparse_moe.*
// names for arch llama, Qwen's mlp.experts.* names otherwise) under "model.layers.N.", or GGUF's
// stacked blk.N.ffn_{gate,up,down}_exps (sliced per expert; a wrong 3-D shape is an error).
// Missing tensors stay empty views, for validate_moe_weights to name.
Status fill_moe_views(const ModelConfig& config, bool hf, int layer, const TensorGetter& get, MoeLayerWeights& w);
// The names Koi's trainer and HF exports use for one layer's MoE tensors (HF layout, [out, in]).
struct MoeHfNames {
  std::string router;
  std::vector<std::string> gate, up, down;  // per expert
  std::string shared_gate_inp, shared_gate, shared_up, shared_down;
};
MoeHfNames moe_hf_names(const ModelConfig& config, int layer);

// Sets the architecture and the MoE fields of a config.json being written for `config`
// (MixtralForCausalLM for arch llama, Qwen2MoeForCausalLM / Qwen3MoeForCausalLM).
void add_moe_hf_config(const ModelConfig& config, boost::json::object& o);
// Writes the MoE keys (expert_count, expert_used_count, ...) of `arch` to the writer.
void add_moe_metadata(const ModelConfig& config, const std::string& arch, GgufWriter& writer);
// The stacked 3-D expert tensors {in, out, n_experts} and the shared expert of one layer, in
// llama.cpp's names under prefix "blk.N."; `add` writes one 2-D tensor as the export does.
using TensorAdder = std::function<void(const std::string& name, const TensorView& t, bool matrix)>;
using StackedAdder = std::function<void(const std::string& name, const std::vector<TensorView>& experts)>;
void add_moe_tensors(const MoeLayerWeights& w, const std::string& prefix, const TensorAdder& add,
                     const StackedAdder& add_stacked);

}  // namespace koi::model
