// sgemm at every ISA level against ref::sgemm: bitwise equal (both sum in order with fused
// multiply-adds), on awkward sizes, on the three layouts the trainer uses, with and without
// accumulation, and independent of the thread count.
#include "kernels/gemm.h"

#include <gtest/gtest.h>

#include <vector>

#include "base/random.h"
#include "kernels/isa_testing.h"

namespace koi::kernels {
namespace {

std::vector<float> random_floats(Rng& rng, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (float& f : v) f = 2.0f * rng.uniform_f() - 1.0f;
  return v;
}

// The layouts of the trainer's products: x W^T (B transposed), dy W (plain), dy^T x (A transposed).
enum class Layout { kPlain, kTransA, kTransB };

struct Case {
  int64_t M, N, K;
  Layout layout;
};

// A (M, K) and B (K, N) stored as the layout says, plus C's initial contents.
struct Operands {
  std::vector<float> a, b, c0;
  StridedMatrix ma, mb;
};

Operands make_operands(const Case& t, uint64_t seed) {
  Rng rng(seed);
  Operands o;
  o.a = random_floats(rng, t.M * t.K);
  o.b = random_floats(rng, t.K * t.N);
  o.c0 = random_floats(rng, t.M * (t.N + 3));
  o.ma = t.layout == Layout::kTransA ? StridedMatrix{o.a.data(), 1, t.M} : StridedMatrix{o.a.data(), t.K, 1};
  o.mb = t.layout == Layout::kTransB ? StridedMatrix{o.b.data(), 1, t.K} : StridedMatrix{o.b.data(), t.N, 1};
  return o;
}

const Case kCases[] = {
    {1, 1, 1, Layout::kPlain},     {5, 7, 3, Layout::kTransB},    {13, 33, 17, Layout::kTransA},
    {37, 100, 67, Layout::kTransB}, {100, 37, 131, Layout::kPlain}, {24, 64, 128, Layout::kTransA},
    {96, 96, 200, Layout::kTransB}, {7, 200, 1, Layout::kPlain},
};

TEST(SgemmTest, EveryLevelEqualsTheReferenceBitwise) {
  ThreadPool pool(2);
  uint64_t seed = 1;
  for (const Case& t : kCases) {
    for (bool accumulate : {false, true}) {
      const Operands o = make_operands(t, seed++);
      const int64_t ldc = t.N + 3;  // C with a row stride wider than N; the extra columns stay untouched
      std::vector<float> want = o.c0;
      ref::sgemm(t.M, t.N, t.K, o.ma, o.mb, want.data(), ldc, accumulate);
      for (Isa isa : levels()) {
        ScopedIsa scoped(isa);
        std::vector<float> got = o.c0;
        sgemm(t.M, t.N, t.K, o.ma, o.mb, got.data(), ldc, accumulate, &pool);
        ASSERT_EQ(got, want) << "isa " << isa_name(isa) << " M " << t.M << " N " << t.N << " K " << t.K
                             << " accumulate " << accumulate;
      }
    }
  }
}

TEST(SgemmTest, ReferenceMatchesADoubleSum) {
  const Case t{9, 11, 50, Layout::kTransA};
  const Operands o = make_operands(t, 99);
  std::vector<float> c(static_cast<size_t>(t.M * t.N));
  ref::sgemm(t.M, t.N, t.K, o.ma, o.mb, c.data(), t.N, false);
  for (int64_t i = 0; i < t.M; ++i) {
    for (int64_t j = 0; j < t.N; ++j) {
      double s = 0.0;
      for (int64_t k = 0; k < t.K; ++k) {
        s += double{o.ma.data[i * o.ma.row_stride + k * o.ma.col_stride]} * o.mb.data[k * o.mb.row_stride + j * o.mb.col_stride];
      }
      EXPECT_NEAR(c[static_cast<size_t>(i * t.N + j)], s, 1e-5) << i << "," << j;
    }
  }
}

TEST(SgemmTest, ResultDoesNotDependOnTheThreadCount) {
  const Case t{300, 130, 90, Layout::kTransB};
  const Operands o = make_operands(t, 7);
  std::vector<float> first;
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    std::vector<float> c(static_cast<size_t>(t.M * t.N));
    sgemm(t.M, t.N, t.K, o.ma, o.mb, c.data(), t.N, false, &pool);
    if (first.empty()) {
      first = c;
    } else {
      EXPECT_EQ(c, first) << threads << " threads";
    }
  }
}

TEST(SgemmTest, EmptyReductionZeroesOrKeepsC) {
  std::vector<float> c = {1, 2, 3, 4};
  sgemm(2, 2, 0, {nullptr, 0, 0}, {nullptr, 0, 0}, c.data(), 2, true, nullptr);
  EXPECT_EQ(c, (std::vector<float>{1, 2, 3, 4}));
  sgemm(2, 2, 0, {nullptr, 0, 0}, {nullptr, 0, 0}, c.data(), 2, false, nullptr);
  EXPECT_EQ(c, (std::vector<float>{0, 0, 0, 0}));
}

}  // namespace
}  // namespace koi::kernels
