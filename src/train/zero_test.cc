// ZeRO-2/3 on one process (LocalCommunicator): the unit stream reproduces the plain training
// step bitwise, stage 3 keeps no full copy of the weights and stays within its memory bound,
// and the units cover the flat layout. The multi-rank runs against a single process are
// tests/train_mpi_zero*.sh (real mpirun ranks).
#include "train/zero.h"

#include <gtest/gtest.h>

#include <random>

#include "train/data_parallel.h"

namespace koi::train {
namespace {

model::ModelConfig tiny_config(bool tied, bool moe = false) {
  model::ModelConfig c;
  c.dim = 32, c.n_layers = 3, c.n_heads = 4, c.n_kv_heads = 2, c.head_dim = 8, c.ffn_dim = 48, c.n_vocab = 40;
  c.max_seq_len = 16, c.tied_embeddings = tied, c.rope_style = kernels::RopeStyle::kNeox;
  if (moe) c.moe = {.n_experts = 4, .n_experts_used = 2, .expert_ffn_dim = 16};
  return c;
}

constexpr int kB = 2, kT = 12;

void make_batch(int step, int vocab, std::vector<int32_t>* in, std::vector<int32_t>* tg) {
  std::mt19937 rng(static_cast<uint32_t>(100 + step));
  in->resize(kB * kT), tg->resize(kB * kT);
  for (int i = 0; i < kB * kT; ++i) {
    (*in)[i] = static_cast<int32_t>(rng() % vocab);
    (*tg)[i] = static_cast<int32_t>(rng() % vocab);
  }
}

AdamWConfig adam() {
  AdamWConfig a;
  a.weight_decay = 0.1f;
  return a;
}

// `steps` plain steps of `micro` micro-batches: full gradients, clip_grad_norm, AdamW.
std::vector<float> plain_run(const model::ModelConfig& c, int steps, int micro_batches, float clip,
                             std::vector<float>* losses) {
  ThreadPool pool(1);
  LlamaTrain m = *LlamaTrain::create(c, &pool);
  m.init_random(5);
  AdamW opt(adam(), static_cast<int64_t>(m.params().size()));
  std::vector<int32_t> in, tg;
  for (int s = 0; s < steps; ++s) {
    m.zero_grad();
    for (int micro = 0; micro < micro_batches; ++micro) {
      make_batch(micro_batches * s + micro, m.config().n_vocab, &in, &tg);
      losses->push_back(m.forward(in.data(), tg.data(), kB, kT));
      m.backward(1.0f / static_cast<float>(micro_batches * kB * kT));
    }
    clip_grad_norm(m.grads(), clip);
    opt.step(m.params(), m.grads(), m.layout(), 1e-2f);
  }
  return m.params();
}

// The same through ShardedDataParallel; returns the full weights (gathered).
std::vector<float> zero_run(const model::ModelConfig& c, int stage, bool overlap, int steps, int micro_batches,
                            float clip, std::vector<float>* losses, ZeroMemory* memory = nullptr) {
  ThreadPool pool(1);
  LocalCommunicator comm;
  LlamaTrain m = *LlamaTrain::create(c, &pool);
  m.init_random(5);
  ShardedDataParallel zero(&comm, &m, adam(), stage, overlap);
  EXPECT_TRUE(m.grads().empty());
  EXPECT_EQ(m.params().empty(), stage == 3);
  zero.reset_peak();
  std::vector<int32_t> in, tg;
  for (int s = 0; s < steps; ++s) {
    m.zero_grad();
    zero.zero_grad();
    for (int micro = 0; micro < micro_batches; ++micro) {
      make_batch(micro_batches * s + micro, m.config().n_vocab, &in, &tg);
      losses->push_back(m.forward(in.data(), tg.data(), kB, kT));
      m.backward(1.0f / static_cast<float>(micro_batches * kB * kT));
    }
    EXPECT_TRUE(zero.finish_backward().ok());
    EXPECT_TRUE(zero.clip_grad_norm(clip).ok());
    EXPECT_TRUE(zero.step(1e-2f, &pool).ok());
  }
  if (memory != nullptr) *memory = zero.memory();
  std::vector<float> out;
  EXPECT_TRUE(zero.with_full_state([&](AdamW& full) {
                    EXPECT_EQ(full.steps(), steps);
                    out = m.params();
                    return ok_status();
                  }).ok());
  EXPECT_EQ(m.params().empty(), stage == 3);  // released again after the checkpoint's gather
  return out;
}

TEST(ZeroUnits, PiecesCoverTheFlatLayoutOnce) {
  for (bool tied : {true, false}) {
    ThreadPool pool(1);
    LlamaTrain m = *LlamaTrain::create(tiny_config(tied), &pool);
    const int64_t total = static_cast<int64_t>(m.params().size());
    std::vector<int> covered(static_cast<size_t>(total), 0);
    ASSERT_EQ(m.num_units(), 4);
    for (int u = 0; u < m.num_units(); ++u) {
      for (const Range& r : m.unit_pieces(u)) {
        for (int64_t i = r.begin; i < r.end; ++i) ++covered[static_cast<size_t>(i)];
      }
    }
    EXPECT_EQ(std::count(covered.begin(), covered.end(), 1), total) << "tied " << tied;
    // The root: the embedding first, then the final norm (and the output when untied).
    const std::vector<Range> root = m.unit_pieces(3);
    ASSERT_EQ(root.size(), 2u);
    EXPECT_EQ(root[0].begin, 0);
    EXPECT_EQ(root[0].end, m.layout()[1].offset);
    EXPECT_EQ(root[1].end, total);
  }
}

TEST(ShardedDataParallel, OneRankMatchesThePlainStepBitwise) {
  const std::pair<const char*, model::ModelConfig> models[] = {
      {"tied", tiny_config(true)}, {"untied", tiny_config(false)}, {"experts", tiny_config(false, true)}};
  for (const auto& [name, config] : models) {
    std::vector<float> plain_losses;
    // One micro-batch: accumulating a second one sums in another order (0 + g2, then g1 + that).
    const std::vector<float> plain = plain_run(config, 3, 1, /*clip=*/0.0f, &plain_losses);
    for (int stage : {2, 3}) {
      for (bool overlap : {true, false}) {
        std::vector<float> losses;
        const std::vector<float> got = zero_run(config, stage, overlap, 3, 1, 0.0f, &losses);
        EXPECT_EQ(losses, plain_losses) << "stage " << stage << " overlap " << overlap << " " << name;
        EXPECT_EQ(got, plain) << "stage " << stage << " overlap " << overlap << " " << name;
      }
    }
  }
}

TEST(ShardedDataParallel, ClipsByTheGlobalNormLikeClipGradNorm) {
  std::vector<float> plain_losses, losses;
  const std::vector<float> plain = plain_run(tiny_config(false), 3, 2, /*clip=*/0.05f, &plain_losses);
  const std::vector<float> got = zero_run(tiny_config(false), 3, true, 3, 2, 0.05f, &losses);
  ASSERT_EQ(got.size(), plain.size());
  // The sum of squares runs in unit order, not layout order, and micro-batches are summed per
  // unit: the last bits may differ.
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], plain[i], 1e-6f) << i;
}

TEST(ShardedDataParallel, StageThreeHoldsItsPartsAndOneWorkingSet) {
  std::vector<float> losses;
  for (bool overlap : {true, false}) {
    ZeroMemory m;
    zero_run(tiny_config(false), 3, overlap, 2, 2, 1.0f, &losses, &m);
    const int64_t params = m.one_process / 16;
    EXPECT_EQ(m.own, m.one_process);  // one rank owns every part
    EXPECT_GT(m.tracked_peak, m.own);  // gathered units on top
    EXPECT_LE(m.tracked_peak, m.own + m.working_set) << m.arithmetic;
    // Far below a second full copy of weights and gradients: the units are freed after use.
    EXPECT_LT(m.working_set, 2 * params * 4);
    EXPECT_GT(m.peak_rss, 0);
  }
}

// The unit buffers of the first step are reused by the later ones (no allocation after it),
// within the same bound as before.
TEST(ShardedDataParallel, LaterStepsReuseTheFirstStepsBuffers) {
  for (int stage : {2, 3}) {
    for (bool overlap : {true, false}) {
      std::vector<float> losses;
      ZeroMemory one, four;
      zero_run(tiny_config(false), stage, overlap, 1, 2, 1.0f, &losses, &one);
      zero_run(tiny_config(false), stage, overlap, 4, 2, 1.0f, &losses, &four);
      EXPECT_EQ(four.buffers_allocated, one.buffers_allocated) << "stage " << stage << " overlap " << overlap;
      EXPECT_LE(four.tracked_peak, four.own + four.working_set) << four.arithmetic;
    }
  }
}

TEST(Communicator, DefaultNonBlockingFormsRunAtStartAndReportAtWait) {
  LocalCommunicator comm;
  const std::vector<float> in{1, 2, 3};
  std::vector<float> out(3);
  const int64_t a = comm.start_reduce_scatter_sum(in.data(), out.data(), {3}, "rs");
  std::vector<float> g{4, 5};
  const int64_t b = comm.start_allgather(g.data(), {2}, "ag");
  EXPECT_NE(a, b);
  EXPECT_EQ(out, in);  // the one part is the whole
  EXPECT_TRUE(comm.wait(b).ok());
  EXPECT_TRUE(comm.wait(a).ok());
}

}  // namespace
}  // namespace koi::train
