// lora_add at every ISA level this CPU has, against ref::lora_add, and its determinism contract.
#include "kernels/lora.h"

#include <gtest/gtest.h>

#include <cmath>
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

// Adapters of awkward ranks (one that skips this projection) over in x out.
struct Adapters {
  std::vector<std::vector<float>> a, bt;
  std::vector<LoraMatrices> matrices;
};
Adapters random_adapters(Rng& rng, int64_t in, int64_t out, std::vector<int> ranks) {
  Adapters ad;
  for (int rank : ranks) {
    ad.a.push_back(random_floats(rng, rank * in));
    ad.bt.push_back(random_floats(rng, rank * out));
  }
  for (size_t i = 0; i < ranks.size(); ++i) {
    ad.matrices.push_back({ad.a[i].data(), ad.bt[i].data(), ranks[i], 0.5f + static_cast<float>(i)});
  }
  return ad;
}

// Largest over rows of ||y - ref|| / (||ref - y0|| + ||y0|| * 2^-23): the error relative to the
// update's size, plus the rounding of adding it to y0 (one float ulp of y0's size).
double relative_error(const std::vector<float>& y, const std::vector<float>& ref, const std::vector<float>& y0,
                      int64_t out) {
  double worst = 0;
  for (size_t t = 0; t < y.size() / out; ++t) {
    double err = 0, size = 0, base = 0;
    for (int64_t o = 0; o < out; ++o) {
      const size_t i = t * out + o;
      err += (y[i] - ref[i]) * (y[i] - ref[i]);
      size += (ref[i] - y0[i]) * (ref[i] - y0[i]);
      base += double{y0[i]} * y0[i];
    }
    if (size > 0) worst = std::max(worst, std::sqrt(err) / (std::sqrt(size) + std::sqrt(base) * 0x1p-23));
  }
  return worst;
}

TEST(LoraAdd, MatchesReferenceAtEveryLevel) {
  ThreadPool pool(3);
  const int64_t shapes[][3] = {{1, 64, 64}, {7, 67, 173}, {37, 173, 31}, {130, 64, 172}, {19, 1, 5}};
  for (Isa isa : levels()) {
    ScopedIsa scoped(isa);
    for (const auto& shape : shapes) {
      const int64_t n_rows = shape[0], in = shape[1], out = shape[2];
      Rng rng(static_cast<uint64_t>(n_rows * 1000 + in));
      Adapters ad = random_adapters(rng, in, out, {8, 1, 0, 3, 16});
      const std::vector<float> x = random_floats(rng, n_rows * in);
      const std::vector<float> y0 = random_floats(rng, n_rows * out);
      std::vector<int32_t> adapter_of_row(static_cast<size_t>(n_rows));
      for (int32_t& a : adapter_of_row) a = static_cast<int32_t>(rng.below(6)) - 1;  // -1 .. 4
      std::vector<float> ref = y0, fast = y0;
      ref::lora_add(ad.matrices, adapter_of_row.data(), x.data(), in, ref.data(), out, n_rows);
      lora_add(ad.matrices, adapter_of_row.data(), x.data(), in, fast.data(), out, n_rows, &pool);
      // Two chained f32 reductions with cancellation in each: about 1e-5 seen, 1e-4 allowed.
      EXPECT_LT(relative_error(fast, ref, y0, out), 1e-4)
          << isa_name(isa) << " rows " << n_rows << " in " << in << " out " << out;
      for (int64_t t = 0; t < n_rows; ++t) {
        const int32_t a = adapter_of_row[static_cast<size_t>(t)];
        if (a >= 0 && ad.matrices[static_cast<size_t>(a)].rank > 0) continue;
        for (int64_t o = 0; o < out; ++o) {
          ASSERT_EQ(fast[t * out + o], y0[t * out + o]) << "row " << t << " has no adapter and must not change";
        }
      }
    }
  }
}

// A row's result is bitwise the same alone, in any mix of adapters, and on any thread count.
TEST(LoraAdd, RowIsBatchInvariant) {
  const int64_t n_rows = 97, in = 96, out = 160;
  Rng rng(7);
  Adapters ad = random_adapters(rng, in, out, {8, 4, 16});
  const std::vector<float> x = random_floats(rng, n_rows * in);
  const std::vector<float> y0 = random_floats(rng, n_rows * out);
  std::vector<int32_t> adapter_of_row(static_cast<size_t>(n_rows));
  for (int32_t& a : adapter_of_row) a = static_cast<int32_t>(rng.below(4)) - 1;
  for (Isa isa : levels()) {
    ScopedIsa scoped(isa);
    ThreadPool pool(4);
    std::vector<float> batched = y0, serial = y0;
    lora_add(ad.matrices, adapter_of_row.data(), x.data(), in, batched.data(), out, n_rows, &pool);
    lora_add(ad.matrices, adapter_of_row.data(), x.data(), in, serial.data(), out, n_rows, nullptr);
    EXPECT_EQ(batched, serial) << isa_name(isa);
    for (int64_t t = 0; t < n_rows; t += 13) {
      std::vector<float> alone(y0.begin() + t * out, y0.begin() + (t + 1) * out);
      lora_add(ad.matrices, &adapter_of_row[static_cast<size_t>(t)], x.data() + t * in, in, alone.data(), out, 1,
               nullptr);
      const std::vector<float> in_batch(batched.begin() + t * out, batched.begin() + (t + 1) * out);
      EXPECT_EQ(alone, in_batch) << isa_name(isa) << " row " << t;
    }
  }
}

TEST(LoraAdd, NoAdaptersChangesNothing) {
  const std::vector<float> x(4 * 8, 1.0f);
  std::vector<float> y(4 * 8, 2.0f);
  const std::vector<int32_t> none(4, -1);
  lora_add({}, none.data(), x.data(), 8, y.data(), 8, 4, nullptr);
  EXPECT_EQ(y, std::vector<float>(4 * 8, 2.0f));
}

}  // namespace
}  // namespace koi::kernels
