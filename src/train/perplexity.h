// Loss and perplexity of a model over a token sequence (what llama-perplexity reports), with
// the inference forward pass the server uses (model::LlamaModel over a paged KV cache).
//
// The tokens are covered by windows of `context` tokens that start every `stride` tokens
// (the Hugging Face "strided" evaluation): each token after the first is predicted once,
// from the window that first contains it with its predecessor, so every prediction sees
// at least context - stride tokens of history (all of it in the first window).
// A plain function; runs on the pool, which the caller must own. `progress`, when set, is
// called on the calling thread after every window.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "model/llama.h"

namespace koi::train {

struct PerplexityResult {
  int64_t tokens = 0;   // predictions scored
  int64_t windows = 0;
  double loss = 0.0;    // mean negative log-likelihood, nats per token
  double perplexity = 0.0;  // exp(loss)
};

// After each window: the predictions scored so far (loss and perplexity over them) and the
// number there will be in all (tokens.size() - 1).
struct PerplexityProgress {
  PerplexityResult so_far;
  int64_t total_tokens = 0;
};

// context: 2..max_seq_len; stride: 1..context-1. Fails on fewer than 2 tokens, or a kv_dtype
// the model's heads cannot be stored in (model::check_kv_dtype). The KV cache is kept in kv_dtype
// (f32, f16 or q8_0), as an engine with that --kv-dtype keeps it.
Result<PerplexityResult> evaluate_perplexity(model::LlamaModel& model, const std::vector<int32_t>& tokens,
                                             int context, int stride, ThreadPool* pool,
                                             const std::function<void(const PerplexityProgress&)>& progress = {},
                                             DType kv_dtype = DType::kF32);

}  // namespace koi::train
