#include "engine/kv_memory.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "base/host_usage.h"

namespace koi::engine {

namespace {

constexpr std::pair<std::string_view, int64_t> kUnits[] = {
    {"KiB", 1LL << 10}, {"MiB", 1LL << 20}, {"GiB", 1LL << 30}, {"TiB", 1LL << 40},
    {"KB", 1000LL}, {"MB", 1000LL * 1000}, {"GB", 1000LL * 1000 * 1000}, {"TB", 1000LL * 1000 * 1000 * 1000},
    {"B", 1},
};

}  // namespace

Result<DType> parse_kv_dtype(std::string_view flag) {
  const std::optional<DType> t = dtype_from_name(flag);
  if (t != DType::kF32 && t != DType::kF16 && t != DType::kQ8_0) {
    return Status::invalid_argument(
        fmt::format("--kv-dtype must be f32, f16 or q8_0 (32 values per block with an f16 scale), got '{}'", flag));
  }
  return *t;
}

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

KvDefault default_kv_cache_memory(int64_t available_bytes, int64_t model_bytes, int64_t bytes_per_sequence,
                                  int max_num_seqs, int max_model_len) {
  constexpr double kGiB = double{1 << 30};
  const auto gib = [&](int64_t bytes) { return static_cast<double>(bytes) / kGiB; };
  const int64_t wanted = int64_t{max_num_seqs} * bytes_per_sequence;
  const int64_t free_after_model = std::max<int64_t>(0, available_bytes - model_bytes);
  const auto budget = static_cast<int64_t>(kDefaultKvFraction * static_cast<double>(free_after_model));
  const std::string machine =
      fmt::format("{:.0f}% of the {:.1f} GiB available after the model's {:.1f} GiB", 100 * kDefaultKvFraction,
                  gib(free_after_model), gib(model_bytes));
  if (wanted <= budget) {
    return {wanted, fmt::format("room for all {} sequences of {} tokens, within {}", max_num_seqs, max_model_len,
                                machine)};
  }
  if (budget >= bytes_per_sequence) {
    return {budget, fmt::format("{}: room for {} of the {} sequences of {} tokens", machine,
                                budget / bytes_per_sequence, max_num_seqs, max_model_len)};
  }
  return {std::min(wanted, bytes_per_sequence),
          fmt::format("one sequence of {} tokens, more than {}", max_model_len, machine)};
}

int64_t parse_mem_available(std::string_view meminfo) { return host::meminfo_bytes(meminfo, "MemAvailable"); }

int64_t available_ram_bytes() {
  const int64_t available = host::read_meminfo_bytes("MemAvailable");
  return available >= 0 ? available : total_ram_bytes();
}

}  // namespace koi::engine
