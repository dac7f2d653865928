#include "train/trainer.h"

#include <gtest/gtest.h>

#include <filesystem>

#include <chrono>
#include <thread>

#include "base/file.h"
#include "model/gguf.h"
#include "model/llama.h"
#include "model/loader.h"
#include "tokenizer/load.h"
#include "train/checkpoint.h"
#include "train/data.h"

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
  EXPECT_EQ(c->text_paths, std::vector<std::string>{"corpus.txt"});
  EXPECT_EQ(c->tokenizer_path, "");
  EXPECT_EQ(c->shards_dir, "");
  EXPECT_EQ(c->shard_tokens, 100'000'000);
}

TEST(ParseTrainConfig, ReadsTextListsTokenizerPathsAndShards) {
  auto c = parse_train_config(R"(
model: {dim: 32, layers: 2, heads: 4, context: 16}
data: {text: [a.txt, b.txt], tokenizer: tok/dir, shards: cache, shard_tokens: 1000}
train: {out: run}
)",
                              "r.yaml");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->text_paths, (std::vector<std::string>{"a.txt", "b.txt"}));
  EXPECT_EQ(c->tokenizer_path, "tok/dir");
  EXPECT_EQ(c->shards_dir, "cache");
  EXPECT_EQ(c->shard_tokens, 1000);
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
  auto model = parse_train_config("data: {text: a.txt, tokenizer: model}\n", "r.yaml");
  EXPECT_EQ(model.status().message(),
            "r.yaml: data.tokenizer 'model' needs model.init_from; use char or the path of a tokenizer (a directory "
            "with tokenizer.json, a .gguf, a tokenizer.bin)");
  auto shard = parse_train_config("model: {dim: 8, heads: 2, context: 4}\ndata: {text: a.txt, shard_tokens: 0}\n"
                                  "train: {out: r}\n",
                                  "r.yaml");
  EXPECT_EQ(shard.status().message(), "r.yaml: data.shard_tokens must be at least 1");
}

// The mesh and pipeline keys (train.dp, tp, pp, ep, pp_microbatches, pp_schedule).
TEST(ParseTrainConfig, ReadsAndChecksTheParallelKeys) {
  const std::string base = "model: {dim: 8, heads: 2, context: 4}\ndata: {text: a.txt}\ntrain: {out: r, ";
  auto ok = parse_train_config(base + "pp: 2, pp_microbatches: 4, pp_schedule: gpipe, ep: 2, tp: 3, dp: 5}\n",
                               "r.yaml");
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ(ok->mesh.pp, 2);
  EXPECT_EQ(ok->pipeline.stages, 2);
  EXPECT_EQ(ok->pipeline.micro_batches, 4);
  EXPECT_EQ(ok->pipeline.schedule, PipelineSchedule::kGPipe);
  EXPECT_EQ(ok->mesh.ep, 2);
  EXPECT_EQ(ok->mesh.tp, 3);
  EXPECT_EQ(ok->mesh.dp, 5);
  auto defaults = parse_train_config(base + "steps: 3}\n", "r.yaml");
  ASSERT_TRUE(defaults.ok());
  EXPECT_EQ(defaults->pipeline.stages, 1);
  EXPECT_EQ(defaults->pipeline.schedule, PipelineSchedule::k1F1B);
  auto schedule = parse_train_config(base + "pp: 2, pp_schedule: zigzag}\n", "r.yaml");
  EXPECT_EQ(schedule.status().message(), "r.yaml: train: unknown pipeline schedule 'zigzag' (known: 1f1b, gpipe)");
  auto micro = parse_train_config(base + "pp_microbatches: 4}\n", "r.yaml");
  EXPECT_EQ(micro.status().message(),
            "r.yaml: train: pp_microbatches needs pp > 1 (without a pipeline, use grad_accum)");
}

class RunTrainingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = *make_temp_dir("koi-trainer");
    std::string text;
    for (int i = 0; i < 60; ++i) text += "the cat sat on the mat, line " + std::to_string(i) + ".\n";
    corpus_ = path_join(dir_, "corpus.txt");
    ASSERT_TRUE(write_file_atomic(corpus_, text).ok());
  }
  void TearDown() override { remove_all(dir_); }

  TrainConfig tiny(const std::string& out) const {
    TrainConfig c;
    model::ModelConfig& m = c.model;
    m.arch = "llama";
    m.rope_style = kernels::RopeStyle::kNeox;
    m.dim = 16, m.n_layers = 1, m.n_heads = 2, m.n_kv_heads = 2, m.head_dim = 8, m.ffn_dim = 32, m.max_seq_len = 8;
    c.text_paths = {corpus_};
    c.batch_size = 2, c.seq_len = 8, c.steps = 12, c.eval_iters = 1, c.log_interval = 0, c.threads = 1;
    c.schedule.decay_steps = c.steps;
    c.out_dir = path_join(dir_, out);
    return c;
  }
  std::string dir_, corpus_;
};

// A tokenizer file for a new model: its vocabulary sizes the model, it encodes the corpus
// into OUT/data, and every checkpoint carries it.
TEST_F(RunTrainingTest, MissingRelativeDataFileSaysItIsResolvedFromTheCurrentDirectory) {
  TrainConfig c = tiny("out");
  c.text_paths = {"no-such-corpus.txt"};
  auto r = run_training(c, false, nullptr, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(r.status().message(), "data.text: no-such-corpus.txt: cannot open: No such file or directory; a relative path in a "
                                  "recipe is resolved from the current directory (" + std::filesystem::current_path().string() +
                                  "), not from the recipe's; run koi from the directory the recipe expects or give an absolute path");
}

TEST_F(RunTrainingTest, PretrainsWithATokenizerFromAPath) {
  tokenizer::TokenizerSpec spec = CharVocab::from_text(*read_file(corpus_)).to_spec();
  for (const char* piece : {"th", "he", "the", "at"}) {  // merges: fewer tokens than characters
    spec.tokens.push_back(piece);
    spec.types.push_back(tokenizer::TokenType::kNormal);
    spec.scores.push_back(1.0f);
  }
  model::GgufWriter writer;
  tokenizer::spec_to_gguf(spec, writer);
  const std::string tok_path = path_join(dir_, "tok.gguf");
  ASSERT_TRUE(writer.write(tok_path).ok());
  TrainConfig c = tiny("run");
  c.tokenizer_path = tok_path;
  auto result = run_training(c, /*resume=*/false, nullptr);
  ASSERT_TRUE(result.ok()) << result.status().message();
  auto config = read_checkpoint_config(result->checkpoint);
  ASSERT_TRUE(config.ok());
  EXPECT_EQ(config->n_vocab, static_cast<int>(spec.tokens.size()));
  auto state = read_checkpoint_state(result->checkpoint);
  ASSERT_TRUE(state.ok() && state->tokenizer);
  EXPECT_EQ(state->tokenizer->tokens, spec.tokens);
  EXPECT_TRUE(state->chars.empty());

  // The shards hold the tokenizer's encoding of the corpus.
  const std::vector<int32_t> ids = tokenizer::Tokenizer::create(spec)->encode(*read_file(corpus_), false, false);
  const std::string text = *read_file(corpus_);
  auto shards = TokenShards::open(path_join(c.out_dir, "data"), shard_key({text}, tokenizer_identity(spec)));
  ASSERT_TRUE(shards.ok()) << shards.status().message();
  std::vector<int32_t> stored(shards->size());
  shards->read(0, static_cast<int64_t>(stored.size()), stored.data());
  EXPECT_EQ(stored, ids);
  EXPECT_LT(ids.size(), read_file(corpus_)->size());

  c.tokenizer_path = path_join(dir_, "missing");
  EXPECT_EQ(run_training(c, false, nullptr).status().message(),
            "data.tokenizer: " + c.tokenizer_path + ": cannot open: No such file or directory");
}

// A Mixtral-style recipe (model.experts, experts_per_token; train.moe_aux_loss_coef) trains:
// the loss falls from the uniform guess, and the checkpoint is a Mixtral HF directory that the
// inference loader reads back with its experts and runs.
TEST_F(RunTrainingTest, MixtureOfExpertsRecipeTrainsAndItsCheckpointLoads) {
  auto parsed = parse_train_config(
      "model: {dim: 16, layers: 1, heads: 2, ffn_dim: 24, context: 8, experts: 4, experts_per_token: 2}\n"
      "data: {text: " + corpus_ + "}\ntrain: {out: " + path_join(dir_, "moe") + ", moe_aux_loss_coef: 0.05}\n",
      "r.yaml");
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  EXPECT_EQ(parsed->model.moe.n_experts, 4);
  EXPECT_EQ(parsed->model.moe.n_experts_used, 2);
  EXPECT_EQ(parsed->model.moe.expert_ffn_dim, 24);
  EXPECT_FLOAT_EQ(parsed->moe_aux_loss_coef, 0.05f);
  TrainConfig c = tiny("moe");
  c.model.moe = parsed->model.moe;
  c.moe_aux_loss_coef = parsed->moe_aux_loss_coef;
  c.steps = 40, c.schedule.decay_steps = 40, c.schedule.lr = 1e-2f;
  auto result = run_training(c, false, nullptr);
  ASSERT_TRUE(result.ok()) << result.status().message();
  auto config = read_checkpoint_config(result->checkpoint);
  ASSERT_TRUE(config.ok()) << config.status().message();
  EXPECT_EQ(config->moe.n_experts, 4);
  EXPECT_EQ(config->moe.n_experts_used, 2);
  EXPECT_LT(result->train_loss, std::log(static_cast<float>(config->n_vocab)) - 0.5f);
  auto loaded = model::load_hf_weights(result->checkpoint);
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  EXPECT_EQ(loaded->weights.layers[0].moe.down.size(), 4u);

  auto bad = parse_train_config("data: {text: a.txt}\ntrain: {out: o, moe_aux_loss_coef: -1}\n", "r.yaml");
  EXPECT_EQ(bad.status().message(), "r.yaml: train.moe_aux_loss_coef must be a finite number >= 0");
}

// Shards are made once: a second run reuses them; a changed corpus is tokenized again.
TEST_F(RunTrainingTest, ShardsAreReusedUntilTheCorpusChanges) {
  TrainConfig c = tiny("run");
  c.shards_dir = path_join(dir_, "shards");
  c.steps = 2;
  auto tokenized = [&] {
    testing::internal::CaptureStderr();
    EXPECT_TRUE(run_training(c, false, nullptr).ok());
    return testing::internal::GetCapturedStderr().find("tokenized ") != std::string::npos;
  };
  EXPECT_TRUE(tokenized());
  EXPECT_TRUE(file_exists(path_join(dir_, "shards/tokens-00000.bin")));
  EXPECT_FALSE(tokenized());
  ASSERT_TRUE(write_file_atomic(corpus_, *read_file(corpus_) + "one more line.\n").ok());
  EXPECT_TRUE(tokenized());
}

// OUT/metrics.prom: the step metrics in the Prometheus text format, rewritten at every
// logged step and evaluation, so after the run it holds the last step's values.
TEST_F(RunTrainingTest, StepMetricsAreRenderedToMetricsProm) {
  TrainConfig c = tiny("run");
  c.steps = 4, c.log_interval = 2;
  testing::internal::CaptureStderr();
  ASSERT_TRUE(run_training(c, false, nullptr).ok());
  testing::internal::GetCapturedStderr();
  auto prom = read_file(path_join(c.out_dir, "metrics.prom"));
  ASSERT_TRUE(prom.ok()) << prom.status().message();
  EXPECT_NE(prom->find("# TYPE koi_train_step gauge\nkoi_train_step 4\n"), std::string::npos) << *prom;
  for (const char* name : {"\nkoi_train_loss ", "\nkoi_train_learning_rate ", "\nkoi_train_grad_norm ",
                           "\nkoi_train_tokens_per_second ", "\nkoi_train_step_seconds ", "\nkoi_train_val_loss "}) {
    EXPECT_NE(prom->find(name), std::string::npos) << name;
  }
}

// data.text as a list: the files' tokens in order, one character vocabulary over all.
TEST_F(RunTrainingTest, SeveralTextFilesAreTokenizedInOrder) {
  const std::string second = path_join(dir_, "second.txt"), more = "Zebras are quick! " + *read_file(corpus_);
  ASSERT_TRUE(write_file_atomic(second, more).ok());
  TrainConfig c = tiny("run");
  c.text_paths = {corpus_, second};
  c.steps = 2;
  auto result = run_training(c, false, nullptr);
  ASSERT_TRUE(result.ok()) << result.status().message();
  auto state = read_checkpoint_state(result->checkpoint);
  ASSERT_TRUE(state.ok());
  const std::string first = *read_file(corpus_);
  const CharVocab vocab = CharVocab::from_text(first + more);
  EXPECT_EQ(state->chars, vocab.chars());
  auto shards = TokenShards::open(path_join(c.out_dir, "data"), shard_key({first, more}, tokenizer_identity(vocab)));
  ASSERT_TRUE(shards.ok()) << shards.status().message();
  std::vector<int32_t> stored(shards->size());
  shards->read(0, static_cast<int64_t>(stored.size()), stored.data());
  EXPECT_EQ(stored, *vocab.encode(first + more));
}

// The step loop hands a checkpoint to the writer thread and goes on: while the write of
// step 4 is held (a slow disk), the loop logs steps 5, 6 and 7.
TEST_F(RunTrainingTest, StepLoopContinuesWhileACheckpointIsWritten) {
  TrainConfig c = tiny("run");
  c.checkpoint_interval = 4;
  bool saw_later_steps = false;
  c.before_checkpoint_commit = [&](int64_t step) {
    if (step != 4) return;
    EXPECT_EQ(latest_checkpoint(c.out_dir).status().code(), StatusCode::kNotFound);  // not committed yet
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!saw_later_steps && std::chrono::steady_clock::now() < deadline) {
      saw_later_steps = read_file(path_join(c.out_dir, "metrics.jsonl"))->find("{\"step\":7,") != std::string::npos;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  };
  auto result = run_training(c, false, nullptr);
  ASSERT_TRUE(result.ok()) << result.status().message();
  EXPECT_TRUE(saw_later_steps);
  EXPECT_EQ(result->checkpoint, path_join(c.out_dir, "ckpt-00000012"));
  EXPECT_TRUE(file_exists(path_join(c.out_dir, "ckpt-00000008/COMPLETE")));
  EXPECT_TRUE(file_exists(path_join(c.out_dir, "ckpt-00000012/COMPLETE")));
  EXPECT_FALSE(file_exists(path_join(c.out_dir, "ckpt-00000004")));  // pruned: keep 2
}

// A write that fails in the background fails the run.
TEST_F(RunTrainingTest, FailedCheckpointWriteFailsTheRun) {
  TrainConfig c = tiny("run");
  c.checkpoint_interval = 4;
  c.before_checkpoint_commit = [&](int64_t step) {
    if (step == 8) remove_all(path_join(c.out_dir, ".ckpt-00000008.tmp"));
  };
  auto result = run_training(c, false, nullptr);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().message().substr(0, path_join(c.out_dir, ".ckpt-00000008.tmp/COMPLETE").size()),
            path_join(c.out_dir, ".ckpt-00000008.tmp/COMPLETE"));
}

}  // namespace
}  // namespace koi::train
