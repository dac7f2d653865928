// LoraPool: the LoRA adapters one engine serves over its base model, by name, with their
// weights kept in memory under a budget (S-LoRA's unified adapter pool, on CPU memory).
//
// An adapter is registered (add: from --lora NAME=DIR or POST /v1/load_lora_adapter) by
// loading it once, which checks it against the base model; it gets an id unique for the
// life of the pool, so re-adding a name never reuses another adapter's prefix-cache blocks
// (engine::cache_key_for_adapter). Its weights stay resident while room allows: at most
// max_loras adapters and memory_bytes of weights. acquire() hands a request a reference to
// the weights, loading them again from disk if they were evicted; making room evicts the least
// recently acquired adapters that no request holds. A request keeps its adapter alive to its
// end, so remove() (unload) never fails a request in flight: new requests no longer find the
// name, and the memory goes when the last request using it finishes.
//
// Thread-safe: HTTP threads acquire, add and remove concurrently; the engine thread only
// reads the weights requests hold. Failures are Status values: kNotFound for an unknown
// name, kAlreadyExists for a taken one, kInvalidArgument for an adapter larger than the whole
// budget, kResourceExhausted when every resident adapter is in use and there is no room for
// another (retry later, or raise --max-loras / --lora-memory-mib), and the loader's errors
// (file and key named) for a bad directory.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/status.h"
#include "model/lora.h"
#include "model/model_config.h"

namespace koi::engine {

struct LoraPoolOptions {
  int max_loras = 8;                       // --max-loras: adapters resident at once
  int64_t memory_bytes = int64_t{1} << 30;  // --lora-memory-mib: their weights at most
};

// An adapter handed to a request: its weights (kept alive by this reference) and its id.
struct AcquiredLora {
  std::shared_ptr<const model::LoraAdapter> adapter;
  uint64_t id = 0;
};

struct LoraInfo {
  std::string name;
  std::string path;
  uint64_t id = 0;
  int rank = 0;
  bool resident = false;
};

struct LoraPoolStats {
  int num_registered = 0;
  int num_resident = 0;
  int64_t resident_bytes = 0;
  int64_t loads = 0;      // reads from disk, the first one at add() included
  int64_t evictions = 0;  // weights dropped to make room
};

class LoraPool {
 public:
  LoraPool(model::ModelConfig model, LoraPoolOptions options);

  // Loads `path` (PEFT format) and registers it as `name`; resident if room can be made.
  Status add(const std::string& name, const std::string& path);
  // Unregisters `name`; requests holding it finish with it.
  Status remove(const std::string& name);
  bool contains(const std::string& name) const;
  // The weights of `name`, resident from now on, and its id.
  Result<AcquiredLora> acquire(const std::string& name);
  // Registered adapters, in the order they were added.
  std::vector<LoraInfo> list() const;
  LoraPoolStats stats() const;
  const LoraPoolOptions& options() const { return options_; }

 private:
  struct Entry {
    std::string name;
    std::string path;
    uint64_t id = 0;
    int rank = 0;
    int64_t bytes = 0;
    uint64_t last_use = 0;
    std::shared_ptr<const model::LoraAdapter> weights;  // null: not resident
  };

  Result<std::shared_ptr<const model::LoraAdapter>> load(const std::string& path);
  Entry* find(const std::string& name);  // requires mu_
  // Evicts unheld adapters, least recently used first, until `bytes` more fit; requires mu_.
  Status make_room(const std::string& name, int64_t bytes);
  int64_t resident_bytes() const;  // requires mu_

  const model::ModelConfig model_;
  const LoraPoolOptions options_;
  mutable std::mutex mu_;
  std::vector<Entry> entries_;  // guarded by mu_
  uint64_t next_id_ = 1;        // guarded by mu_
  uint64_t clock_ = 0;          // guarded by mu_: acquire() order, for LRU
  int64_t loads_ = 0;           // guarded by mu_
  int64_t evictions_ = 0;       // guarded by mu_
};

}  // namespace koi::engine
