// Sizing the KV cache: its element type from --kv-dtype; its size from the --kv-cache-memory
// flag, which takes bytes with an optional unit
// ("6GiB", "512MiB", "2GB", "1048576") or a fraction of the machine's RAM ("0.3"), or, without
// the flag, from the machine and the model (default_kv_cache_memory).
// Pure functions, except the two that read the machine; all thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"
#include "tensor/dtype.h"

namespace koi::engine {

// The element type of the --kv-dtype flag: f32, f16 or q8_0 (model/kv_cache.h), any case.
Result<DType> parse_kv_dtype(std::string_view flag);

// Bytes of KV memory the flag asks for, given the machine's total RAM.
Result<int64_t> parse_kv_cache_memory(std::string_view flag, int64_t total_ram_bytes);
// Number of blocks that fit in `bytes`; fails when not even one block fits.
Result<int> kv_blocks_for_memory(int64_t bytes, int64_t bytes_per_block);
// Physical memory of this machine, from sysconf.
int64_t total_ram_bytes();

// The default when no --kv-cache-memory is given. The KV pool is touched only as blocks are
// used, but the prefix cache's eviction order cycles through every block, so in a long run the
// whole pool becomes resident: it must fit beside the model. The rule:
//   wanted = max_num_seqs sequences of max_model_len tokens;
//   budget = kDefaultKvFraction of (available memory - the model's weight bytes);
//   bytes  = min(wanted, max(budget, one sequence of max_model_len tokens)).
// One full-length sequence is the floor: below it the longest request could never run.
inline constexpr double kDefaultKvFraction = 0.4;
struct KvDefault {
  int64_t bytes = 0;
  std::string reason;  // for the start-up log: which term of the rule decided, with the figures
};
// bytes_per_sequence: KV bytes of one sequence of max_model_len tokens (whole blocks).
KvDefault default_kv_cache_memory(int64_t available_bytes, int64_t model_bytes, int64_t bytes_per_sequence,
                                  int max_num_seqs, int max_model_len);

// MemAvailable from the text of /proc/meminfo, in bytes; -1 when the line is missing
// (base/host_usage.h reads /proc/meminfo for every caller).
int64_t parse_mem_available(std::string_view meminfo);
// MemAvailable of this machine now (/proc/meminfo), or total_ram_bytes() where it cannot be read.
int64_t available_ram_bytes();

}  // namespace koi::engine
