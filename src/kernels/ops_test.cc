// The element-wise ops at every ISA level against double-precision references.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>
#include <vector>

#include "base/random.h"
#include "kernels/isa_testing.h"
#include "kernels/ops.h"

namespace koi::kernels {
namespace {

// Awkward lengths: below, at and past the vector widths, and a model row.
constexpr int64_t kSizes[] = {1, 7, 8, 33, 67, 131, 2048};

std::vector<float> random_floats(Rng& rng, int64_t n, float scale) {
  std::vector<float> v(static_cast<size_t>(n));
  for (float& f : v) f = scale * (2.0f * rng.uniform_f() - 1.0f);
  return v;
}

// Each test runs its body at every level, on every size; errors are relative to the scale of
// the exact result, with tolerances of a few f32 ulp (the vector exp is within 2 ulp of expf).
template <typename Body>
void for_levels_and_sizes(Body body) {
  for (Isa isa : levels()) {
    ScopedIsa scoped(isa);
    for (int64_t n : kSizes) {
      SCOPED_TRACE(testing::Message() << isa_name(isa) << " n " << n);
      body(n);
    }
  }
}

TEST(Ops, Dot) {
  Rng rng(1);
  for_levels_and_sizes([&](int64_t n) {
    std::vector<float> a = random_floats(rng, n, 1.0f), b = random_floats(rng, n, 1.0f);
    double exact = 0.0, scale = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      exact += static_cast<double>(a[i]) * b[i];
      scale += std::fabs(static_cast<double>(a[i]) * b[i]);
    }
    EXPECT_NEAR(dot(a.data(), b.data(), n), exact, 1e-6 * scale);
    EXPECT_NEAR(ref::dot(a.data(), b.data(), n), exact, 1e-6 * scale);
  });
}

TEST(Ops, Axpy) {
  Rng rng(2);
  for_levels_and_sizes([&](int64_t n) {
    std::vector<float> x = random_floats(rng, n, 1.0f), y = random_floats(rng, n, 1.0f);
    std::vector<float> expected(y.size());
    for (int64_t i = 0; i < n; ++i) expected[i] = static_cast<float>(y[i] + 0.75 * x[i]);
    axpy(0.75f, x.data(), y.data(), n);
    for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(y[i], expected[i], 2e-7) << i;
  });
}

TEST(Ops, Rmsnorm) {
  Rng rng(3);
  for_levels_and_sizes([&](int64_t n) {
    std::vector<float> x = random_floats(rng, n, 3.0f), weight = random_floats(rng, n, 1.0f);
    double ss = 0.0;
    for (float v : x) ss += static_cast<double>(v) * v;
    const double scale = 1.0 / std::sqrt(ss / static_cast<double>(n) + 1e-5);
    std::vector<float> out(x.size());
    rmsnorm(x.data(), weight.data(), out.data(), n, 1e-5f);
    for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(out[i], x[i] * scale * weight[i], 2e-6 * scale * 3.0) << i;
    rmsnorm(x.data(), weight.data(), x.data(), n, 1e-5f);  // in place
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(x[i], out[i]) << i;
  });
}

// rope_angles + rope_rotate against rotations in double, both pair layouts, at a small and a
// large position (angles of thousands of radians: f32's own rounding of pos * inv_freq sets the
// tolerance there).
TEST(Ops, Rope) {
  Rng rng(11);
  const int64_t n_heads = 3, head_dim = 16, half = head_dim / 2;
  std::vector<float> inv_freq(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) inv_freq[i] = std::pow(10000.0f, -2.0f * static_cast<float>(i) / head_dim);
  for (RopeStyle style : {RopeStyle::kInterleaved, RopeStyle::kNeox}) {
    for (int64_t pos : {int64_t{5}, int64_t{4000}}) {
      SCOPED_TRACE(testing::Message() << "style " << static_cast<int>(style) << " pos " << pos);
      const std::vector<float> x = random_floats(rng, n_heads * head_dim, 1.0f);
      std::vector<float> got = x, cos_pos(static_cast<size_t>(half)), sin_pos(static_cast<size_t>(half));
      rope_angles(pos, inv_freq.data(), head_dim, cos_pos.data(), sin_pos.data());
      rope_rotate(got.data(), n_heads, head_dim, cos_pos.data(), sin_pos.data(), style);
      for (int64_t h = 0; h < n_heads; ++h) {
        for (int64_t i = 0; i < half; ++i) {
          const int64_t a = h * head_dim + (style == RopeStyle::kInterleaved ? 2 * i : i);
          const int64_t b = h * head_dim + (style == RopeStyle::kInterleaved ? 2 * i + 1 : i + half);
          const double angle = static_cast<double>(static_cast<float>(pos) * inv_freq[i]);
          EXPECT_NEAR(got[a], x[a] * std::cos(angle) - x[b] * std::sin(angle), 1e-6) << h << " " << i;
          EXPECT_NEAR(got[b], x[a] * std::sin(angle) + x[b] * std::cos(angle), 1e-6) << h << " " << i;
        }
      }
    }
  }
}

TEST(Ops, Softmax) {
  Rng rng(4);
  for_levels_and_sizes([&](int64_t n) {
    std::vector<float> x = random_floats(rng, n, 30.0f);
    if (n > 2) x[1] = -std::numeric_limits<float>::infinity();  // a masked position
    // The shift x - max is rounded to f32 by every implementation; the reference takes the same
    // rounded shift so that the tolerance measures exp and the normalisation alone.
    float max = x[0];
    for (float v : x) max = std::max(max, v);
    double sum = 0.0;
    for (float v : x) sum += std::exp(static_cast<double>(v - max));
    std::vector<float> expected(x.size());
    for (int64_t i = 0; i < n; ++i) expected[i] = static_cast<float>(std::exp(static_cast<double>(x[i] - max)) / sum);
    softmax(x.data(), n);
    double total = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_NEAR(x[i], expected[i], 1e-6 * expected[i] + 1e-30) << i;
      total += x[i];
    }
    if (n > 2) {
      EXPECT_EQ(x[1], 0.0f);
    }
    EXPECT_NEAR(total, 1.0, 1e-5);
  });
}

TEST(Ops, SiluMul) {
  Rng rng(5);
  for_levels_and_sizes([&](int64_t n) {
    std::vector<float> gate = random_floats(rng, n, 20.0f), up = random_floats(rng, n, 2.0f);
    if (n > 2) {  // exp under- and overflow
      gate[0] = -200.0f;
      gate[1] = 100.0f;
    }
    std::vector<float> expected(gate.size());
    for (int64_t i = 0; i < n; ++i) {
      expected[i] = static_cast<float>(gate[i] / (1.0 + std::exp(-static_cast<double>(gate[i]))) * up[i]);
    }
    silu_mul(gate.data(), up.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_NEAR(gate[i], expected[i], 1e-6 * std::fabs(expected[i]) + 1e-30) << i;
    }
  });
}

// On a pool, in ranges: bitwise the one-thread result at every level, sizes that leave a scalar
// tail included (a split that cut a vector short would change which values take the tail loop).
TEST(Ops, ActivationsOnAPoolGiveTheOneThreadResultBitwise) {
  Rng rng(7);
  ThreadPool pool(2);
  for (Isa isa : levels()) {
    ScopedIsa scoped(isa);
    for (int64_t n : {int64_t{70000}, int64_t{5632 * 32 + 13}}) {
      const std::vector<float> gate = random_floats(rng, n, 8.0f), up = random_floats(rng, n, 2.0f);
      for (auto fn : {&silu_mul, &gelu_tanh_mul}) {
        std::vector<float> alone = gate, on_pool = gate;
        fn(alone.data(), up.data(), n, nullptr);
        fn(on_pool.data(), up.data(), n, &pool);
        EXPECT_EQ(0, std::memcmp(alone.data(), on_pool.data(), alone.size() * sizeof(float)))
            << isa_name(isa) << " n " << n;
      }
    }
  }
}

TEST(Ops, GeluTanhMul) {
  Rng rng(6);
  for_levels_and_sizes([&](int64_t n) {
    std::vector<float> gate = random_floats(rng, n, 8.0f), up = random_floats(rng, n, 2.0f);
    if (n > 2) {  // tanh saturates: gelu(x) -> x, gelu(-x) -> 0
      gate[0] = -60.0f;
      gate[1] = 60.0f;
    }
    std::vector<double> expected(gate.size());
    for (int64_t i = 0; i < n; ++i) {
      const double x = gate[i];
      expected[i] = 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / std::numbers::pi) * (x + 0.044715 * x * x * x))) * up[i];
    }
    gelu_tanh_mul(gate.data(), up.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_NEAR(gate[i], expected[i], 1e-5 * std::fabs(expected[i]) + 1e-6) << i << " x=" << gate[i];
    }
  });
}

TEST(Ops, Softcap) {
  Rng rng(7);
  for_levels_and_sizes([&](int64_t n) {
    std::vector<float> x = random_floats(rng, n, 200.0f);
    std::vector<double> expected(x.size());
    for (int64_t i = 0; i < n; ++i) expected[i] = 30.0 * std::tanh(x[i] / 30.0);
    softcap(x.data(), n, 30.0f);
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_NEAR(x[i], expected[i], 1e-6 * 30.0) << i;
      EXPECT_LE(std::fabs(x[i]), 30.0f) << i;
    }
  });
}

TEST(Ops, Sigmoid) {
  Rng rng(8);
  for_levels_and_sizes([&](int64_t n) {
    std::vector<float> x = random_floats(rng, n, 20.0f);
    if (n > 2) {  // exp under- and overflow
      x[0] = -200.0f;
      x[1] = 100.0f;
    }
    std::vector<float> out(x.size());
    sigmoid(x.data(), out.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      const double expected = 1.0 / (1.0 + std::exp(-static_cast<double>(x[i])));
      EXPECT_NEAR(out[i], expected, 1e-6 * expected + 1e-30) << i;
    }
  });
}

}  // namespace
}  // namespace koi::kernels
