// Kernel benchmarks: matmul per weight type at TinyLlama-1.1B shapes, decode (1 token: weight
// GB/s), batched decode (2-64 tokens, small_*) and prefill (512 tokens: GFLOP/s), plus the
// machine's memory read bandwidth and int8 dot-product peak, the bounds they are compared against
// (with BM_Int8TileMix, the share of that peak the quantized tile's own instructions allow);
// and the fused attention (prefill and batched decode; compare with BM_FmaPeak in koi_bench_gemm).
//
//   build-x/bench/koi_bench_kernels [--isa=portable|avx2|avx512|avx512bf16] [--threads=N]
//                                   [--benchmark_filter=...]
//
// q8_0/q4_0 weights are packed once, as the model packs them (kernels/packed_matrix.h). Decode
// cycles through copies of the weights totalling more than the last-level cache, so every
// call streams its weights from memory as in a real forward pass.
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "base/random.h"
#include "base/thread_pool.h"
#include "kernels/attention.h"
#include "kernels/isa.h"
#include "kernels/ops.h"
#include "kernels/packed_matrix.h"

namespace koi::kernels {
namespace {

constexpr int64_t kColdBytes = int64_t{512} << 20;  // larger than any L3 we run on
constexpr int64_t kSmallBatchTokens = 64;           // the batched-decode sizes below

int g_threads = 0;  // --threads; 0: one per physical core

ThreadPool& pool() {
  static ThreadPool p(g_threads);
  return p;
}

// `copies` weight matrices of out rows x in values of `type`, from 64 random rows repeated.
struct Weights {
  std::vector<uint8_t> bytes;
  int64_t matrix_bytes;
  int copies;
  TensorView view(int copy) const {
    return make_view(type, {in, out}, bytes.data() + copy * matrix_bytes);
  }
  DType type;
  int64_t in, out;
};

Weights make_weights(DType type, int64_t in, int64_t out, bool cold) {
  Weights w{{}, dtype_row_bytes(type, in) * out, 1, type, in, out};
  if (cold) w.copies = static_cast<int>(std::max<int64_t>(1, kColdBytes / w.matrix_bytes + 1));
  w.bytes.resize(static_cast<size_t>(w.matrix_bytes * w.copies));
  Rng rng(1);
  constexpr int64_t kDistinctRows = 64;
  const int64_t row_bytes = dtype_row_bytes(type, in);
  std::vector<float> values(static_cast<size_t>(in));
  for (int64_t r = 0; r < kDistinctRows; ++r) {
    for (float& v : values) v = static_cast<float>(rng.normal()) * 0.02f;
    quantize_row(type, values.data(), w.bytes.data() + r * row_bytes, in);
  }
  for (int64_t r = kDistinctRows; r < out * w.copies; ++r) {
    std::memcpy(w.bytes.data() + r * row_bytes, w.bytes.data() + (r % kDistinctRows) * row_bytes,
                static_cast<size_t>(row_bytes));
  }
  return w;
}

enum class Cache { kStreamSmallBatches, kHot };

void BM_Matmul(benchmark::State& state, DType type, Cache cache = Cache::kStreamSmallBatches) {
  const int64_t in = state.range(0), out = state.range(1), n_tokens = state.range(2);
  const bool decode = n_tokens == 1;
  // Decode and small batches stream their weights from memory, as a batched decode step does
  // (unless kHot: the same matrix every iteration, from cache as far as it fits).
  Weights w = make_weights(type, in, out, cache == Cache::kStreamSmallBatches && n_tokens <= kSmallBatchTokens);
  std::vector<float> x(static_cast<size_t>(in * n_tokens)), y(static_cast<size_t>(out * n_tokens));
  Rng rng(2);
  for (float& v : x) v = static_cast<float>(rng.normal());
  // q8_0/q4_0 as the model reads them: packed once (PackedMatrix), outside the timing.
  std::vector<PackedMatrix> packed;
  for (int c = 0; c < w.copies; ++c) packed.emplace_back(w.view(c), &pool());
  int copy = 0;
  for (auto _ : state) {
    matmul(packed[static_cast<size_t>(copy)], x.data(), y.data(), n_tokens, &pool());
    benchmark::DoNotOptimize(y.data());
    copy = (copy + 1) % w.copies;
  }
  if (decode) {
    state.counters["GB/s"] = benchmark::Counter(static_cast<double>(w.matrix_bytes) * 1e-9,
                                                benchmark::Counter::kIsIterationInvariantRate);
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * in * out * n_tokens * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string(dtype_name(type)) + " " + std::string(isa_name(active_isa())));
}

// TinyLlama-1.1B: q/o (2048 -> 2048), k/v (2048 -> 256), gate/up (2048 -> 5632),
// down (5632 -> 2048), output (2048 -> 32000).
void tinyllama_shapes(benchmark::internal::Benchmark* b) {
  for (int64_t n_tokens : {1, 512}) {
    for (auto [in, out] : {std::pair<int64_t, int64_t>{2048, 2048}, {2048, 256}, {2048, 5632},
                           {5632, 2048}, {2048, 32000}}) {
      b->Args({in, out, n_tokens});
    }
  }
  b->ArgNames({"in", "out", "tokens"})->UseRealTime()->Unit(benchmark::kMicrosecond);
}

BENCHMARK_CAPTURE(BM_Matmul, f32, DType::kF32)->Apply(tinyllama_shapes);
BENCHMARK_CAPTURE(BM_Matmul, f16, DType::kF16)->Apply(tinyllama_shapes);
BENCHMARK_CAPTURE(BM_Matmul, bf16, DType::kBF16)->Apply(tinyllama_shapes);
BENCHMARK_CAPTURE(BM_Matmul, q8_0, DType::kQ8_0)->Apply(tinyllama_shapes);
BENCHMARK_CAPTURE(BM_Matmul, q4_0, DType::kQ4_0)->Apply(tinyllama_shapes);
BENCHMARK_CAPTURE(BM_Matmul, q4_K, DType::kQ4_K)->Apply(tinyllama_shapes);
BENCHMARK_CAPTURE(BM_Matmul, q5_K, DType::kQ5_K)->Apply(tinyllama_shapes);
BENCHMARK_CAPTURE(BM_Matmul, q6_K, DType::kQ6_K)->Apply(tinyllama_shapes);

// Batched decode: 1-64 tokens (one per sequence) through gate/up (2048 -> 5632) and down
// (5632 -> 2048), the weights streamed from memory; GFLOP/s rising with the batch is aggregate
// decode throughput rising with it.
void small_batches(benchmark::internal::Benchmark* b) {
  for (auto [in, out] : {std::pair<int64_t, int64_t>{2048, 5632}, {5632, 2048}}) {
    for (int64_t n_tokens : {1, 2, 3, 4, 8, 16, 32, 64}) b->Args({in, out, n_tokens});
  }
  b->ArgNames({"in", "out", "tokens"})->UseRealTime()->Unit(benchmark::kMicrosecond);
}
BENCHMARK_CAPTURE(BM_Matmul, small_q8_0, DType::kQ8_0)->Apply(small_batches);
BENCHMARK_CAPTURE(BM_Matmul, small_q4_0, DType::kQ4_0)->Apply(small_batches);
// The same with the weights in cache: the tiles' own speed, without streaming them from memory.
BENCHMARK_CAPTURE(BM_Matmul, small_hot_q8_0, DType::kQ8_0, Cache::kHot)->Apply(small_batches);
BENCHMARK_CAPTURE(BM_Matmul, small_hot_q4_0, DType::kQ4_0, Cache::kHot)->Apply(small_batches);

// The int8 ceiling the quantized matmuls are measured against: every pool thread runs 12
// independent chains of 512-bit vpdpbusd in registers (64 multiply-adds each), no memory.
__attribute__((target("avx512f,avx512vnni"))) void int8_chains(int64_t steps, int32_t* out) {
  __m512i acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm512_set1_epi32(i);
  const __m512i u = _mm512_set1_epi8(3), s = _mm512_set1_epi8(-2);
  for (int64_t k = 0; k < steps; ++k) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) acc[i] = _mm512_dpbusd_epi32(acc[i], u, s);
  }
  for (int i = 1; i < 12; ++i) acc[0] = _mm512_add_epi32(acc[0], acc[i]);
  alignas(64) int32_t lanes[16];
  _mm512_store_si512(lanes, acc[0]);
  *out = 0;
  for (int32_t v : lanes) *out += v;
}

// Runs body(thread_idx) on every pool thread at once in each iteration, and reports GMAC/s for
// macs_per_thread multiply-adds per thread per iteration. For the int8 loops: AVX-512 VNNI only.
template <class Body>
void int8_on_every_thread(benchmark::State& state, double macs_per_thread, Body body) {
  if (!__builtin_cpu_supports("avx512vnni")) {
    state.SkipWithError("no AVX-512 VNNI on this CPU");
    return;
  }
  std::atomic<int> arrived{0};
  for (auto _ : state) {
    arrived.store(0);
    pool().run([&](int thread_idx, int num_threads) {
      // Start together: the pool hands a late worker's item to a thread that is done with its
      // own, which would measure one core running two loops' worth instead of all cores at once.
      arrived.fetch_add(1);
      while (arrived.load() < num_threads) {}
      body(thread_idx);
    });
    benchmark::ClobberMemory();  // the bodies' results count as read
  }
  state.counters["GMAC/s"] = benchmark::Counter(macs_per_thread * pool().num_threads() * 1e-9,
                                                benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::to_string(pool().num_threads()) + " threads");
}

void BM_Int8Peak(benchmark::State& state) {
  constexpr int64_t kSteps = 1 << 18;
  std::vector<int32_t> out(static_cast<size_t>(pool().num_threads()));
  int8_on_every_thread(state, 64.0 * 12 * kSteps,
                       [&](int thread_idx) { int8_chains(kSteps, &out[static_cast<size_t>(thread_idx)]); });
}
BENCHMARK(BM_Int8Peak)->UseRealTime()->Unit(benchmark::kMillisecond);

// The ceiling the q8_0 panel tile's instruction mix sets, with no weights to stream: the tile of
// 2 vectors of 16 rows x 5 tokens (simd_tiles_inl.h, quant_panel_tile<.., 2, 5>) over blocks of
// 32 values, its weight words and row scales read from a 1 KB buffer (L1) and its activation
// words broadcast from memory, as the tile does. Per block: 80 vpdpbusd, and, with kScales, the
// float work the exact-sum contract asks of each (row vector, token): y = fma(float(isum),
// wd * xd, y), a convert, a multiply and an FMA. Compare GMAC/s with BM_Int8Peak's in the same run.
struct TileMixData {
  static constexpr int P = 2, T = 5, kWords = 8;
  alignas(64) int32_t w[kWords][P][16];  // weight words, 16 rows per vector
  alignas(64) float wd[P][16];           // the rows' scales
  int32_t x[kWords][T];                  // activation words
  int32_t x_sum[T];
  float xd[T];
};

// GCC 12's AVX-512 intrinsics use _mm512_undefined_*() temporaries that -Wuninitialized reports
// once inlined (GCC bug 105593), as simd_tiles_inl.h notes.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
template <bool kScales>
__attribute__((target("avx512f,avx512vnni"))) float int8_tile_mix(const TileMixData& d, int64_t blocks) {
  constexpr int P = TileMixData::P, T = TileMixData::T;
  __m512 acc[P][T];
  __m512i keep[P][T];  // without the float work, each block's isums still leave the tile
#pragma GCC unroll 2
  for (int p = 0; p < P; ++p) {
#pragma GCC unroll 5
    for (int t = 0; t < T; ++t) {
      acc[p][t] = _mm512_setzero_ps();
      keep[p][t] = _mm512_setzero_si512();
    }
  }
  for (int64_t b = 0; b < blocks; ++b) {
    asm volatile("" : : : "memory");  // d is read anew each block, as a panel and activations are
    __m512i isum[P][T];
#pragma GCC unroll 5
    for (int t = 0; t < T; ++t) {
      const __m512i init = _mm512_set1_epi32(-128 * d.x_sum[t]);
#pragma GCC unroll 2
      for (int p = 0; p < P; ++p) isum[p][t] = init;
    }
#pragma GCC unroll 8
    for (int k = 0; k < TileMixData::kWords; ++k) {
      __m512i wk[P];
#pragma GCC unroll 2
      for (int p = 0; p < P; ++p) wk[p] = _mm512_load_si512(d.w[k][p]);
#pragma GCC unroll 5
      for (int t = 0; t < T; ++t) {
        const __m512i xw = _mm512_set1_epi32(d.x[k][t]);
#pragma GCC unroll 2
        for (int p = 0; p < P; ++p) isum[p][t] = _mm512_dpbusd_epi32(isum[p][t], wk[p], xw);
      }
    }
    __m512 wd[P];
#pragma GCC unroll 2
    for (int p = 0; p < P; ++p) wd[p] = _mm512_load_ps(d.wd[p]);
#pragma GCC unroll 5
    for (int t = 0; t < T; ++t) {
      const __m512 xd = _mm512_set1_ps(d.xd[t]);
#pragma GCC unroll 2
      for (int p = 0; p < P; ++p) {
        if constexpr (kScales) {
          acc[p][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[p][t]), _mm512_mul_ps(wd[p], xd), acc[p][t]);
        } else {
          keep[p][t] = _mm512_xor_si512(keep[p][t], isum[p][t]);
        }
      }
    }
  }
  float out = 0.0f;
  for (int p = 0; p < P; ++p) {
    for (int t = 0; t < T; ++t) {
      alignas(64) float f[16];
      alignas(64) int32_t i[16];
      _mm512_store_ps(f, acc[p][t]);
      _mm512_store_si512(i, keep[p][t]);
      for (int l = 0; l < 16; ++l) out += f[l] + static_cast<float>(i[l]);
    }
  }
  return out;
}
#pragma GCC diagnostic pop

void BM_Int8TileMix(benchmark::State& state) {
  constexpr int64_t kBlocks = 1 << 15;  // 80 vpdpbusd each: 2.6 M per thread per iteration
  const bool scales = state.range(0) != 0;
  const int threads = pool().num_threads();
  std::vector<TileMixData> data(static_cast<size_t>(threads));  // one per thread: no shared lines
  for (TileMixData& d : data) {
    for (int k = 0; k < TileMixData::kWords; ++k) {
      for (int p = 0; p < TileMixData::P; ++p) {
        for (int l = 0; l < 16; ++l) d.w[k][p][l] = 0x01020304 * (k + p + l);
      }
      for (int t = 0; t < TileMixData::T; ++t) d.x[k][t] = 0x05060708 * (k + t + 1);
    }
    for (int p = 0; p < TileMixData::P; ++p) {
      for (int l = 0; l < 16; ++l) d.wd[p][l] = 0.001f * static_cast<float>(p * 16 + l + 1);
    }
    for (int t = 0; t < TileMixData::T; ++t) {
      d.x_sum[t] = t;
      d.xd[t] = 0.01f * static_cast<float>(t + 1);
    }
  }
  std::vector<float> out(static_cast<size_t>(threads));
  int8_on_every_thread(state, 64.0 * 80 * kBlocks, [&](int thread_idx) {
    const TileMixData& d = data[static_cast<size_t>(thread_idx)];
    out[static_cast<size_t>(thread_idx)] = scales ? int8_tile_mix<true>(d, kBlocks) : int8_tile_mix<false>(d, kBlocks);
  });
}
BENCHMARK(BM_Int8TileMix)->ArgName("scales")->Arg(1)->Arg(0)->UseRealTime()->Unit(benchmark::kMillisecond);

// One layer of causal attention in TinyLlama-1.1B's shape (32 query heads, 4 KV heads of 64) over
// a paged cache of 16-token blocks: a prompt of `tokens` tokens (prefill), or `seqs` sequences of
// one decode token each at position `tokens`. GFLOP/s counts 4 * head_dim flops per (query head,
// visible key) pair: the scores and the weighted sum of V.
void BM_Attention(benchmark::State& state) {
  const int64_t tokens = state.range(0), seqs = state.range(1);
  const bool prefill = seqs == 0;
  const AttentionShape shape{32, 4, 64};
  const int block_size = 16;
  const int64_t n_seqs = prefill ? 1 : seqs, context = prefill ? tokens : tokens + 1;
  const int64_t blocks_per_seq = (context + block_size - 1) / block_size;
  const int64_t slot_floats = int64_t{shape.n_kv_heads} * shape.head_dim;
  Rng rng(5);
  std::vector<float> k(static_cast<size_t>(n_seqs * blocks_per_seq * block_size * slot_floats));
  std::vector<float> v(k.size());
  for (float& f : k) f = 2.0f * rng.uniform_f() - 1.0f;
  for (float& f : v) f = 2.0f * rng.uniform_f() - 1.0f;
  std::vector<std::vector<int32_t>> tables(static_cast<size_t>(n_seqs));
  std::vector<AttentionRun> runs;
  for (int64_t s = 0; s < n_seqs; ++s) {
    for (int64_t b = 0; b < blocks_per_seq; ++b) tables[s].push_back(static_cast<int32_t>(s * blocks_per_seq + b));
    if (prefill) {
      runs.push_back({0, tokens, 0, tables[s]});
    } else {
      runs.push_back({s, 1, static_cast<int32_t>(tokens), tables[s]});
    }
  }
  const int64_t q_tokens = prefill ? tokens : n_seqs;
  std::vector<float> q(static_cast<size_t>(q_tokens * shape.q_dim())), out(q.size());
  for (float& f : q) f = 2.0f * rng.uniform_f() - 1.0f;
  const PagedKv kv{k.data(), v.data(), slot_floats, block_size};
  for (auto _ : state) {
    attention(shape, q.data(), kv, runs, out.data(), &pool());
    benchmark::DoNotOptimize(out.data());
  }
  const double pairs = prefill ? tokens * (tokens + 1) / 2.0 : static_cast<double>(n_seqs) * (tokens + 1);
  state.counters["GFLOP/s"] = benchmark::Counter(pairs * shape.n_heads * 4.0 * shape.head_dim * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Attention)
    ->ArgNames({"tokens", "seqs"})
    ->Args({512, 0})
    ->Args({2048, 0})
    ->Args({512, 1})
    ->Args({512, 32})
    ->Args({32, 32})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// Sums 1 GiB of floats, each pool thread over its contiguous share of the buffer.
void BM_MemoryReadBandwidth(benchmark::State& state) {
  constexpr int64_t kFloats = (int64_t{1} << 30) / 4;
  std::vector<float> buffer(static_cast<size_t>(kFloats), 1.0f);
  std::vector<float> sums(static_cast<size_t>(pool().num_threads()));
  for (auto _ : state) {
    pool().run([&](int thread_idx, int num_threads) {
      const float* p = buffer.data();
      const int64_t begin = kFloats * thread_idx / num_threads;
      const int64_t end = kFloats * (thread_idx + 1) / num_threads;
      // 64 lanes in independent accumulators: the loop vectorises and is not bound by the
      // latency of one chain of adds (8 lanes alone measured ~40% below the DRAM limit).
      constexpr int kLanes = 64;
      float s[kLanes] = {};
      for (int64_t i = begin; i + kLanes <= end; i += kLanes) {
        for (int k = 0; k < kLanes; ++k) s[k] += p[i + k];
      }
      float total = 0;
      for (float v : s) total += v;
      sums[static_cast<size_t>(thread_idx)] = total;
    });
    benchmark::DoNotOptimize(sums.data());
  }
  state.counters["GB/s"] = benchmark::Counter(kFloats * 4 * 1e-9,
                                              benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::to_string(pool().num_threads()) + " threads");
}
BENCHMARK(BM_MemoryReadBandwidth)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace koi::kernels

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    bool known = false;
    if (arg.rfind("--threads=", 0) == 0) {
      koi::kernels::g_threads = std::atoi(arg.c_str() + 10);
      known = koi::kernels::g_threads > 0;
    }
    for (int level = 0; level <= 3; ++level) {
      auto isa = static_cast<koi::kernels::Isa>(level);
      if (arg == "--isa=" + std::string(koi::kernels::isa_name(isa))) {
        koi::kernels::set_isa(isa);
        known = true;
      }
    }
    if (!known) {
      std::fprintf(stderr, "unknown argument %s; expected --isa=portable|avx2|avx512|avx512bf16 "
                   "or --threads=N (N > 0)\n", argv[i]);
      return 1;
    }
  }
  benchmark::AddCustomContext("threads", std::to_string(koi::kernels::pool().num_threads()));
  benchmark::AddCustomContext("isa", std::string(koi::kernels::isa_name(koi::kernels::active_isa())));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
