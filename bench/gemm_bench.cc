// The trainer's f32 products at the shakespeare_char recipe's shapes (768 tokens, width 128,
// FFN 352, vocabulary 321): sgemm (gemm.h) in the three layouts of a linear layer's forward
// and backward, next to the route the trainer took before it (transposed copies through the
// inference matmul), in GFLOP/s, and the core's AVX-512 FMA peak (register-only) for scale.
//
//   build-x/bench/koi_bench_gemm [--benchmark_filter=...]    (threads: KOI_THREADS, default 1)
#include <benchmark/benchmark.h>

#include <immintrin.h>

#include <cstdlib>
#include <vector>

#include "base/random.h"
#include "base/thread_pool.h"
#include "kernels/gemm.h"
#include "kernels/ops.h"

namespace koi::kernels {
namespace {

ThreadPool& pool() {
  static ThreadPool p(std::getenv("KOI_THREADS") != nullptr ? std::atoi(std::getenv("KOI_THREADS")) : 1);
  return p;
}

std::vector<float> random_floats(int64_t n) {
  Rng rng(static_cast<uint64_t>(n));
  std::vector<float> v(static_cast<size_t>(n));
  for (float& f : v) f = 2.0f * rng.uniform_f() - 1.0f;
  return v;
}

void transpose(const float* a, float* at, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) at[c * rows + r] = a[r * cols + c];
  }
}

// Layout 0: y = x W^T;  1: dx = dy W;  2: dW = dy^T x.  Tokens N, layer in -> out.
void BM_Sgemm(benchmark::State& state) {
  const int layout = static_cast<int>(state.range(0));
  const int64_t N = state.range(1), in = state.range(2), out = state.range(3);
  const std::vector<float> x = random_floats(N * in), w = random_floats(out * in), dy = random_floats(N * out);
  std::vector<float> c(static_cast<size_t>(std::max({N * out, N * in, out * in})));
  for (auto _ : state) {
    if (layout == 0) sgemm(N, out, in, {x.data(), in, 1}, {w.data(), 1, in}, c.data(), out, false, &pool());
    if (layout == 1) sgemm(N, in, out, {dy.data(), out, 1}, {w.data(), in, 1}, c.data(), in, false, &pool());
    if (layout == 2) sgemm(out, in, N, {dy.data(), 1, out}, {x.data(), in, 1}, c.data(), in, false, &pool());
    benchmark::DoNotOptimize(c.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * N * in * out, benchmark::Counter::kIsIterationInvariantRate);
}

// The same three products as before sgemm: transposed copies, then the inference matmul.
void BM_TransposeMatmul(benchmark::State& state) {
  const int layout = static_cast<int>(state.range(0));
  const int64_t N = state.range(1), in = state.range(2), out = state.range(3);
  const std::vector<float> x = random_floats(N * in), w = random_floats(out * in), dy = random_floats(N * out);
  std::vector<float> a(static_cast<size_t>(std::max(in * out, N * in)));
  std::vector<float> b(static_cast<size_t>(std::max(N * in, N * out)));
  std::vector<float> c(static_cast<size_t>(std::max({N * out, N * in, out * in})));
  for (auto _ : state) {
    if (layout == 0) matmul(make_view(DType::kF32, {in, out}, w.data()), x.data(), c.data(), N, &pool());
    if (layout == 1) {
      transpose(w.data(), a.data(), out, in);
      matmul(make_view(DType::kF32, {out, in}, a.data()), dy.data(), c.data(), N, &pool());
    }
    if (layout == 2) {
      transpose(x.data(), a.data(), N, in);
      transpose(dy.data(), b.data(), N, out);
      matmul(make_view(DType::kF32, {N, in}, a.data()), b.data(), c.data(), out, &pool());
    }
    benchmark::DoNotOptimize(c.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * N * in * out, benchmark::Counter::kIsIterationInvariantRate);
}

void trainer_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"layout", "N", "in", "out"});
  for (int layout = 0; layout < 3; ++layout) {
    b->Args({layout, 768, 128, 128});  // q, k, v, o
    b->Args({layout, 768, 128, 352});  // gate, up
    b->Args({layout, 768, 352, 128});  // down
    b->Args({layout, 768, 128, 321});  // head
  }
}

// The ceiling: 12 independent chains of AVX-512 fused multiply-adds in registers, no memory.
__attribute__((target("avx512f"))) void BM_FmaPeak(benchmark::State& state) {
  constexpr int64_t kSteps = 1 << 20;
  if (!__builtin_cpu_supports("avx512f")) {
    state.SkipWithError("no AVX-512 on this CPU");
    return;
  }
  for (auto _ : state) {
    __m512 acc[12];
    for (int i = 0; i < 12; ++i) acc[i] = _mm512_set1_ps(0.001f * static_cast<float>(i));
    const __m512 x = _mm512_set1_ps(0.999f), y = _mm512_set1_ps(0.0001f);
    for (int64_t k = 0; k < kSteps; ++k) {
#pragma GCC unroll 12
      for (int i = 0; i < 12; ++i) acc[i] = _mm512_fmadd_ps(acc[i], x, y);
    }
    for (int i = 0; i < 12; ++i) benchmark::DoNotOptimize(acc[i]);
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * 16 * 12 * kSteps, benchmark::Counter::kIsIterationInvariantRate);
}

BENCHMARK(BM_Sgemm)->Apply(trainer_shapes)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_TransposeMatmul)->Apply(trainer_shapes)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_FmaPeak)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace koi::kernels

BENCHMARK_MAIN();
