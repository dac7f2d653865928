#include "train/checkpoint.h"

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <thread>

#include "base/file.h"
#include "model/loader.h"

namespace koi::train {
namespace {

model::ModelConfig small_config() {
  model::ModelConfig c;
  c.dim = 16, c.n_layers = 1, c.n_heads = 2, c.n_kv_heads = 1, c.head_dim = 8, c.ffn_dim = 24, c.n_vocab = 20;
  c.max_seq_len = 8, c.qkv_bias = true, c.rope_style = kernels::RopeStyle::kNeox;
  return c;
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = *make_temp_dir("koi-ckpt"); }
  void TearDown() override { remove_all(dir_); }
  std::string dir_;
};

TEST_F(CheckpointTest, SaveLoadRoundTripsWeightsOptimizerAndState) {
  ThreadPool pool(1);
  auto m = LlamaTrain::create(small_config(), &pool);
  ASSERT_TRUE(m.ok());
  m->init_random(3);
  AdamW opt({}, static_cast<int64_t>(m->params().size()));
  for (size_t i = 0; i < m->grads().size(); ++i) m->grads()[i] = 0.001f * static_cast<float>(i % 7);
  opt.step(m->params(), m->grads(), m->layout(), 1e-3f);
  TrainState state{.step = 7, .loader_position = 21, .chars = {"\n", " ", "a"}};
  auto path = save_checkpoint(dir_, state, *m, opt);
  ASSERT_TRUE(path.ok()) << path.status().message();
  EXPECT_EQ(*path, path_join(dir_, "ckpt-00000007"));
  EXPECT_TRUE(file_exists(path_join(*path, "COMPLETE")));

  auto latest = latest_checkpoint(dir_);
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(*latest, *path);
  auto config = read_checkpoint_config(*path);
  ASSERT_TRUE(config.ok()) << config.status().message();
  EXPECT_EQ(config->ffn_dim, 24);
  EXPECT_TRUE(config->qkv_bias);
  auto read_state = read_checkpoint_state(*path);
  ASSERT_TRUE(read_state.ok());
  EXPECT_EQ(read_state->step, 7);
  EXPECT_EQ(read_state->loader_position, 21u);
  EXPECT_EQ(read_state->chars, state.chars);

  auto m2 = LlamaTrain::create(*config, &pool);
  ASSERT_TRUE(m2.ok());
  AdamW opt2({}, static_cast<int64_t>(m2->params().size()));
  ASSERT_TRUE(load_checkpoint(*path, &*m2, &opt2).ok());
  EXPECT_EQ(m2->params(), m->params());
  EXPECT_EQ(opt2.m(), opt.m());
  EXPECT_EQ(opt2.v(), opt.v());
  EXPECT_EQ(opt2.steps(), 1);

  // The directory is also a Hugging Face model directory.
  auto hf = model::load_hf_weights(*path);
  ASSERT_TRUE(hf.ok()) << hf.status().message();
  EXPECT_EQ(hf->weights.layers[0].bk.f32()[0], m->params()[m->layout()[6].offset]);
}

TEST_F(CheckpointTest, OnlyCompleteCheckpointsCountAndPruneKeepsTheNewest) {
  ThreadPool pool(1);
  auto m = LlamaTrain::create(small_config(), &pool);
  ASSERT_TRUE(m.ok());
  AdamW opt({}, static_cast<int64_t>(m->params().size()));
  EXPECT_EQ(latest_checkpoint(dir_).status().message(),
            dir_ + ": no complete checkpoint (ckpt-*/COMPLETE) to resume from");
  for (int64_t step : {10, 20, 30}) ASSERT_TRUE(save_checkpoint(dir_, {.step = step}, *m, opt).ok());
  // A crash before the marker: the newest directory does not count.
  std::filesystem::create_directories(path_join(dir_, "ckpt-00000040"));
  EXPECT_EQ(*latest_checkpoint(dir_), path_join(dir_, "ckpt-00000030"));
  // A prune killed half way: ckpt-00000005 lost its marker before its other files.
  std::filesystem::create_directories(path_join(dir_, "ckpt-00000005"));
  prune_checkpoints(dir_, 2);
  EXPECT_FALSE(file_exists(path_join(dir_, "ckpt-00000005")));
  EXPECT_TRUE(file_exists(path_join(dir_, "ckpt-00000040")));  // newer: not a pruned one
  EXPECT_FALSE(file_exists(path_join(dir_, "ckpt-00000010")));
  EXPECT_TRUE(file_exists(path_join(dir_, "ckpt-00000020/COMPLETE")));
  EXPECT_TRUE(file_exists(path_join(dir_, "ckpt-00000030/COMPLETE")));
}

TEST_F(CheckpointTest, MismatchedConfigNamesTheTensor) {
  ThreadPool pool(1);
  auto m = LlamaTrain::create(small_config(), &pool);
  ASSERT_TRUE(m.ok());
  AdamW opt({}, static_cast<int64_t>(m->params().size()));
  auto path = save_checkpoint(dir_, {.step = 1}, *m, opt);
  ASSERT_TRUE(path.ok());
  model::ModelConfig other = small_config();
  other.ffn_dim = 32;
  auto m2 = LlamaTrain::create(other, &pool);
  AdamW opt2({}, static_cast<int64_t>(m2->params().size()));
  Status s = load_checkpoint(*path, &*m2, &opt2);
  EXPECT_EQ(s.message(), path_join(*path, "model.safetensors") +
                             ": tensor model.layers.0.mlp.gate_proj.weight is not f32 of 512 values; the checkpoint "
                             "does not match the model config");
}

// The writer thread writes what save_checkpoint writes; submit() returns while a write is
// held, a second submit() waits for it, and a failed write is reported by finish().
TEST_F(CheckpointTest, WriterWritesSnapshotsInTheBackground) {
  ThreadPool pool(1);
  auto m = LlamaTrain::create(small_config(), &pool);
  ASSERT_TRUE(m.ok());
  m->init_random(5);
  AdamW opt({}, static_cast<int64_t>(m->params().size()));
  for (size_t i = 0; i < m->grads().size(); ++i) m->grads()[i] = 0.002f * static_cast<float>(i % 5);
  opt.step(m->params(), m->grads(), m->layout(), 1e-3f);
  const TrainState state{.step = 3, .loader_position = 9, .chars = {"a", "b"}};
  ASSERT_TRUE(save_checkpoint(path_join(dir_, "sync"), state, *m, opt).ok());

  std::atomic<bool> release{false}, held{false};
  CheckpointWriter writer(path_join(dir_, "async"), 1, [&](int64_t step) {
    held = true;
    while (step == 3 && !release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  ASSERT_TRUE(writer.submit(snapshot_checkpoint(state, *m, opt), 0.0).ok());
  m->params()[0] += 1.0f;  // training goes on; the snapshot is a copy
  while (!held) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(latest_checkpoint(path_join(dir_, "async")).status().code(), StatusCode::kNotFound);
  std::thread release_later([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    release = true;
  });
  ASSERT_TRUE(writer.submit(snapshot_checkpoint({.step = 4}, *m, opt), 0.0).ok());  // waits for step 3
  EXPECT_TRUE(file_exists(path_join(dir_, "async/ckpt-00000003/COMPLETE")));
  EXPECT_EQ(*read_file(path_join(dir_, "async/ckpt-00000003/model.safetensors")),
            *read_file(path_join(dir_, "sync/ckpt-00000003/model.safetensors")));  // the weights at submit()
  release_later.join();
  auto last = writer.finish();
  ASSERT_TRUE(last.ok());
  EXPECT_EQ(*last, path_join(dir_, "async/ckpt-00000004"));
  EXPECT_FALSE(file_exists(path_join(dir_, "async/ckpt-00000003")));  // pruned after the write: keep 1
  ASSERT_TRUE(save_checkpoint(path_join(dir_, "sync"), {.step = 4}, *m, opt).ok());
  for (const char* file : {"model.safetensors", "optimizer.safetensors", "state.json", "config.json"}) {
    EXPECT_EQ(*read_file(path_join(dir_, "sync/ckpt-00000004/" + std::string(file))),
              *read_file(path_join(dir_, "async/ckpt-00000004/" + std::string(file))))
        << file;
  }

  ASSERT_TRUE(write_file_atomic(path_join(dir_, "file"), "not a directory").ok());
  CheckpointWriter failing(path_join(dir_, "file"), 1);
  ASSERT_TRUE(failing.submit(snapshot_checkpoint(state, *m, opt), 0.0).ok());
  auto failed = failing.finish();
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().message(),
            path_join(dir_, "file/.ckpt-00000003.tmp") + ": cannot create the checkpoint directory: Not a directory");
  EXPECT_FALSE(failing.submit(snapshot_checkpoint(state, *m, opt), 0.0).ok());  // the error stays
}

}  // namespace
}  // namespace koi::train
