#include "train/parallel_layout.h"

#include <gtest/gtest.h>

#include <string>

namespace koi::train {
namespace {

// A recipe of 4 sequences per batch, as the MPI tests use.
TrainConfig recipe(int zero = 0) {
  TrainConfig c;
  c.batch_size = 4;
  c.zero_stage = zero;
  return c;
}

std::string refusal(const TrainConfig& c, MeshShape mesh) {
  const Status s = check_parallel_layout(c, mesh);
  return s.ok() ? "accepted" : s.message();
}

TEST(ParallelLayout, TheBuiltCombinationsAreAccepted) {
  EXPECT_EQ(refusal(recipe(), {.dp = 2, .tp = 2}), "accepted");
  EXPECT_EQ(refusal(recipe(1), {.dp = 2, .tp = 2}), "accepted");
  EXPECT_EQ(refusal(recipe(), {.dp = 1, .tp = 2, .pp = 2}), "accepted");
  EXPECT_EQ(refusal(recipe(1), {.dp = 1, .ep = 2}), "accepted");
  EXPECT_EQ(refusal(recipe(3), {.dp = 4}), "accepted");
  TrainConfig no_overlap = recipe(2);
  no_overlap.overlap = false;
  EXPECT_EQ(refusal(no_overlap, {.dp = 2}), "accepted");
  TrainConfig four_micro = recipe();
  four_micro.pipeline.micro_batches = 4;
  EXPECT_EQ(refusal(four_micro, {.dp = 1, .pp = 2}), "accepted");
}

TEST(ParallelLayout, ExpertParallelWithAnotherAxisNamesEpAlone) {
  EXPECT_EQ(refusal(recipe(), {.dp = 2, .ep = 2}),
            "mesh dp=2 tp=1 pp=1 ep=2: expert parallelism (--ep) does not combine with --dp, --tp or --pp yet; run "
            "--ep 2 alone (mpirun -np 2, its ranks also split the batch)");
  EXPECT_NE(refusal(recipe(), {.dp = 1, .tp = 2, .ep = 2}), "accepted");
  EXPECT_NE(refusal(recipe(), {.dp = 1, .pp = 2, .ep = 2}), "accepted");
}

TEST(ParallelLayout, ZeroWithAPipelineNamesZeroZero) {
  for (int zero : {1, 2, 3}) {
    EXPECT_EQ(refusal(recipe(zero), {.dp = 2, .pp = 2}),
              "--zero " + std::to_string(zero) +
                  " with --pp 2: the pipeline stages keep their own AdamW and ZeRO does not shard them yet; use "
                  "--zero 0 with --pp, or --zero " + std::to_string(zero) + " with --dp alone");
  }
}

TEST(ParallelLayout, ShardedStagesWithTensorOrExpertParallelNameZeroOne) {
  EXPECT_EQ(refusal(recipe(2), {.dp = 1, .ep = 2}),
            "--zero 2 with --ep: ZeRO-2/3 do not shard expert-parallel models yet; use --zero 0 or 1 with --ep");
  EXPECT_EQ(refusal(recipe(3), {.dp = 2, .tp = 2}),
            "--zero 3 with --tp 2: ZeRO-2/3 do not shard tensor-parallel shards yet; use --zero 1 with --tp, or "
            "--zero 3 with --dp alone");
  TrainConfig lora = recipe(2);
  lora.lora.rank = 4;
  EXPECT_EQ(refusal(lora, {.dp = 2}),
            "train.zero 2 shards the whole model's weights and gradients, and a LoRA run trains only its adapters; "
            "use zero 0 or 1 with lora_rank");
}

TEST(ParallelLayout, NoOverlapIsRefusedWhereNothingOverlaps) {
  for (int zero : {0, 1}) {
    TrainConfig c = recipe(zero);
    c.overlap = false;
    EXPECT_EQ(refusal(c, {.dp = 2}), "accepted");  // ZeRO-0/1's allreduce overlaps by default
  }
  TrainConfig pipeline = recipe();
  pipeline.overlap = false;
  EXPECT_EQ(refusal(pipeline, {.dp = 1, .pp = 2}),
            "--no-overlap (train.overlap: false) turns off the overlap of the gradient reduction with the backward "
            "pass, which a pipeline does not overlap yet; leave it out");
  TrainConfig lora = recipe(1);
  lora.overlap = false;
  lora.lora.rank = 4;
  EXPECT_EQ(refusal(lora, {.dp = 2}),
            "--no-overlap (train.overlap: false) turns off the overlap of the gradient reduction with the backward "
            "pass, which a LoRA run does not overlap yet; leave it out");
}

TEST(ParallelLayout, ABatchThatDoesNotSplitOverTheDataRanksIsRefused) {
  EXPECT_EQ(refusal(recipe(), {.dp = 3}),
            "train.batch_size 4 does not split over 3 ranks; use a multiple of the rank count");
  EXPECT_EQ(refusal(recipe(), {.dp = 3, .tp = 2}),
            "train.batch_size 4 does not split over 3 data-parallel ranks (--dp); use a multiple of the dp size");
  EXPECT_EQ(refusal(recipe(), {.dp = 1, .ep = 3}),
            "train.batch_size 4 does not split over 3 ranks; use a multiple of the rank count");
}

TEST(ParallelLayout, MicroBatchesMustDivideEachPipelinesSequences) {
  TrainConfig c = recipe();
  c.pipeline.micro_batches = 3;
  EXPECT_EQ(refusal(c, {.dp = 1, .pp = 2}),
            "train.batch_size 4 does not split into 3 micro-batches; use a --pp-microbatches that divides 4");
  // 4 divides the global batch, but each of 2 dp ranks' pipelines has 2 sequences.
  c.pipeline.micro_batches = 4;
  EXPECT_EQ(refusal(c, {.dp = 2, .pp = 2}),
            "train.batch_size 4 over --dp 2 leaves each pipeline 2 sequences, which do not split into 4 "
            "micro-batches; use a --pp-microbatches that divides 2");
}

TEST(ParallelLayout, PipelineKeysWithoutAPipelineAreRefused) {
  PipelineConfig p;
  p.stages = 1;
  EXPECT_EQ(set_pipeline_config("gpipe", &p).message(),
            "pp_schedule gpipe orders a pipeline's micro-batches and needs pp > 1; leave it out without --pp");
  EXPECT_TRUE(set_pipeline_config("1f1b", &p).ok());
  p.micro_batches = 2;
  EXPECT_EQ(set_pipeline_config("1f1b", &p).message(),
            "pp_microbatches needs pp > 1 (without a pipeline, use grad_accum)");
  p.stages = 2;
  EXPECT_TRUE(set_pipeline_config("gpipe", &p).ok());
}

}  // namespace
}  // namespace koi::train
