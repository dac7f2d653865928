// KvEventLog: a `koi serve` engine's prefix-cache changes (engine::KvEvent) numbered 1, 2, 3...,
// for a router's exact index of which engine holds which block (`koi serve --kv-events`).
// GET /kv/events?after=N returns the events after N (at most kMaxBatch; "last" is the number
// of the newest one returned); when N is older than what the log still keeps, the answer is
// 410 and the client resynchronises from GET /kv/snapshot: every hash cached now and the
// number of the last event it reflects. Lost events are thus detected by their numbers and
// repaired from a snapshot. Both answers carry the log's "epoch", a random number drawn when
// the server starts, so a reader also notices a restarted server whose numbers began again,
// and "block_size", the tokens per block the hashes cover (gateway/kv_index.h hashes prompts
// with it). GET /kv/events?after=N&wait_ms=M is a long poll: when nothing follows N yet, the
// server holds the request (wake_after) until the next append or M ms, whichever is first.
// Thread-safe: the engine thread appends, HTTP threads read and wait.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "engine/kv_events.h"

namespace koi::serve {

class KvEventLog {
 public:
  static constexpr size_t kMaxBatch = 4096;
  explicit KvEventLog(int block_size, size_t capacity = 1 << 16);

  void append(const std::vector<engine::KvEvent>& events);
  // JSON {"epoch", "block_size", "last": N, "events": [{"seq", "type": "stored"|"removed",
  // "hash": 32 hex digits}]};
  // nullopt when events after `after` were dropped already (resynchronise from snapshot_json).
  std::optional<std::string> events_json(uint64_t after) const;
  // JSON {"epoch", "block_size", "last": N, "hashes": [...]}.
  std::string snapshot_json() const;

  // Long poll. When `after` is the newest number (nothing to answer yet), registers `wake`,
  // which the next append() calls once, on the appending thread after its lock is released
  // (so `wake` must only hand off, never block), and returns an id for forget(). Otherwise
  // (events follow `after`, they are gone, or `after` is ahead: a restarted server) registers
  // nothing and returns nullopt: answer at once.
  std::optional<uint64_t> wake_after(uint64_t after, std::function<void()> wake);
  // Unregisters a waiter that has not been woken (a no-op for one that has).
  void forget(uint64_t waiter);

 private:
  void add(const std::vector<engine::KvEvent>& events);  // mu_ held
  struct Numbered {
    uint64_t seq;
    engine::KvEvent event;
  };
  const int block_size_;
  const size_t capacity_;
  const uint64_t epoch_;
  mutable std::mutex mu_;
  uint64_t last_ = 0;                                                  // guarded by mu_
  std::deque<Numbered> recent_;                                        // guarded by mu_
  std::unordered_set<engine::BlockHash, engine::BlockHashHasher> cached_;  // guarded by mu_
  std::map<uint64_t, std::function<void()>> waiters_;                 // guarded by mu_
  uint64_t next_waiter_ = 0;                                          // guarded by mu_
};

// The hash as 32 hex digits, high half first.
std::string hash_hex(const engine::BlockHash& hash);

}  // namespace koi::serve
