// Expert parallelism's dispatch and combine (moe_train.h) on one rank: the all-to-all path
// with a LocalCommunicator (the experts all on rank 0, the exchange a copy) computes bitwise
// the loss, the router's load-balancing term and every gradient of the plain path. The
// 2-rank runs are tests/train_mpi_expert_parallel.sh.
#include <gtest/gtest.h>

#include <vector>

#include "model/random_model.h"
#include "train/collectives.h"
#include "train/llama_train.h"

namespace koi::train {
namespace {

TEST(ExpertParallel, OneRankAllToAllEqualsThePlainPath) {
  model::ModelConfig c = *model::named_shape("tiny-moe");
  c.max_seq_len = 16, c.n_vocab = 64;
  ThreadPool pool(2);
  auto plain = LlamaTrain::create(c, &pool);
  auto ep = LlamaTrain::create(c, &pool);
  ASSERT_TRUE(plain.ok() && ep.ok());
  LocalCommunicator comm;
  ep->set_expert_parallel(&comm);
  std::vector<int32_t> in, tg;
  for (int i = 0; i < 2 * 16; ++i) in.push_back((i * 7 + 3) % c.n_vocab), tg.push_back((i * 11 + 5) % c.n_vocab);
  for (LlamaTrain* m : {&*plain, &*ep}) {
    ASSERT_TRUE(m->load(model::random_weights(c, 9)).ok());
    m->set_moe_aux_loss_coef(0.01f);
    m->zero_grad();
  }
  const float loss_plain = plain->forward(in.data(), tg.data(), 2, 16);
  const float loss_ep = ep->forward(in.data(), tg.data(), 2, 16);
  EXPECT_EQ(loss_ep, loss_plain);
  EXPECT_EQ(ep->aux_loss(), plain->aux_loss());
  EXPECT_GT(plain->aux_loss(), 0.0f);
  plain->backward(1.0f / 32), ep->backward(1.0f / 32);
  ASSERT_EQ(ep->grads().size(), plain->grads().size());
  int64_t nonzero = 0;
  for (size_t i = 0; i < plain->grads().size(); ++i) {
    ASSERT_EQ(ep->grads()[i], plain->grads()[i]) << i;
    nonzero += plain->grads()[i] != 0.0f;
  }
  EXPECT_GT(nonzero, static_cast<int64_t>(plain->grads().size() / 2));
}

}  // namespace
}  // namespace koi::train
