#include "engine/engine_builder.h"

#include <gtest/gtest.h>

namespace koi::engine {
namespace {

EngineOptions valid() {
  EngineOptions o;
  o.model = "m.gguf";
  return o;
}

TEST(EngineBuilderTest, DefaultsPass) { EXPECT_TRUE(check(valid()).ok()); }

TEST(EngineBuilderTest, EveryBadValueNamesItsFlag) {
  struct Case {
    void (*set)(EngineOptions&);
    const char* message;
  };
  const Case cases[] = {
      {[](EngineOptions& o) { o.model.clear(); }, "--model is required: a GGUF file or a Hugging Face directory"},
      {[](EngineOptions& o) { o.max_num_seqs = 0; }, "--max-num-seqs must be at least 1, got 0"},
      {[](EngineOptions& o) { o.max_num_batched_tokens = 0; }, "--max-num-batched-tokens must be at least 1, got 0"},
      {[](EngineOptions& o) { o.block_size = 0; }, "--block-size must be between 1 and 1024, got 0"},
      {[](EngineOptions& o) { o.threads = -2; }, "--threads must be between 0 and 1024, got -2"},
      {[](EngineOptions& o) { o.kv_cache_memory = "lots"; },
       "--kv-cache-memory 'lots' is not a size; give bytes with a unit (6GiB, 512MiB, 2GB) or a fraction of RAM in "
       "(0, 1] (0.3)"},
      {[](EngineOptions& o) { o.kv_dtype = "bf16"; },
       "--kv-dtype must be f32, f16 or q8_0 (32 values per block with an f16 scale), got 'bf16'"},
      {[](EngineOptions& o) { o.speculative = "magic"; },
       "--speculative: unknown speculative method 'magic'; use 'ngram' (prompt lookup) or 'draft' (a draft model)"},
      {[](EngineOptions& o) {
         o.speculative = "ngram";
         o.num_speculative_tokens = 0;
       },
       "--num-speculative-tokens must be between 1 and 64, got 0"},
      {[](EngineOptions& o) {
         o.speculative = "ngram";
         o.max_num_batched_tokens = 4;
       },
       "--max-num-batched-tokens (4) must be larger than --num-speculative-tokens (4): a step verifies a token and "
       "its drafts together"},
      {[](EngineOptions& o) { o.speculative = "draft"; },
       "--speculative draft needs --draft-model PATH (a model with the target's tokenizer)"},
      {[](EngineOptions& o) { o.draft_model = "d.gguf"; }, "--draft-model is used only with --speculative draft"},
      {[](EngineOptions& o) {
         o.speculative = "ngram";
         o.draft_model = "d.gguf";
       },
       "--draft-model is used only with --speculative draft"},
  };
  for (const Case& c : cases) {
    EngineOptions o = valid();
    c.set(o);
    const Status s = check(o);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.message;
    EXPECT_EQ(s.message(), c.message);
  }
}

TEST(EngineBuilderTest, BadOptionsFailBeforeAnyFileIsRead) {
  EngineOptions o = valid();
  o.model = "/nonexistent/model.gguf";
  o.max_num_seqs = 0;
  EXPECT_EQ(load_engine_models(o).status().message(), "--max-num-seqs must be at least 1, got 0");
}

}  // namespace
}  // namespace koi::engine
