// KV transfer between engines (prefill/decode disaggregation), the engine's half: what one
// engine hands to or takes from a transfer thread. No networking here; the wire protocol and
// the threads that move bytes live in serve/ (serve/kv_transfer_*.h, docs/kv-transfer.md).
//
// Decode side: a request submitted with a KvImport is not queued for prefill. The engine
// reserves blocks for its whole prompt at once (its own prefix-cache hits included, so those
// are never sent), tells the transfer thread which blocks to fill (KvImport::reserved), and
// polls the import at every step. When the transfer thread reports the first sampled token
// and the sampler state (complete), the request joins the running batch with its prompt
// computed. When the transfer fails or its lease runs out (fail, or the deadline), the engine
// cancels the import — from then on no byte is written into its blocks — keeps the leading
// blocks that arrived whole as prefix-cache entries, releases the lease and queues the request
// for ordinary local prefill. Either way the reserved blocks are released exactly once.
//
// Prefill side: a request submitted with a KvExport runs like any other (with max_tokens 1).
// In each forward pass, the moment layer L's K and V are in the cache (the model's
// ForwardBatch::on_layer_kv_written), the engine copies layer L of the blocks this pass
// completes into the export, so the transfer thread sends layer 0 while later layers compute.
// The blocks a pass completes are those it fills (skipping the first skip_blocks the decoder
// already holds) and, in the pass that ends the prompt, the last partial one. After the pass,
// in the step that samples, come the first token and the sampler state. A runner that does not
// call the layer hook gets the same items after its forward pass. A cancelled export (the
// decoder went away) is only skipped; the transfer thread aborts the request, which frees its
// blocks.
//
// A split cache (sliding-window layers apart, model::KvCacheShape::windowed) moves both of a
// request's tables: a windowed layer's block i lives in the window table's entry i on both
// sides. The prefill side skips window entries it released (its own prefix-cache hits before
// the window); the decode side releases the window blocks its first token does not read on
// commit, before the prompt's blocks enter its prefix cache, so none that did not arrive is
// ever cached.
//
// Thread-safety: every method of KvImport and KvExport is thread-safe; the engine thread and
// one transfer thread share each object through shared_ptr.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/random.h"
#include "base/status.h"
#include "engine/sampler.h"
#include "model/kv_cache.h"

namespace koi::engine {

// What must match between two engines for KV blocks to mean the same thing on both.
struct KvLayout {
  std::string model_fingerprint;  // identity of the weights (kv_transfer.cc: model_fingerprint)
  std::string dtype = "f32";      // element type of the KV memory (--kv-dtype: f32, f16, q8_0)
  int block_size = 0;             // tokens per block
  int n_layers = 0;
  int n_kv_heads = 0;
  int head_dim = 0;               // a slot is n_kv_heads * head_dim values, K and V apart
  // A split cache (model::KvCacheShape::windowed): one '1' per sliding-window layer, whose K/V
  // live in the window table, '0' per other layer; empty when every layer is in one table.
  std::string windowed;
  int window = 0;                 // the sliding window in positions (split caches)

  // Bytes of one block's K (or V) in one layer, stored as dtype (which must name a KV type).
  int64_t block_bytes() const;
};

KvLayout kv_layout(const model::KvCacheShape& shape, std::string model_fingerprint);

// Ok when the decode worker `peer` can take blocks from the prefill worker `self`; otherwise
// kFailedPrecondition naming the first field that differs and both values.
Status check_compatible(const KvLayout& self, const KvLayout& peer);

// An identity for a model's weights: XXH3-64 over the bytes of the file, or of every regular
// file of a directory in name order, with the total size ("xxh3:9f...:123456").
Result<std::string> model_fingerprint(const std::string& path);

// The first token of a request prefilled elsewhere and the sampler state after drawing it.
struct PrefillResult {
  SampledToken first;
  Rng::State rng{};
};

// The decode side's end of one transfer.
class KvImport {
 public:
  enum class State { kWaiting, kReserved, kComplete, kFailed, kCancelled };

  explicit KvImport(int64_t deadline_ns) : deadline_ns_(deadline_ns) {}
  int64_t deadline_ns() const { return deadline_ns_; }  // the lease: Clock::now_ns() time

  // Engine thread: the request's blocks in order (its full table and, for a split cache, its
  // window table, where windowed layers' K/V go) and how many leading tokens are already
  // cached here. Wakes wait_reserved().
  void reserve(std::vector<int32_t> block_ids, std::vector<int32_t> window_block_ids, int num_cached_tokens,
               model::KvCache* memory);
  // Transfer thread: waits until reserve() or a cancel; nullopt when cancelled.
  struct Reservation {
    int num_blocks = 0;
    int num_cached_tokens = 0;
  };
  std::optional<Reservation> wait_reserved();
  // Transfer thread: writes one layer of block `block_idx` (in the request's full table, or its
  // window table for a sliding-window layer of a split cache), in any order; writing a layer
  // twice overwrites it (a prefill step that is retried resends it). Returns false, writing
  // nothing, once the import is cancelled, failed or complete, or for an index or size outside
  // the reservation (a window-table entry that is released included).
  // k and v are the stored bytes (KvLayout::block_bytes() each).
  bool write_block(int block_idx, int layer, std::span<const std::byte> k, std::span<const std::byte> v);
  void complete(PrefillResult result);
  void fail(std::string reason);
  // Engine thread: after this returns no write reaches the blocks. Also called on shutdown.
  void cancel();
  // Registers a hook cancel() calls (the transfer thread shuts its socket with it).
  void on_cancel(std::function<void()> hook);

  State state() const;
  std::string failure() const;
  PrefillResult result() const;
  // Leading blocks of the reservation whose every layer arrived.
  int num_complete_blocks() const;

 private:
  const int64_t deadline_ns_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  State state_ = State::kWaiting;     // guarded by mu_
  std::vector<int32_t> block_ids_;    // guarded by mu_
  std::vector<int32_t> window_block_ids_;  // guarded by mu_
  std::vector<int> layers_done_;      // guarded by mu_: per block, distinct layers written
  std::vector<bool> layer_written_;   // guarded by mu_: [block * n_layers_ + layer]
  int num_cached_tokens_ = 0;         // guarded by mu_
  model::KvCache* memory_ = nullptr;  // guarded by mu_
  int n_layers_ = 0;                  // guarded by mu_
  PrefillResult result_;              // guarded by mu_
  std::string failure_;               // guarded by mu_
  std::function<void()> cancel_hook_; // guarded by mu_
};

// The prefill side's end of one transfer.
class KvExport {
 public:
  // One layer of one block: K then V, layout.block_bytes() bytes each (the cache's stored
  // bytes: no conversion on either side). One BLOCK frame on the wire.
  struct Block {
    int block_idx = 0;
    int layer = 0;
    std::vector<std::byte> data;
  };
  struct Item {
    std::optional<Block> block;
    std::optional<PrefillResult> done;  // the last item
    Status error;                       // set: the request failed; the last item
  };

  explicit KvExport(int skip_blocks) : skip_blocks_(skip_blocks) {}
  int skip_blocks() const { return skip_blocks_; }

  // Engine thread.
  bool cancelled() const;
  void push_block(Block block);
  void finish(PrefillResult result);
  void fail(Status error);
  int next_block = 0;  // engine thread only: the first block index not yet copied whole

  // Transfer thread: the next item, waiting up to timeout_ms; nullopt on timeout.
  std::optional<Item> next(int timeout_ms);
  void cancel();

 private:
  // Queues `item` for the reader (dropped when unless_cancelled and the export was cancelled).
  void push(Item item, bool unless_cancelled);
  const int skip_blocks_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> items_;  // guarded by mu_
  bool cancelled_ = false;  // guarded by mu_
};

}  // namespace koi::engine
