#include "train/perplexity.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace koi::train {

Result<PerplexityResult> evaluate_perplexity(model::LlamaModel& model, const std::vector<int32_t>& tokens,
                                             int context, int stride, ThreadPool* pool,
                                             const std::function<void(const PerplexityProgress&)>& progress,
                                             DType kv_dtype) {
  const model::ModelConfig& c = model.config();
  if (context < 2 || context > c.max_seq_len) {
    return Status::invalid_argument("the context must be between 2 and the model's " + std::to_string(c.max_seq_len) +
                                    " tokens, got " + std::to_string(context));
  }
  if (stride < 1 || stride >= context) {
    return Status::invalid_argument("the stride must be between 1 and context - 1, got " + std::to_string(stride));
  }
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n < 2) return Status::invalid_argument("the text has " + std::to_string(n) + " tokens; at least 2 are needed");

  KOI_RETURN_IF_ERROR(model::check_kv_dtype(kv_dtype, c.head_dim));
  constexpr int kBlockSize = 16;
  const int num_blocks = (context + kBlockSize - 1) / kBlockSize;
  model::KvCache kv(model.kv_shape(num_blocks, kBlockSize, kv_dtype));
  std::vector<int32_t> block_table(static_cast<size_t>(num_blocks));
  std::iota(block_table.begin(), block_table.end(), 0);
  std::vector<float> logits;
  PerplexityResult r;
  double nll = 0.0;
  int64_t scored_until = 1;  // tokens [0, scored_until) have been predicted (token 0 never is)
  for (int64_t begin = 0; scored_until < n; begin += stride) {
    const int64_t end = std::min(begin + context, n);
    model::ForwardBatch batch;
    batch.sequences.push_back({block_table});
    for (int64_t i = begin; i < end; ++i) {
      batch.token_ids.push_back(tokens[static_cast<size_t>(i)]);
      batch.positions.push_back(static_cast<int32_t>(i - begin));
      batch.seq_index.push_back(0);
      // Logits of token i predict token i + 1; keep those not scored yet.
      if (i + 1 >= scored_until && i + 1 < end) batch.logit_indices.push_back(static_cast<int32_t>(i - begin));
    }
    logits.resize(batch.logit_indices.size() * static_cast<size_t>(c.n_vocab));
    KOI_RETURN_IF_ERROR(model.forward(batch, kv, logits.data(), pool));
    for (size_t r_idx = 0; r_idx < batch.logit_indices.size(); ++r_idx) {
      const float* row = logits.data() + r_idx * static_cast<size_t>(c.n_vocab);
      const int32_t target = tokens[static_cast<size_t>(begin + batch.logit_indices[r_idx] + 1)];
      const float max = *std::max_element(row, row + c.n_vocab);
      double sum = 0.0;
      for (int v = 0; v < c.n_vocab; ++v) sum += std::exp(static_cast<double>(row[v] - max));
      nll += std::log(sum) - static_cast<double>(row[target] - max);
    }
    r.tokens += static_cast<int64_t>(batch.logit_indices.size());
    ++r.windows;
    scored_until = end;
    r.loss = nll / static_cast<double>(r.tokens);
    r.perplexity = std::exp(r.loss);
    if (progress) progress({r, n - 1});
  }
  return r;
}

}  // namespace koi::train
