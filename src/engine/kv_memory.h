// Sizing the KV cache from a flag: --kv-cache-memory takes bytes with an optional unit
// ("6GiB", "512MiB", "2GB", "1048576") or a fraction of the machine's RAM ("0.3").
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string_view>

#include "base/status.h"

namespace koi::engine {

// Bytes of KV memory the flag asks for, given the machine's total RAM.
Result<int64_t> parse_kv_cache_memory(std::string_view flag, int64_t total_ram_bytes);
// Number of blocks that fit in `bytes`; fails when not even one block fits.
Result<int> kv_blocks_for_memory(int64_t bytes, int64_t bytes_per_block);
// Physical memory of this machine, from sysconf.
int64_t total_ram_bytes();

}  // namespace koi::engine
