#include "engine/kv_memory.h"

#include <unistd.h>

#include <charconv>
#include <string>
#include <utility>

#include <fmt/format.h>

namespace koi::engine {

namespace {

constexpr std::pair<std::string_view, int64_t> kUnits[] = {
    {"KiB", 1LL << 10}, {"MiB", 1LL << 20}, {"GiB", 1LL << 30}, {"TiB", 1LL << 40},
    {"KB", 1000LL}, {"MB", 1000LL * 1000}, {"GB", 1000LL * 1000 * 1000}, {"TB", 1000LL * 1000 * 1000 * 1000},
    {"B", 1},
};

}  // namespace

Result<int64_t> parse_kv_cache_memory(std::string_view flag, int64_t total_ram_bytes) {
  const auto bad = [&] {
    return Status::invalid_argument(fmt::format(
        "--kv-cache-memory '{}' is not a size; give bytes with a unit (6GiB, 512MiB, 2GB) or a fraction of RAM in "
        "(0, 1] (0.3)",
        flag));
  };
  double number = 0;
  const auto [end, ec] = std::from_chars(flag.data(), flag.data() + flag.size(), number);
  if (ec != std::errc() || !(number > 0)) return bad();
  const std::string_view unit(end, static_cast<size_t>(flag.data() + flag.size() - end));
  if (unit.empty()) {
    if (number <= 1.0) return static_cast<int64_t>(number * static_cast<double>(total_ram_bytes));
    return static_cast<int64_t>(number);
  }
  for (const auto& [name, scale] : kUnits) {
    if (unit == name) return static_cast<int64_t>(number * static_cast<double>(scale));
  }
  return bad();
}

Result<int> kv_blocks_for_memory(int64_t bytes, int64_t bytes_per_block) {
  const int64_t blocks = bytes / bytes_per_block;
  if (blocks < 1) {
    return Status::invalid_argument(fmt::format(
        "--kv-cache-memory gives {} bytes, less than one KV block ({} bytes); give the KV cache more memory", bytes,
        bytes_per_block));
  }
  return static_cast<int>(std::min<int64_t>(blocks, INT32_MAX));
}

int64_t total_ram_bytes() {
  return static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<int64_t>(sysconf(_SC_PAGE_SIZE));
}

}  // namespace koi::engine
