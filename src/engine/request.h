// Request: one sequence inside the engine — its tokens, how many of them have KV in the
// cache, its sampling state and where it is in its life (waiting -> running -> finished,
// and back to waiting when preempted). The engine owns every Request; the scheduler and
// the KV-cache manager work on them by pointer during a step. Not thread-safe.
//
// The one rule of scheduling: token_ids grows as tokens are sampled, and each step
// num_computed_tokens catches up towards token_ids.size() (plus any speculative tokens) under
// the step's token budget. Prefill, chunked prefill, decode, prefix-cache hits, recompute
// after preemption and speculative verification are all that rule.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/random.h"
#include "grammar/matcher.h"
#include "model/lora.h"
#include "engine/sampler.h"
#include "engine/sampling_params.h"
#include "engine/stop_checker.h"
#include "tokenizer/tokenizer.h"

namespace koi::engine {

enum class RequestStatus { kWaiting, kRunning, kFinished };
enum class FinishReason { kNone, kStop, kLength, kAbort };

std::string_view finish_reason_name(FinishReason reason);  // "stop", "length", "abort", ""

struct Request {
  Request(std::string id_in, std::vector<int32_t> prompt, SamplingParams params_in, int priority_in,
          int64_t arrival_in, uint64_t cache_key_in, uint64_t seed)
      : id(std::move(id_in)),
        token_ids(std::move(prompt)),
        num_prompt_tokens(static_cast<int>(token_ids.size())),
        params(std::move(params_in)),
        priority(priority_in),
        arrival(arrival_in),
        cache_key(cache_key_in),
        rng(seed),
        stop_checker(params.stop) {}

  std::string id;
  std::vector<int32_t> token_ids;       // the prompt, then every output token
  int num_prompt_tokens;
  int num_computed_tokens = 0;          // leading token_ids whose KV is in the cache
  std::vector<int32_t> spec_token_ids;  // draft tokens to verify in the next step
  // The proposal distribution of each draft, row i (n_vocab floats) for spec_token_ids[i],
  // when a draft model sampled them; empty when every draft is a point mass (n-gram
  // proposals, greedy requests). Rows past spec_token_ids.size() are left over from drafts
  // the scheduler dropped and are never read.
  std::vector<float> spec_draft_probs;
  SamplingParams params;
  int priority;                         // lower runs first and is preempted last
  int64_t arrival;                      // unique; earlier runs first among equal priority
  uint64_t cache_key;                   // part of every block hash: adapter id / tenant salt
  Rng rng;
  std::optional<tokenizer::StreamDecoder> decoder;  // set when the engine has a tokenizer
  StopChecker stop_checker;                         // over the decoder's text
  // Set for a constrained request (structured output): where its output is in the grammar.
  // Sampling masks every row by it; the scheduler advances it with each emitted token.
  std::optional<grammar::Matcher> matcher;
  // The LoRA adapter its tokens go through (null: the base model); held to the request's end.
  std::shared_ptr<const model::LoraAdapter> lora;
  RequestStatus status = RequestStatus::kWaiting;
  FinishReason finish_reason = FinishReason::kNone;
  int num_preemptions = 0;
  // Prompt tokens found in the prefix cache when the request was first scheduled (-1 before);
  // reported once, with its first output.
  int num_cached_prompt_tokens = -1;
  bool reported_cached = false;

  int num_tokens() const { return static_cast<int>(token_ids.size()); }
  int num_output_tokens() const { return num_tokens() - num_prompt_tokens; }
  std::span<const int32_t> prompt() const { return {token_ids.data(), static_cast<size_t>(num_prompt_tokens)}; }
  std::span<const int32_t> output() const {
    return std::span<const int32_t>(token_ids).subspan(static_cast<size_t>(num_prompt_tokens));
  }
  // Scheduling order: (priority, arrival) ascending.
  bool runs_before(const Request& other) const {
    return priority != other.priority ? priority < other.priority : arrival < other.arrival;
  }
};

// What one step produced for one request.
struct RequestOutput {
  std::string request_id;
  std::vector<int32_t> token_ids;          // new tokens this step
  std::vector<SampledToken> logprobs;      // one per new token when params.logprobs >= 0
  std::string text;                        // new text, when the engine has a tokenizer
  bool finished = false;
  FinishReason finish_reason = FinishReason::kNone;
  // On the request's first output: its prompt tokens that were served from the prefix cache
  // (OpenAI's usage.prompt_tokens_details.cached_tokens); -1 on every other output.
  int num_cached_tokens = -1;
};

}  // namespace koi::engine
