// LlamaRunner: the ModelRunner of the Llama family — a LlamaModel, its paged KvCache and
// the thread pool the forward pass runs on. Owns the KV memory; the engine owns which
// block belongs to whom. Called only from the engine thread.
#pragma once

#include <cstdint>
#include <memory>

#include "base/thread_pool.h"
#include "engine/model_runner.h"
#include "model/kv_cache.h"
#include "model/llama.h"

namespace koi::engine {

class LlamaRunner final : public ModelRunner {
 public:
  // `model` must outlive the runner; kv_dtype must pass model::check_kv_dtype for its heads.
  // With split_windows, a model's sliding-window layers keep their KV apart
  // (LlamaModel::kv_shape), and the Engine releases their blocks that left the window.
  // `placement`: whether the pool's threads are pinned (base/thread_pool.h).
  LlamaRunner(model::LlamaModel& model, int num_blocks, int block_size, int num_threads,
              DType kv_dtype = DType::kF32, bool split_windows = false,
              ThreadPool::Placement placement = ThreadPool::Placement::kFloat);

  int n_vocab() const override { return model_.config().n_vocab; }
  int max_context() const override { return model_.config().max_seq_len; }
  Status forward(const model::ForwardBatch& batch, float* logits) override;

  const model::KvCache& kv_cache() const { return kv_; }
  model::KvCache* kv_memory() override { return &kv_; }
  void set_trace(trace::Recorder* trace) override { model_.set_trace(trace); }
  int num_threads() const { return pool_.num_threads(); }
  ThreadPool* pool() override { return &pool_; }

 private:
  model::LlamaModel& model_;
  model::KvCache kv_;
  ThreadPool pool_;
};

}  // namespace koi::engine
