#include "engine/block_hash.h"

#define XXH_STATIC_LINKING_ONLY  // for XXH3_state_t on the stack
#include <xxhash.h>

namespace koi::engine {

BlockHash hash_block(const BlockHash& parent, std::span<const int32_t> token_ids, uint64_t extra_key) {
  XXH3_state_t state;
  XXH3_128bits_reset(&state);
  const uint64_t head[3] = {parent.low, parent.high, extra_key};
  XXH3_128bits_update(&state, head, sizeof(head));
  XXH3_128bits_update(&state, token_ids.data(), token_ids.size_bytes());
  const XXH128_hash_t h = XXH3_128bits_digest(&state);
  return BlockHash{h.low64, h.high64};
}

uint64_t cache_key_for_salt(std::string_view salt) { return XXH3_64bits(salt.data(), salt.size()); }

uint64_t cache_key_for_adapter(uint64_t salt_key, uint64_t adapter_id) {
  if (adapter_id == 0) return salt_key;
  const uint64_t keys[2] = {salt_key, adapter_id};
  return XXH3_64bits(keys, sizeof keys);
}

}  // namespace koi::engine
