#include "engine/llama_runner.h"

namespace koi::engine {

LlamaRunner::LlamaRunner(model::LlamaModel& model, int num_blocks, int block_size, int num_threads)
    : model_(model), kv_(model.kv_shape(num_blocks, block_size)), pool_(num_threads) {}

Status LlamaRunner::forward(const model::ForwardBatch& batch, float* logits) {
  return model_.forward(batch, kv_, logits, &pool_);
}

}  // namespace koi::engine
