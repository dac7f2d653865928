// ParallelStrategy's decisions on one process, exactly: which part of the step goes to the
// optimizer, ZeRO, the pipeline or the tensor-parallel norm, and which collectives it makes on
// which group. The groups are RefusingCommunicator doubles, so a collective the strategy should
// not make fails the test with its name. The real ranks are tests/train_mpi_*.sh.
#include "train/parallel_strategy.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "train/testing_communicator.h"

namespace koi::train {
namespace {

// Rank 0 of `size` whose peers together add `peer` to every element of an allreduce (float) and
// `peer_ss` to a double one; records every call as "what n".
class PeerSum final : public RefusingCommunicator {
 public:
  PeerSum(int size, float peer, double peer_ss = 0.0) : RefusingCommunicator(0, size), peer_(peer), peer_ss_(peer_ss) {}
  Status allreduce_sum(float* data, int64_t n, std::string_view what) override {
    calls.push_back(std::string(what) + " " + std::to_string(n));
    for (int64_t i = 0; i < n; ++i) data[i] += peer_;
    return ok_status();
  }
  Status allreduce_sum(double* data, int64_t n, std::string_view what) override {
    calls.push_back(std::string(what) + " " + std::to_string(n));
    for (int64_t i = 0; i < n; ++i) data[i] += peer_ss_;
    return ok_status();
  }
  std::vector<std::string> calls;

 private:
  float peer_;
  double peer_ss_;
};

model::ModelConfig tiny_config() {
  model::ModelConfig c;
  c.dim = 16, c.n_layers = 2, c.n_heads = 2, c.n_kv_heads = 2, c.head_dim = 8, c.ffn_dim = 24, c.n_vocab = 20;
  c.max_seq_len = 8, c.rope_style = kernels::RopeStyle::kNeox;
  return c;
}

constexpr int kB = 2, kT = 6;
constexpr float kScale = 1.0f / (kB * kT);

struct Batch {
  std::vector<int32_t> in, tg;
};

Batch batch(int vocab) {
  std::mt19937 rng(3);
  Batch b;
  for (int i = 0; i < kB * kT; ++i) {
    b.in.push_back(static_cast<int32_t>(rng() % vocab));
    b.tg.push_back(static_cast<int32_t>(rng() % vocab));
  }
  return b;
}

LlamaTrain model(ThreadPool* pool) {
  LlamaTrain m = *LlamaTrain::create(tiny_config(), pool);
  m.init_random(11);
  m.zero_grad();
  return m;
}

// The single-process step the strategies must reproduce: loss * B, then the gradients, clipped.
struct Plain {
  double loss_times_b;
  std::vector<float> grads;
  float norm;
  std::vector<float> params_after;  // after one AdamW step at lr 1e-2
};

Plain plain_step(float max_norm) {
  ThreadPool pool(1);
  LlamaTrain m = model(&pool);
  const Batch b = batch(m.config().n_vocab);
  Plain p;
  p.loss_times_b = (m.forward(b.in.data(), b.tg.data(), kB, kT) + m.aux_loss()) * static_cast<float>(kB);
  m.backward(kScale);
  p.grads = m.grads();
  p.norm = clip_grad_norm(m.grads(), max_norm);
  AdamW opt(AdamWConfig{}, static_cast<int64_t>(m.params().size()));
  opt.step(m.params(), m.grads(), m.layout(), 1e-2f);
  p.params_after = m.params();
  return p;
}

TEST(ParallelStrategy, PlainDataParallelSumsTheGradientsInBucketsOverTheDataGroupOnly) {
  const Plain ref = plain_step(1e9f);
  ThreadPool pool(1);
  LlamaTrain m = model(&pool);
  PeerSum data(2, 0.5f);
  DistributedAdamW opt(&data, AdamWConfig{}, m.trainable_layout(), 0);
  ParallelStrategy s{.model = &m, .data = &data, .opt = &opt};
  const Batch b = batch(m.config().n_vocab);
  const Result<double> loss = s.forward_backward(b.in.data(), b.tg.data(), kB, kT, kScale, true);
  ASSERT_TRUE(loss.ok()) << loss.status().message();
  EXPECT_EQ(*loss, ref.loss_times_b);
  EXPECT_TRUE(data.calls.empty());  // forward and backward talk to no group

  const int64_t n = static_cast<int64_t>(m.grads().size()), bucket = 1000;
  ASSERT_TRUE(s.reduce_grads(bucket).ok());
  std::vector<std::string> expected;
  for (int64_t offset = 0, k = 0; offset < n; offset += bucket, ++k) {
    expected.push_back("allreduce grads bucket " + std::to_string(k) + " " + std::to_string(std::min(bucket, n - offset)));
  }
  EXPECT_EQ(data.calls, expected);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(m.grads()[i], ref.grads[i] + 0.5f) << i;

  // The norm of a replicated model is local: no collective.
  data.calls.clear();
  const Result<float> norm = s.clip_grad_norm(1e9f);
  ASSERT_TRUE(norm.ok());
  EXPECT_EQ(*norm, std::sqrt(static_cast<float>(sum_of_squares(m.grads().data(), n))));
  EXPECT_TRUE(data.calls.empty());
  const Result<std::vector<double>> bubble = s.bubble();
  ASSERT_TRUE(bubble.ok());
  EXPECT_TRUE(bubble->empty());
}

// With overlap (ZeRO-0/1's default) only the step's last micro-batch reduces, unit by unit as
// its backward ends (layers last to first, then the root's two runs), in place in grads(); the
// sums are those of the allreduce after backward.
TEST(ParallelStrategy, OverlapReducesEachUnitAsTheLastMicroBatchsBackwardEnds) {
  ThreadPool pool(1);
  LlamaTrain plain = model(&pool), m = model(&pool);
  const Batch b = batch(m.config().n_vocab);
  for (int micro = 0; micro < 2; ++micro) {
    plain.forward(b.in.data(), b.tg.data(), kB, kT);
    plain.backward(kScale / 2);
  }
  PeerSum data(2, 0.5f);
  DistributedAdamW opt(&data, AdamWConfig{}, m.trainable_layout(), 0);
  GradientOverlap overlap(&data, &m);
  ParallelStrategy s{.model = &m, .data = &data, .opt = &opt, .overlap = &overlap};
  ASSERT_TRUE(s.forward_backward(b.in.data(), b.tg.data(), kB, kT, kScale / 2, false).ok());
  EXPECT_TRUE(data.calls.empty());
  ASSERT_TRUE(s.forward_backward(b.in.data(), b.tg.data(), kB, kT, kScale / 2, true).ok());
  std::vector<std::string> expected;
  for (int unit : {1, 0, 2}) {
    for (const Range& r : m.unit_pieces(unit)) {
      expected.push_back("allreduce grads " + std::string(unit == 2 ? "root" : "layer " + std::to_string(unit)) +
                         " " + std::to_string(r.size()));
    }
  }
  EXPECT_EQ(expected.size(), 4u);  // two layers, the root's embedding and its norm + output
  EXPECT_EQ(data.calls, expected);
  EXPECT_TRUE(overlap.started());
  ASSERT_TRUE(s.reduce_grads(1000).ok());
  EXPECT_FALSE(overlap.started());
  EXPECT_EQ(data.calls.size(), expected.size());  // no second reduction after backward
  for (size_t i = 0; i < m.grads().size(); ++i) ASSERT_EQ(m.grads()[i], plain.grads()[i] + 0.5f) << i;
}

TEST(ParallelStrategy, PlainStepIsAdamWOnTheWholeModel) {
  const Plain ref = plain_step(1.0f);
  ThreadPool pool(1);
  LlamaTrain m = model(&pool);
  RefusingCommunicator data(0, 1);  // one data-parallel rank: no collective at all
  DistributedAdamW opt(&data, AdamWConfig{}, m.trainable_layout(), 0);
  ParallelStrategy s{.model = &m, .data = &data, .opt = &opt};
  const Batch b = batch(m.config().n_vocab);
  ASSERT_TRUE(s.forward_backward(b.in.data(), b.tg.data(), kB, kT, kScale, true).ok());
  ASSERT_TRUE(s.reduce_grads(1000).ok());
  const Result<float> norm = s.clip_grad_norm(1.0f);
  ASSERT_TRUE(norm.ok());
  EXPECT_EQ(*norm, ref.norm);
  ASSERT_TRUE(s.step(1e-2f, nullptr).ok());
  EXPECT_EQ(m.params(), ref.params_after);
}

TEST(ParallelStrategy, ATensorParallelShardsNormIsSummedOverTheTpGroup) {
  ThreadPool pool(1);
  LlamaTrain m = model(&pool);
  std::fill(m.grads().begin(), m.grads().end(), 0.0f);
  PeerSum tp_group(2, 0.0f, 9.0);  // the peer shard's squares sum to 9
  const Result<TensorParallel> tp = TensorParallel::create(tiny_config(), &tp_group, false);
  ASSERT_TRUE(tp.ok()) << tp.status().message();
  RefusingCommunicator data(0, 2);  // the norm is not the data group's business
  DistributedAdamW opt(&data, AdamWConfig{}, m.trainable_layout(), 0);
  ParallelStrategy s{.model = &m, .data = &data, .opt = &opt, .tp = &*tp};
  const Result<float> norm = s.clip_grad_norm(1.0f);
  ASSERT_TRUE(norm.ok()) << norm.status().message();
  EXPECT_EQ(*norm, 3.0f);
  ASSERT_EQ(tp_group.calls.size(), 1u);
}

TEST(ParallelStrategy, ZeroTakesTheReductionClipAndStepAndLeavesTheDataGroupAlone) {
  const Plain ref = plain_step(1.0f);
  for (int stage : {2, 3}) {
    ThreadPool pool(1);
    LlamaTrain m = model(&pool);
    LocalCommunicator shards;  // ZeRO's own group (one rank: the plain step, bitwise)
    ShardedDataParallel zero(&shards, &m, AdamWConfig{}, stage, true);
    RefusingCommunicator data(0, 2);
    ParallelStrategy s{.model = &m, .data = &data, .zero = &zero};
    zero.zero_grad();
    const Batch b = batch(m.config().n_vocab);
    const Result<double> loss = s.forward_backward(b.in.data(), b.tg.data(), kB, kT, kScale, true);
    ASSERT_TRUE(loss.ok()) << loss.status().message();
    EXPECT_EQ(*loss, ref.loss_times_b);
    ASSERT_TRUE(s.reduce_grads(1000).ok());
    const Result<float> norm = s.clip_grad_norm(1.0f);
    ASSERT_TRUE(norm.ok()) << norm.status().message();
    EXPECT_EQ(*norm, ref.norm) << "stage " << stage;
    ASSERT_TRUE(s.step(1e-2f, nullptr).ok());
    std::vector<float> params;  // ZeRO-3 holds the whole weights only inside with_full_state
    ASSERT_TRUE(s.with_full_state([&](AdamW&) {
                   params = m.params();
                   return ok_status();
                 }).ok());
    EXPECT_EQ(params, ref.params_after) << "stage " << stage;
    EXPECT_EQ(m.params().empty(), stage == 3);
  }
}

TEST(ParallelStrategy, APipelineReducesOverItsDataGroupOnlyWhenThereIsOne) {
  const Plain ref = plain_step(1.0f);
  for (int data_ranks : {1, 2}) {
    ThreadPool pool(1);
    LlamaTrain m = model(&pool);
    PeerSum stages(1, 0.0f);  // one stage: its norm allreduce adds nothing
    Result<Pipeline> pipeline =
        Pipeline::create(&stages, &m, PipelineConfig{.stages = 1, .micro_batches = 2}, AdamWConfig{}, kB);
    ASSERT_TRUE(pipeline.ok()) << pipeline.status().message();
    PeerSum data(data_ranks, 0.0f);
    ParallelStrategy s{.model = &m, .data = &data, .pipeline = &*pipeline};
    const Batch b = batch(m.config().n_vocab);
    ASSERT_TRUE(s.forward_backward(b.in.data(), b.tg.data(), kB, kT, kScale, true).ok());
    ASSERT_TRUE(s.reduce_grads(1 << 20).ok());
    EXPECT_EQ(data.calls.size(), data_ranks == 1 ? 0u : 1u) << data_ranks << " data-parallel ranks";
    ASSERT_TRUE(s.clip_grad_norm(1.0f).ok());
    EXPECT_EQ(stages.calls, std::vector<std::string>{"allreduce gradient norm 1"});
    ASSERT_TRUE(s.step(1e-2f, nullptr).ok());
    // Two micro-batches of one sequence sum to the batch's gradient up to rounding.
    for (size_t i = 0; i < ref.params_after.size(); ++i) ASSERT_NEAR(m.params()[i], ref.params_after[i], 1e-6f) << i;
    const Result<std::vector<double>> bubble = s.bubble();
    ASSERT_TRUE(bubble.ok());
    EXPECT_EQ(bubble->size(), 1u);
  }
}

}  // namespace
}  // namespace koi::train
