// Helpers shared by the tests that run the engine over real models (engine_model_test,
// draft_model_llama_test, tests/engine_batch_test): the models and greedy parameters they
// all use. Test code only; nothing in the library includes it.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "engine/sampling_params.h"
#include "model/llama.h"
#include "model/llama2c.h"
#include "model/random_model.h"

namespace koi::engine::test_util {

// Greedy decoding of exactly max_tokens tokens.
inline SamplingParams greedy(int max_tokens) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  return p;
}

// The real stories260K model from ../shared (llama2.c format).
inline std::unique_ptr<model::LlamaModel> load_stories260k() {
  auto loaded = model::load_llama2c(std::string(KOI_SHARED_DIR) + "/models/stories260K/stories260K.bin");
  EXPECT_TRUE(loaded.ok()) << loaded.status().to_string();
  return std::make_unique<model::LlamaModel>(std::move(loaded->config), std::move(loaded->weights));
}

// model::named_shape("tiny") with random weights; n_vocab > 0 overrides its vocabulary.
inline std::unique_ptr<model::LlamaModel> random_tiny(uint64_t seed, int n_vocab = 0) {
  model::ModelConfig config = *model::named_shape("tiny");
  if (n_vocab > 0) config.n_vocab = n_vocab;
  model::ModelWeights weights = model::random_weights(config, seed);
  return std::make_unique<model::LlamaModel>(std::move(config), std::move(weights));
}

}  // namespace koi::engine::test_util
