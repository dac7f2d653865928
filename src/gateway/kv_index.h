// KvIndex: the gateway's exact global index of which replica's prefix cache holds which KV
// block (block hash -> replicas), kept from each replica's KV events (`koi serve --kv-events`,
// serve/kv_events.h) by gateway/kv_subscriber.h. The router asks it for the real hit length of
// a prompt on each replica: the number of leading blocks of the prompt, hashed exactly as the
// engine hashes them (prompt_block_hashes, over engine/block_hash.h), that the replica holds.
//
// Per replica it keeps the epoch (which run of the server) and the number of the last event
// applied. apply() takes a batch only when it continues that sequence — same epoch, first
// number last + 1 — and otherwise changes nothing and returns false: the caller then
// resynchronises with reset() from the replica's /kv/snapshot. A replica that is not synced
// holds nothing as far as routing is concerned.
// Thread-safe: one mutex guards everything; no call blocks or does I/O.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "engine/block_hash.h"

namespace koi::gateway {

struct KvEventRecord {
  uint64_t seq = 0;
  bool stored = true;  // false: removed
  engine::BlockHash hash;
};

// One answer of GET /kv/events?after=N (events) or GET /kv/snapshot (hashes).
struct KvFeed {
  uint64_t epoch = 0;
  int block_size = 0;
  uint64_t last = 0;
  std::vector<KvEventRecord> events;
  std::vector<engine::BlockHash> hashes;
};
// Parses either answer; the error names the field that is missing or malformed.
Result<KvFeed> parse_kv_feed(std::string_view json);
// 32 hex digits, high half first (serve::hash_hex's form).
Result<engine::BlockHash> parse_block_hash(std::string_view hex);

// The hashes of the blocks of a prompt of `tokens` that the engine could serve from its cache:
// the full blocks before the last token (the engine always computes that one), chained from the
// first block as its KvCacheManager chains them (cache_key: 0, or engine::cache_key_for_salt of
// a cache_salt).
std::vector<engine::BlockHash> prompt_block_hashes(std::span<const int32_t> tokens, int block_size, uint64_t cache_key);

class KvIndex {
 public:
  struct Sync {
    uint64_t epoch = 0;
    uint64_t last = 0;
    int block_size = 0;
  };

  // Applies `feed.events` to `replica` if they continue its sequence (see above); false, with
  // nothing changed, when the replica is not synced, the epoch differs or a number is missing.
  bool apply(const std::string& replica, const KvFeed& feed);
  // Replaces what `replica` holds by `feed.hashes` (a snapshot) as of event `feed.last`.
  void reset(const std::string& replica, const KvFeed& feed);
  // Drops the replica (removed from the fleet, or unreachable).
  void forget(const std::string& replica);

  // Where the replica's sequence stands; nullopt when it is not synced.
  std::optional<Sync> sync_of(const std::string& replica) const;
  // The number of leading `blocks` the replica holds.
  size_t match(std::string_view replica, std::span<const engine::BlockHash> blocks) const;
  // The replicas holding `hash`, sorted.
  std::vector<std::string> holders(const engine::BlockHash& hash) const;
  // Every hash the replica holds, as 32 hex digits, sorted (tests and GET /admin/kv_index).
  std::vector<std::string> hashes_of(const std::string& replica) const;
  size_t num_blocks() const;  // distinct hashes held anywhere

 private:
  using ReplicaId = uint32_t;
  struct ReplicaState {
    Sync sync;
    bool synced = false;
    size_t num_blocks = 0;
  };
  ReplicaId id_of(const std::string& replica);  // creates the id
  void store(ReplicaId id, const engine::BlockHash& hash);
  void remove(ReplicaId id, const engine::BlockHash& hash);
  void clear(ReplicaId id);

  mutable std::mutex mu_;
  std::unordered_map<std::string, ReplicaId> ids_;  // guarded by mu_
  std::vector<std::string> names_;                  // by id; guarded by mu_
  std::vector<ReplicaState> replicas_;              // by id; guarded by mu_
  // hash -> the replicas holding it (a few at most, so a small vector)
  std::unordered_map<engine::BlockHash, std::vector<ReplicaId>, engine::BlockHashHasher> holders_;  // guarded by mu_
};

}  // namespace koi::gateway
