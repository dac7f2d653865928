#include "train/tensor_parallel.h"

#include <gtest/gtest.h>

#include <cmath>

#include "base/thread_pool.h"
#include "kernels/ops.h"
#include "base/file.h"
#include "train/checkpoint.h"
#include "train/llama_train.h"
#include "train/optimizer.h"
#include "train/testing_communicator.h"

namespace koi::train {
namespace {

// Rank `rank` of 2 whose peer's contribution is given up front: allgather fills the peer's
// part from `peer_part`, allreduce adds `peer_sum`. (The real ranks run in
// tests/train_mpi_tensor_parallel.sh; this checks the index arithmetic exactly.)
class PeerCommunicator final : public RefusingCommunicator {
 public:
  PeerCommunicator(int rank, std::vector<float> peer_part, double peer_sum = 0.0)
      : RefusingCommunicator(rank, 2), peer_part_(std::move(peer_part)), peer_sum_(peer_sum) {}
  Status allreduce_sum(double* data, int64_t n, std::string_view) override {
    EXPECT_EQ(n, 1);
    data[0] += peer_sum_;
    return ok_status();
  }
  Status allgather(float* data, const std::vector<int64_t>& counts, std::string_view) override {
    const int peer = 1 - rank();
    EXPECT_EQ(counts[static_cast<size_t>(peer)], static_cast<int64_t>(peer_part_.size()));
    std::copy(peer_part_.begin(), peer_part_.end(), data + peer * counts[0]);
    return ok_status();
  }

 private:
  std::vector<float> peer_part_;
  double peer_sum_;
};

model::ModelConfig tiny_config() {
  model::ModelConfig c;
  c.n_vocab = 11, c.dim = 8, c.n_layers = 2, c.n_heads = 4, c.n_kv_heads = 2, c.head_dim = 2, c.ffn_dim = 6;
  c.max_seq_len = 4, c.qkv_bias = true;
  return c;
}

std::vector<float> iota_params(int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<float>(i);
  return v;
}

const ParamTensor& find(const std::vector<ParamTensor>& layout, const std::string& name) {
  for (const ParamTensor& t : layout) {
    if (t.name == name) return t;
  }
  ADD_FAILURE() << name;
  return layout.front();
}

TEST(TensorParallel, ShardIsALlamaWithAPartOfTheHeadsAndFfn) {
  PeerCommunicator tp(0, {});
  Result<TensorParallel> t = TensorParallel::create(tiny_config(), &tp, /*lora=*/false);
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t->shard_config().n_heads, 2);
  EXPECT_EQ(t->shard_config().n_kv_heads, 1);
  EXPECT_EQ(t->shard_config().ffn_dim, 3);
  EXPECT_EQ(t->shard_config().dim, 8);
  EXPECT_EQ(t->shard_config().head_dim, 2);
  EXPECT_EQ(t->shard_config().n_vocab, 6);  // 11 ids: 6 per rank, the last padded by one row
  EXPECT_EQ(t->vocab_begin(), 0);
  EXPECT_EQ(t->vocab_full(), 11);
}

// Rank 1 holds query heads 2-3 (q rows 4-7), kv head 1 (k rows 2-3), ffn rows 3-5 of gate and
// columns 3-5 of down, columns 4-7 of o_proj, token ids 6-10 of the embedding and the head (and
// a zero padding row), and every norm whole.
TEST(TensorParallel, RankOneTakesTheSecondHalfOfEachSplitDimension) {
  const model::ModelConfig c = tiny_config();
  PeerCommunicator tp(1, {});
  Result<TensorParallel> t = TensorParallel::create(c, &tp, false);
  ASSERT_TRUE(t.ok());
  const std::vector<ParamTensor> whole = param_layout(c), part = param_layout(t->shard_config());
  const std::vector<float> full = iota_params(t->full_size());
  std::vector<float> shard(static_cast<size_t>(t->shard_size()));
  t->slice(full.data(), shard.data());
  auto at = [&](const std::vector<ParamTensor>& layout, const std::string& name, int64_t row, int64_t col) {
    const ParamTensor& p = find(layout, name);
    return p.offset + row * (p.shape.size() > 1 ? p.shape[1] : 1) + col;
  };
  auto expect = [&](const std::string& name, int64_t srow, int64_t scol, int64_t frow, int64_t fcol) {
    EXPECT_EQ(shard[static_cast<size_t>(at(part, name, srow, scol))], full[static_cast<size_t>(at(whole, name, frow, fcol))])
        << name << " [" << srow << ", " << scol << "]";
  };
  const std::string l1 = "model.layers.1.";
  expect(l1 + "self_attn.q_proj.weight", 0, 0, 4, 0);
  expect(l1 + "self_attn.q_proj.weight", 3, 7, 7, 7);
  expect(l1 + "self_attn.q_proj.bias", 1, 0, 5, 0);
  expect(l1 + "self_attn.k_proj.weight", 0, 3, 2, 3);
  expect(l1 + "self_attn.v_proj.bias", 1, 0, 3, 0);
  expect(l1 + "self_attn.o_proj.weight", 0, 0, 0, 4);
  expect(l1 + "self_attn.o_proj.weight", 7, 3, 7, 7);
  expect(l1 + "mlp.gate_proj.weight", 0, 5, 3, 5);
  expect(l1 + "mlp.up_proj.weight", 2, 0, 5, 0);
  expect(l1 + "mlp.down_proj.weight", 6, 2, 6, 5);
  expect(l1 + "input_layernorm.weight", 7, 0, 7, 0);
  expect("model.embed_tokens.weight", 0, 0, 6, 0);
  expect("model.embed_tokens.weight", 4, 7, 10, 7);
  expect("lm_head.weight", 3, 1, 9, 1);
  EXPECT_EQ(t->vocab_begin(), 6);
  for (int64_t col = 0; col < 8; ++col) {
    EXPECT_EQ(shard[static_cast<size_t>(at(part, "lm_head.weight", 5, col))], 0.0f);
    EXPECT_EQ(shard[static_cast<size_t>(at(part, "model.embed_tokens.weight", 5, col))], 0.0f);
  }
}

// A new model's shard is made alone, tensor by tensor, and is bitwise the slice of the whole
// model's initialisation on each rank (with q/k/v biases, tied and untied embeddings).
TEST(TensorParallel, ShardInitialisedAloneIsTheSliceOfTheWholeModel) {
  for (bool tied : {false, true}) {
    model::ModelConfig c = tiny_config();
    c.tied_embeddings = tied;
    ThreadPool pool(1);
    LlamaTrain whole = *LlamaTrain::create(c, &pool);
    whole.init_random(42);
    for (int rank : {0, 1}) {
      PeerCommunicator tp(rank, {});
      Result<TensorParallel> t = TensorParallel::create(c, &tp, false);
      ASSERT_TRUE(t.ok());
      std::vector<float> sliced(static_cast<size_t>(t->shard_size()), -1.0f), alone(sliced.size(), -2.0f);
      t->slice(whole.params().data(), sliced.data());
      t->init_random(42, alone.data());
      EXPECT_EQ(alone, sliced) << "rank " << rank << (tied ? ", tied" : ", untied");
    }
  }
}

// A checkpoint (whole tensors, as any mesh writes them) read tensor by tensor gives each rank
// exactly slice() of the whole weights and of AdamW's m and v, and the step count.
TEST(TensorParallel, CheckpointReadTensorByTensorIsTheSliceOfTheWholeOne) {
  const model::ModelConfig c = tiny_config();
  ThreadPool pool(1);
  LlamaTrain whole = *LlamaTrain::create(c, &pool);
  whole.init_random(3);
  AdamW opt(AdamWConfig{}, static_cast<int64_t>(whole.params().size()));
  for (size_t i = 0; i < whole.params().size(); ++i) {
    opt.m()[i] = 0.5f * static_cast<float>(i), opt.v()[i] = 2.0f + static_cast<float>(i);
  }
  opt.set_steps(9);
  const std::string dir = *make_temp_dir("koi-tp-ckpt");
  const Result<std::string> ckpt = save_checkpoint(dir, {.step = 9}, whole, opt);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
  for (int rank : {0, 1}) {
    PeerCommunicator tp(rank, {});
    const TensorParallel t = *TensorParallel::create(c, &tp, false);
    const size_t n = static_cast<size_t>(t.shard_size());
    std::vector<float> params(n), want(n), want_m(n), want_v(n);
    AdamW shard_opt(AdamWConfig{}, t.shard_size());
    ASSERT_TRUE(load_checkpoint_sliced(
                    *ckpt, t.full_layout(), [&](size_t i, const float* w, float* s) { t.slice_tensor(i, w, s); },
                    &params, &shard_opt)
                    .ok());
    t.slice(whole.params().data(), want.data());
    t.slice(opt.m().data(), want_m.data());
    t.slice(opt.v().data(), want_v.data());
    EXPECT_EQ(params, want) << "rank " << rank;
    EXPECT_EQ(shard_opt.m(), want_m) << "rank " << rank;
    EXPECT_EQ(shard_opt.v(), want_v) << "rank " << rank;
    EXPECT_EQ(shard_opt.steps(), 9);
  }
  remove_all(dir);
}

TEST(TensorParallel, GatherOfBothShardsIsTheFullVector) {
  const model::ModelConfig c = tiny_config();
  PeerCommunicator r0(0, {}), r1(1, {});
  Result<TensorParallel> t0 = TensorParallel::create(c, &r0, false), t1 = TensorParallel::create(c, &r1, false);
  ASSERT_TRUE(t0.ok() && t1.ok());
  const std::vector<float> full = iota_params(t0->full_size());
  std::vector<float> s0(static_cast<size_t>(t0->shard_size())), s1(s0.size());
  t0->slice(full.data(), s0.data());
  t1->slice(full.data(), s1.data());
  PeerCommunicator with_peer(0, s1);
  Result<TensorParallel> g = TensorParallel::create(c, &with_peer, false);
  std::vector<float> gathered;
  ASSERT_TRUE(g->gather(s0, &gathered, "test").ok());
  EXPECT_EQ(gathered, full);
}

// The norm of the two shards' gradients is the full vector's: split tensors summed over the
// ranks, replicated ones (the same on both) counted once.
TEST(TensorParallel, GradNormCountsReplicatedTensorsOnce) {
  const model::ModelConfig c = tiny_config();
  PeerCommunicator r0(0, {}), r1(1, {});
  Result<TensorParallel> t0 = TensorParallel::create(c, &r0, false), t1 = TensorParallel::create(c, &r1, false);
  ASSERT_TRUE(t0.ok() && t1.ok());
  std::vector<float> full = iota_params(t0->full_size());
  for (float& x : full) x = std::sin(x);
  std::vector<float> s0(static_cast<size_t>(t0->shard_size())), s1(s0.size());
  t0->slice(full.data(), s0.data());
  t1->slice(full.data(), s1.data());
  // What rank 1 adds in the allreduce: the squares of its split tensors.
  const std::vector<ParamTensor> whole = param_layout(c), part = param_layout(t1->shard_config());
  double split1 = 0.0;
  for (size_t i = 0; i < whole.size(); ++i) {
    if (whole[i].shape != part[i].shape) split1 += sum_of_squares(s1.data() + part[i].offset, part[i].size);
  }
  PeerCommunicator with_peer(0, {}, split1);
  Result<TensorParallel> t = TensorParallel::create(c, &with_peer, false);
  const double expected = std::sqrt(sum_of_squares(full.data(), static_cast<int64_t>(full.size())));
  std::vector<float> grads = s0;
  const float norm = *t->clip_grad_norm(grads, static_cast<float>(expected / 2));
  EXPECT_NEAR(norm, expected, 1e-6 * expected);
  // Clipped to half: every element scaled by (expected / 2) / (norm + 1e-6), as clip_grad_norm.
  const float coef = static_cast<float>(expected / 2) / (norm + 1e-6f);
  for (size_t i = 0; i < grads.size(); ++i) ASSERT_EQ(grads[i], s0[i] * coef) << i;
}

// On one rank the vocabulary-parallel cross-entropy is the plain softmax and -log p[target]
// over the valid columns; the padding columns come out 0 and change nothing. (Two and four
// ranks: tests/train_mpi_tensor_parallel.sh, loss and every gradient against one process.)
TEST(TensorParallel, VocabParallelCrossEntropyOnOneRankIsTheSoftmax) {
  LocalCommunicator one;
  ThreadPool pool(1);
  const int64_t N = 3, valid = 5, V_local = 7;  // 2 padding columns
  std::vector<float> logits(static_cast<size_t>(N * V_local)), expected(static_cast<size_t>(N * valid));
  for (int64_t i = 0; i < N * V_local; ++i) logits[static_cast<size_t>(i)] = std::sin(1.7f * static_cast<float>(i)) * 4;
  const std::vector<int32_t> targets{0, 4, 2};
  double expected_loss = 0.0;
  for (int64_t row = 0; row < N; ++row) {
    std::copy_n(logits.begin() + row * V_local, valid, expected.begin() + row * valid);
    kernels::softmax(expected.data() + row * valid, valid);
    expected_loss -= std::log(static_cast<double>(expected[static_cast<size_t>(row * valid + targets[row])]));
  }
  Result<double> loss = vocab_parallel_cross_entropy(one, &pool, logits.data(), targets.data(), N, V_local, 0, valid);
  ASSERT_TRUE(loss.ok());
  EXPECT_NEAR(*loss, expected_loss, 1e-6 * expected_loss);
  for (int64_t row = 0; row < N; ++row) {
    for (int64_t v = 0; v < V_local; ++v) {
      const float want = v < valid ? expected[static_cast<size_t>(row * valid + v)] : 0.0f;
      EXPECT_NEAR(logits[static_cast<size_t>(row * V_local + v)], want, 1e-6f) << row << ", " << v;
    }
  }
}

TEST(TensorParallel, RefusesHeadsThatDoNotDivide) {
  PeerCommunicator tp(0, {});
  model::ModelConfig c = tiny_config();
  c.n_kv_heads = 1;
  Result<TensorParallel> t = TensorParallel::create(c, &tp, false);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().message(),
            "tensor parallel: the number of key/value heads (1) does not divide by --tp 2; choose a --tp that divides "
            "the query heads, the key/value heads and ffn_dim");
  EXPECT_EQ(TensorParallel::create(tiny_config(), &tp, /*lora=*/true).status().code(), StatusCode::kUnsupported);
}

}  // namespace
}  // namespace koi::train
