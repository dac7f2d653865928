#include "train/trainer.h"

#include <gtest/gtest.h>

namespace koi::train {
namespace {

TEST(ParseTrainConfig, ReadsTheSectionsAndFillsDefaults) {
  auto c = parse_train_config(R"(
model: {dim: 32, layers: 2, heads: 4, kv_heads: 2, ffn_dim: 48, context: 16, tied_embeddings: true}
data: {text: corpus.txt, tokenizer: char}
train: {batch_size: 3, steps: 40, lr: 2.0e-3, warmup_steps: 4, out: run, seed: 5}
)",
                              "r.yaml");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->model.head_dim, 8);
  EXPECT_EQ(c->model.n_kv_heads, 2);
  EXPECT_EQ(c->model.max_seq_len, 16);
  EXPECT_EQ(c->seq_len, 16);
  EXPECT_EQ(c->schedule.decay_steps, 40);
  EXPECT_FLOAT_EQ(c->schedule.lr, 2e-3f);
  EXPECT_EQ(c->seed, 5u);
  EXPECT_TRUE(c->model.tied_embeddings);
}

TEST(ParseTrainConfig, ErrorsNameTheKey) {
  auto typo = parse_train_config("train: {stpes: 3}\n", "r.yaml");
  EXPECT_EQ(typo.status().message().substr(0, 40), "r.yaml: unknown key train.stpes (known: ");
  auto type = parse_train_config("model: {dim: wide}\n", "r.yaml");
  EXPECT_EQ(type.status().message(), "r.yaml: model.dim has a value of the wrong type");
  auto section = parse_train_config("optim: {lr: 1}\n", "r.yaml");
  EXPECT_EQ(section.status().message(), "r.yaml: unknown section 'optim' (known: model, data, train)");
  auto no_out = parse_train_config("model: {dim: 8, heads: 2}\ndata: {text: a.txt}\n", "r.yaml");
  EXPECT_EQ(no_out.status().message(), "r.yaml: train.out (the run directory) is required");
  auto bpe = parse_train_config("data: {text: a.txt, tokenizer: bpe}\n", "r.yaml");
  EXPECT_EQ(bpe.status().message(), "r.yaml: data.tokenizer 'bpe' is not supported yet; use char, or model with model.init_from");
}

}  // namespace
}  // namespace koi::train
