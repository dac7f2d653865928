// Does one core overlap a weight stream from memory with int8 dot products (issue 21, Must
// show 1)? A machine probe, not a Koi kernel: it times, on one thread,
//   compute: 32 vpdpbusd per 64-byte line (what a 32-token q8_0 tile does per weight line),
//            their weight operand loaded every 4th dot from a buffer of HOT KB that stays cached,
//   stream:  one pass over 1 GiB (far beyond the last-level cache), one load per line,
//   both:    the two interleaved in one loop (the stream prefetched 32 lines ahead, or only read
//            when --no-prefetch is given, leaving the stream to the hardware prefetchers),
// and prints how much of the shorter of the two the interleaved loop hid:
// overlap = (compute + stream - both) / min(compute, stream). 100% means the stream was free.
// With --groups, the loops follow the tile's pattern instead (run_groups): the stream in groups
// of HOT KB, each read in 8 passes of 4 dots per line, the next group prefetched over the passes.
// --acts word|line (with --groups) takes each pair of dots' activation operand from 4 cached
// activation rows: a 4-byte word broadcast (as the tile does) or a 64-byte load.
// --tile runs the tile's own loop (run_tile): 2 panels x 5 tokens, per-block sums and scales;
// its rows say "+float" with the per-block float work and "int" without it.
// Usage: build/bench/koi_bench_stream_overlap [--no-prefetch | --groups [--acts word|line] | --tile] [HOT_KB...]
//        (default 16 32 48 64 128 512)
// Building it: cmake --build build --target koi_bench_stream_overlap
// Run it pinned (taskset -c 1) on a quiet machine; bench/README.md has results.
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

// GCC 12's AVX-512 intrinsics use _mm256_undefined_*() temporaries that -Wuninitialized reports
// once inlined (GCC bug 105593; src/kernels/simd_tiles_inl.h says the same).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace {

constexpr size_t kStreamBytes = size_t{1} << 30;
constexpr size_t kLine = 64;
constexpr int kDotsPerLine = 32;
constexpr int kDotsPerLoad = 4;
volatile int g_sink;

// One loop over `lines` lines; kCompute adds the dots, kStream the stream's load (and prefetch).
template <bool kCompute, bool kStream, bool kPrefetch>
__attribute__((target("avx512f,avx512bw,avx512vnni"), noinline)) double run(const uint8_t* stream, size_t lines,
                                                                           const uint8_t* hot, size_t hot_bytes) {
  __m512i acc[8];
  for (auto& a : acc) a = _mm512_setzero_si512();
  __m512i sum = _mm512_setzero_si512();
  const __m512i x = _mm512_set1_epi32(0x01020304);
  __m512i w = _mm512_set1_epi32(0x05060708);
  size_t hot_at = 0;
  const auto start = std::chrono::steady_clock::now();
  for (size_t l = 0; l < lines; ++l) {
    if (kStream) {
      const char* p = reinterpret_cast<const char*>(stream + l * kLine);
      if (kPrefetch) _mm_prefetch(p + 32 * kLine, _MM_HINT_T0);
      sum = _mm512_add_epi32(sum, _mm512_load_si512(p));
    }
    if (kCompute) {
      for (int d = 0; d < kDotsPerLine; d += 8) {
#pragma GCC unroll 8
        for (int j = 0; j < 8; ++j) {
          if (j % kDotsPerLoad == 0) {
            w = _mm512_load_si512(hot + hot_at);
            hot_at += kLine;
            if (hot_at == hot_bytes) hot_at = 0;
          }
          acc[j] = _mm512_dpbusd_epi32(acc[j], w, x);
        }
      }
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (auto& a : acc) sum = _mm512_add_epi32(sum, a);
  g_sink = _mm512_reduce_add_epi32(sum);
  return seconds;
}

// The tile's pattern instead (--groups): the stream cut into groups of group_bytes, each read in
// kPasses passes of one load and 4 dots per line (32 dots per line in all), the next group
// prefetched into L1 over the passes. Without kStream, the compute alone (group 0 every time,
// nothing prefetched). The stream alone is run<false, true, false>, one read pass over it all. The activation operand
// of each pair of dots: kActs 0 a register; 1 (--acts word) a 4-byte word broadcast from one of 4
// cached activation rows, as the tile does; 2 (--acts line) a 64-byte load from those rows.
constexpr int kPasses = kDotsPerLine / kDotsPerLoad;
constexpr size_t kActRow = 2304;  // one token's q8 activations for 2048 values (36 B per 32)
alignas(64) uint8_t g_acts[5 * kActRow];  // 4 rows for run_groups, 5 for run_tile
template <bool kStream, int kActs>
__attribute__((target("avx512f,avx512bw,avx512vnni"), noinline)) double run_groups(const uint8_t* stream,
                                                                                  size_t group_bytes) {
  __m512i acc[8];
  for (auto& a : acc) a = _mm512_setzero_si512();
  const __m512i x = _mm512_set1_epi32(0x01020304);
  const size_t group_lines = group_bytes / kLine, groups = kStreamBytes / group_bytes - 1;
  const auto start = std::chrono::steady_clock::now();
  for (size_t g = 0; g < groups; ++g) {
    const uint8_t* group = kStream ? stream + g * group_bytes : stream;
    const char* next = reinterpret_cast<const char*>(group + group_bytes);
    size_t prefetched = 0;
    int visits = 0;
    for (int pass = 0; pass < kPasses; ++pass) {
      for (size_t l = 0; l < group_lines; l += 2) {
        if (kStream && (visits += 2) >= kPasses) {  // one line of the next group per kPasses visits
          visits -= kPasses;
          _mm_prefetch(next + prefetched++ * kLine, _MM_HINT_T0);
        }
        const __m512i w0 = _mm512_load_si512(group + l * kLine);
        const __m512i w1 = _mm512_load_si512(group + (l + 1) * kLine);
#pragma GCC unroll 4
        for (int j = 0; j < 4; ++j) {
          __m512i xj = x;
          const uint8_t* row = g_acts + j * kActRow;
          if (kActs == 1) xj = _mm512_set1_epi32(*reinterpret_cast<const int32_t*>(row + (l * 4) % 2048));
          if (kActs == 2) xj = _mm512_load_si512(row + (l * kLine) % 2048);
          acc[j] = _mm512_dpbusd_epi32(acc[j], w0, xj);
          acc[4 + j] = _mm512_dpbusd_epi32(acc[4 + j], w1, xj);
        }
      }
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  __m512i sum = acc[0];
  for (int i = 1; i < 8; ++i) sum = _mm512_add_epi32(sum, acc[i]);
  g_sink = _mm512_reduce_add_epi32(sum);
  return seconds;
}

template <bool kStream>
double run_groups_with(int acts, const uint8_t* stream, size_t group_bytes) {
  if (acts == 1) return run_groups<kStream, 1>(stream, group_bytes);
  if (acts == 2) return run_groups<kStream, 2>(stream, group_bytes);
  return run_groups<kStream, 0>(stream, group_bytes);
}

// Closer still (--tile): the tile itself, minus its bookkeeping. A group is 2 panels of `blocks`
// 544-byte blocks (16 rows x 8 words, then 16 f16 scales), read in kTilePasses passes of 5
// tokens. Per block and pass: each token's integer sums start from a broadcast word, each of
// the 8 words of both panels meets each token's broadcast activation word (10 dots per word),
// and with kFloat the sums are scaled into float accumulators (the scales' conversion, one
// multiply and one fused multiply-add per sum), as in quant_panel_tile. The next group is
// prefetched into L1 over the passes, as lines_per_step does. kStream as in run_groups.
// Not yet faithful: compiled here, its float variant computes at about 220 G multiply-adds/s
// on one core, well below the real tile's in-cache rate, so its figures do not yet reproduce
// the tile's (bench/README.md, stop 31); they also move with how it is compiled and with the
// minute (stop 32).
constexpr size_t kPanelBlock = 544;
constexpr int kTileTokens = 5, kTilePasses = 7;  // 32 tokens in tiles of 5 5 5 5 4 4 4, rounded up
template <bool kStream, bool kFloat>
__attribute__((target("avx512f,avx512bw,avx512vnni"), noinline)) double run_tile(const uint8_t* stream,
                                                                                size_t blocks) {
  const size_t panel_bytes = blocks * kPanelBlock, group_bytes = 2 * panel_bytes;
  const size_t groups = kStreamBytes / group_bytes - 1, group_lines = group_bytes / kLine;
  const size_t steps = kTilePasses * blocks, lines_per_step = (group_lines + steps - 1) / steps;
  __m512 acc[2][kTileTokens];
  for (auto& row : acc) {
    for (auto& a : row) a = _mm512_setzero_ps();
  }
  const auto start = std::chrono::steady_clock::now();
  for (size_t g = 0; g < groups; ++g) {
    const uint8_t* group = kStream ? stream + g * group_bytes : stream;
    const char* next = reinterpret_cast<const char*>(group + group_bytes);
    size_t step = 0;
    for (int pass = 0; pass < kTilePasses; ++pass) {
      for (size_t b = 0; b < blocks; ++b, ++step) {
        if (kStream) {
          for (size_t k = 0; k < lines_per_step; ++k) {
            _mm_prefetch(next + (step * lines_per_step + k) * kLine, _MM_HINT_T0);
          }
        }
        const uint8_t* p0 = group + b * kPanelBlock;
        const uint8_t* p1 = p0 + panel_bytes;
        const uint8_t* x = g_acts + (b % 64) * 36;  // 36-byte activation blocks, one row per token
        __m512i isum[2][kTileTokens];
#pragma GCC unroll 5
        for (int t = 0; t < kTileTokens; ++t) {
          const __m512i init = _mm512_set1_epi32(*reinterpret_cast<const int32_t*>(x + t * kActRow + 32));
          isum[0][t] = init;
          isum[1][t] = init;
        }
#pragma GCC unroll 8
        for (int k = 0; k < 8; ++k) {
          const __m512i w0 = _mm512_loadu_si512(p0 + k * kLine), w1 = _mm512_loadu_si512(p1 + k * kLine);
#pragma GCC unroll 5
          for (int t = 0; t < kTileTokens; ++t) {
            const __m512i xw = _mm512_set1_epi32(*reinterpret_cast<const int32_t*>(x + t * kActRow + k * 4));
            isum[0][t] = _mm512_dpbusd_epi32(isum[0][t], w0, xw);
            isum[1][t] = _mm512_dpbusd_epi32(isum[1][t], w1, xw);
          }
        }
        const __m512 wd0 = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p0 + 512)));
        const __m512 wd1 = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p1 + 512)));
#pragma GCC unroll 5
        for (int t = 0; t < kTileTokens; ++t) {
          if (kFloat) {
            const __m512 xd = _mm512_set1_ps(*reinterpret_cast<const float*>(x + t * kActRow + 32));
            acc[0][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[0][t]), _mm512_mul_ps(wd0, xd), acc[0][t]);
            acc[1][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[1][t]), _mm512_mul_ps(wd1, xd), acc[1][t]);
          } else {
            acc[0][t] = _mm512_add_ps(_mm512_castsi512_ps(isum[0][t]), acc[0][t]);
            acc[1][t] = _mm512_add_ps(_mm512_castsi512_ps(isum[1][t]), acc[1][t]);
          }
        }
      }
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  __m512 sum = _mm512_setzero_ps();
  for (auto& row : acc) {
    for (auto& a : row) sum = _mm512_add_ps(sum, a);
  }
  g_sink = static_cast<int>(_mm512_reduce_add_ps(sum));
  return seconds;
}

template <class F>
double median_of_5(F f) {
  std::vector<double> t;
  for (int i = 0; i < 5; ++i) t.push_back(f());
  std::sort(t.begin(), t.end());
  return t[2];
}

// One row of the table: seconds of compute alone (c), the stream alone (s) and both (b).
// macs: the multiply-adds of the compute loop.
void report(const std::string& label, double macs, double c, double s, double b) {
  std::printf("%12s %14.0f %12.1f %10.3f %10.3f %10.3f %7.0f%%\n", label.c_str(), macs / c / 1e9,
              kStreamBytes / s / 1e9, c, s, b, (c + s - b) / std::min(c, s) * 100);
}

}  // namespace

int main(int argc, char** argv) {
  if (!__builtin_cpu_supports("avx512vnni")) {
    std::fprintf(stderr, "koi_bench_stream_overlap: this CPU has no AVX-512 VNNI (vpdpbusd)\n");
    return 2;
  }
  std::vector<size_t> hot_kbs;
  bool prefetch = true, groups = false, tile = false;
  int acts = 0;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--no-prefetch") == 0) {
      prefetch = false;
      continue;
    }
    if (std::strcmp(argv[i], "--groups") == 0) {
      groups = true;
      continue;
    }
    if (std::strcmp(argv[i], "--tile") == 0) {
      tile = true;
      continue;
    }
    if (std::strcmp(argv[i], "--acts") == 0 && i + 1 < argc) {
      ++i;
      if (std::strcmp(argv[i], "word") == 0) {
        acts = 1;
      } else if (std::strcmp(argv[i], "line") == 0) {
        acts = 2;
      } else {
        std::fprintf(stderr, "koi_bench_stream_overlap: --acts takes word or line, got '%s'\n", argv[i]);
        return 2;
      }
      continue;
    }
    char* end = nullptr;
    const long kb = std::strtol(argv[i], &end, 10);
    if (*end != '\0' || kb <= 0 || kb > 65536) {
      std::fprintf(stderr, "koi_bench_stream_overlap: HOT_KB must be a whole number from 1 to 65536, got '%s'\n",
                   argv[i]);
      return 2;
    }
    hot_kbs.push_back(static_cast<size_t>(kb));
  }
  if (!groups && acts != 0) {
    std::fprintf(stderr, "koi_bench_stream_overlap: --acts goes with --groups\n");
    return 2;
  }
  if ((groups || tile) && !prefetch) {
    std::fprintf(stderr, "koi_bench_stream_overlap: --no-prefetch applies to neither --groups nor --tile\n");
    return 2;
  }
  if (groups && tile) {
    std::fprintf(stderr, "koi_bench_stream_overlap: --groups and --tile are two different loops; give one\n");
    return 2;
  }
  if (hot_kbs.empty()) hot_kbs = {16, 32, 48, 64, 128, 512};
  auto* stream = static_cast<uint8_t*>(std::aligned_alloc(size_t{2} << 20, kStreamBytes));
  if (stream == nullptr) {
    std::fprintf(stderr, "koi_bench_stream_overlap: cannot allocate 1 GiB\n");
    return 1;
  }
  std::memset(stream, 1, kStreamBytes);
  std::memset(g_acts, 3, sizeof g_acts);  // written, so its pages are its own (not the shared zero page)
  const size_t lines = kStreamBytes / kLine;
  const double macs = static_cast<double>(lines) * kDotsPerLine * 64;
  std::printf("%12s %14s %12s %10s %10s %10s %8s\n", groups || tile ? "group KB" : "hot KB", "compute GMAC/s",
              "stream GB/s", "compute s", "stream s", "both s", "overlap");
  for (const size_t kb : hot_kbs) {
    const size_t bytes = kb * 1024;
    if (tile) {
      const size_t blocks = std::max<size_t>(1, bytes / (2 * kPanelBlock));
      const size_t group_kb = 2 * blocks * kPanelBlock / 1024;
      const double tile_macs = static_cast<double>(kStreamBytes / (2 * blocks * kPanelBlock) - 1) * kTilePasses *
                               blocks * 8 * kTileTokens * 2 * 64;
      const double s = median_of_5([&] { return run<false, true, false>(stream, lines, nullptr, 0); });
      for (const bool with_float : {true, false}) {
        const double c = median_of_5(
            [&] { return with_float ? run_tile<false, true>(stream, blocks) : run_tile<false, false>(stream, blocks); });
        const double b = median_of_5(
            [&] { return with_float ? run_tile<true, true>(stream, blocks) : run_tile<true, false>(stream, blocks); });
        report(std::to_string(group_kb) + (with_float ? " +float" : " int"), tile_macs, c, s, b);
      }
      continue;
    }
    if (groups) {
      const double c = median_of_5([&] { return run_groups_with<false>(acts, stream, bytes); });
      const double s = median_of_5([&] { return run<false, true, false>(stream, lines, nullptr, 0); });
      const double b = median_of_5([&] { return run_groups_with<true>(acts, stream, bytes); });
      report(std::to_string(kb), macs, c, s, b);
      continue;
    }
    std::vector<uint8_t> storage(bytes + kLine, 2);
    const uint8_t* hot =
        reinterpret_cast<const uint8_t*>((reinterpret_cast<uintptr_t>(storage.data()) + kLine - 1) / kLine * kLine);
    const double c = median_of_5([&] { return run<true, false, false>(stream, lines, hot, bytes); });
    const double s = median_of_5([&] {
      return prefetch ? run<false, true, true>(stream, lines, hot, bytes)
                      : run<false, true, false>(stream, lines, hot, bytes);
    });
    const double b = median_of_5([&] {
      return prefetch ? run<true, true, true>(stream, lines, hot, bytes)
                      : run<true, true, false>(stream, lines, hot, bytes);
    });
    report(std::to_string(kb), macs, c, s, b);
  }
  std::free(stream);
  return 0;
}
