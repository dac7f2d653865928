// KvEvent: a change to the set of KV blocks an engine's prefix cache can serve, for routers
// that keep an exact index of which engine holds which prefix (vLLM's KV events, Dynamo's KV
// router): a full block entered the cache under its 128-bit hash (stored), or its content was
// evicted when the block was handed out again (removed). BlockPool appends them to a log the
// engine owns (EngineConfig::publish_kv_events); serve publishes them with sequence numbers
// (serve/kv_events.h). Plain value type.
#pragma once

#include <cstdint>

#include "engine/block_hash.h"

namespace koi::engine {

struct KvEvent {
  enum class Kind : uint8_t { kStored, kRemoved };
  Kind kind = Kind::kStored;
  BlockHash hash;
};

}  // namespace koi::engine
