// BlockHash: the content address of one full KV block, a 128-bit XXH3 hash chained over
// (parent block's hash, the block's token ids, extra keys such as an adapter id). 128 bits
// make an accidental collision (two different prefixes sharing KV) negligible (~2^-64 at
// 2^32 cached blocks), so blocks do not store their token ids for comparison.
// Plain value type; thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

namespace koi::engine {

struct BlockHash {
  uint64_t low = 0;
  uint64_t high = 0;
  bool operator==(const BlockHash&) const = default;
};

struct BlockHashHasher {
  size_t operator()(const BlockHash& h) const { return static_cast<size_t>(h.low); }
};

// The hash of a block whose parent (the previous block of the sequence) has hash `parent`;
// the first block of a sequence uses the default BlockHash{} as its parent.
BlockHash hash_block(const BlockHash& parent, std::span<const int32_t> token_ids, uint64_t extra_key);

// The cache key (RequestSpec::cache_key) of a client's cache salt (vLLM's `cache_salt`):
// XXH3-64 of its bytes. Requests share prefix-cache blocks only with the same salt.
uint64_t cache_key_for_salt(std::string_view salt);

// The cache key of a request for LoRA adapter `adapter_id` (LoraPool's id; 0: the base model)
// under the salt key `salt_key` (0 or cache_key_for_salt): the salt key itself for the base
// model, else XXH3-64 of both, so blocks are never shared across adapters or tenants.
uint64_t cache_key_for_adapter(uint64_t salt_key, uint64_t adapter_id);

}  // namespace koi::engine
