#include "engine/llama_runner.h"

namespace koi::engine {

LlamaRunner::LlamaRunner(model::LlamaModel& model, int num_blocks, int block_size, int num_threads, DType kv_dtype,
                         bool split_windows, ThreadPool::Placement placement)
    : model_(model),
      kv_(model.kv_shape(num_blocks, block_size, kv_dtype, split_windows)),
      pool_(num_threads, placement) {}

Status LlamaRunner::forward(const model::ForwardBatch& batch, float* logits) {
  return model_.forward(batch, kv_, logits, &pool_);
}

}  // namespace koi::engine
