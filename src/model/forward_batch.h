// ForwardBatch: what one forward pass computes, in the engine's terms and no others.
//
// A batch is a flat list of tokens from any mix of sequences: prefill chunks and decode
// tokens alike. Token t belongs to sequence seq_index[t] and sits at position positions[t]
// of that sequence. Its K and V are written to the paged cache at the slot its sequence's
// block table gives for that position (slot = block_table[pos / block_size] * block_size +
// pos % block_size), and it attends to positions 0..positions[t] of its own sequence, so
// earlier chunks must already be in the cache and a sequence's tokens in the batch are in
// increasing position order. Logits are produced only for the tokens listed in
// logit_indices, in that order. A sequence may name a LoRA adapter (model/lora.h), loaded
// for this model: its tokens then go through the adapted projections; sequences with
// different adapters, and with none, share one batch. The batch owns neither the block
// tables nor the adapters it points to.
// A cache that keeps sliding-window layers apart (model/kv_cache.h) takes their slots from the
// sequence's window table instead.
// on_layer_kv_written, when set, is called on the forward pass's thread once per layer, in layer
// order, right after that layer's K and V of every token of the batch are in the cache and
// before the next layer starts (KV transfer sends a layer's blocks the moment they exist,
// engine/kv_transfer.h). It must not block: the forward pass waits for it.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

namespace koi::model {

class LoraAdapter;

struct BatchSequence {
  std::span<const int32_t> block_table;  // physical block ids, in position order
  const LoraAdapter* lora = nullptr;     // null: the base model
  // With a split cache (KvCacheShape::split): the sliding-window layers' table, the same way;
  // entries for blocks wholly before a token's window are never read (the engine's kReleased).
  std::span<const int32_t> window_block_table = {};
};

struct ForwardBatch {
  std::vector<int32_t> token_ids;
  std::vector<int32_t> positions;
  std::vector<int32_t> seq_index;       // index into sequences, one per token
  std::vector<BatchSequence> sequences;
  std::vector<int32_t> logit_indices;   // token indices whose logits are wanted
  std::function<void(int layer)> on_layer_kv_written;  // optional; kept by clear()

  int64_t num_tokens() const { return static_cast<int64_t>(token_ids.size()); }
  void clear() {
    token_ids.clear();
    positions.clear();
    seq_index.clear();
    sequences.clear();
    logit_indices.clear();
  }
};

}  // namespace koi::model
