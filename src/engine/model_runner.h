// ModelRunner: what the engine needs from a model, and nothing more. The runner owns the
// model's weights and its paged KV memory (model::KvCache); the engine owns which block
// holds which sequence's tokens and hands block ids (indices into that KvCache) in each
// ForwardBatch. Implementations: the Llama family over src/model, and small deterministic
// runners in tests. Called only from the engine thread.
#pragma once

#include "base/status.h"
#include "base/thread_pool.h"
#include "base/trace.h"
#include "model/forward_batch.h"
#include "model/kv_cache.h"

namespace koi::engine {

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;
  virtual int n_vocab() const = 0;
  // Positions per sequence at most.
  virtual int max_context() const = 0;
  // Runs one ForwardBatch over the paged KV cache and writes logits
  // [batch.logit_indices.size(), n_vocab] (row-major). A failure leaves the engine's
  // state unchanged; the step can be retried.
  virtual Status forward(const model::ForwardBatch& batch, float* logits) = 0;
  // The paged KV memory, for copying blocks in and out (KV transfer between engines,
  // engine/kv_transfer.h); null when the runner has none to share (then the engine cannot
  // take part in a transfer).
  virtual model::KvCache* kv_memory() { return nullptr; }
  // Optional: from now on forward() records its parts (layers, ops) as spans on track 0 of
  // `trace`, inside the engine's "forward" span; nullptr stops it. Default: records nothing.
  virtual void set_trace(trace::Recorder* trace) { (void)trace; }
  // Optional: the runner's threads, which the engine borrows between forward() calls for work
  // that is independent per request (sampling); null: the engine does that work on its own thread.
  virtual ThreadPool* pool() { return nullptr; }
};

}  // namespace koi::engine
