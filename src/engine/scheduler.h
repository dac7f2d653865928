// Scheduler: the waiting and running queues and the per-step decision of which requests
// compute how many tokens, under vLLM v1's single rule: each request's num_computed_tokens
// catches up to its length (plus its speculative tokens) within a per-step token budget.
//
// schedule() serves running requests first, in (priority, arrival) order: decodes, the next
// chunk of a long prefill, speculative tokens. When the KV pool cannot hold a running
// request's next tokens, the running request that runs last (lowest priority, latest
// arrival) is preempted by recompute: its blocks are freed, num_computed_tokens drops to 0
// and it goes back to waiting with its output tokens kept, to be recomputed (mostly from
// the prefix cache) before it continues. With budget and sequence slots left and nobody
// preempted in this step, waiting requests are admitted in (priority, arrival) order, each
// taking its prefix-cache hits and a chunk of its prompt as large as the budget allows; the
// first that does not fit stops admission (no overtaking). update() takes the sampled tokens
// back, advances num_computed_tokens, applies stop conditions and frees finished requests.
//
// The scheduler owns every live Request. Requests that can never run (a prompt longer than
// the model's context or the whole KV pool) are rejected by add() with a Status.
// Not thread-safe: the engine thread owns it.
#pragma once

#include <deque>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "engine/kv_cache_manager.h"
#include "engine/request.h"

namespace koi::engine {

struct SchedulerConfig {
  int max_num_batched_tokens = 2048;  // tokens computed per step, over all requests
  int max_num_seqs = 256;             // running requests at most
  int max_model_len = 0;              // tokens per sequence at most: min(context, KV pool)
  std::vector<int32_t> eos_token_ids; // finish with "stop" unless ignore_eos
};

struct ScheduledRequest {
  Request* request;
  int num_tokens;  // tokens to compute this step, the request's spec_token_ids included
};

struct SchedulerOutput {
  std::vector<ScheduledRequest> scheduled;  // running requests first, then newly admitted
  std::vector<std::string> preempted;       // ids preempted in this step
  int num_batched_tokens = 0;
};

class Scheduler {
 public:
  Scheduler(SchedulerConfig config, KvCacheManager& kv);

  // Queues a request; fails if its id is taken or it can never run.
  Status add(std::unique_ptr<Request> request);
  // The checks of add() alone: fails if the request's id is taken or it can never run.
  Status check_new(const Request& request) const;
  // Adds a request whose prompt is computed (num_computed_tokens == its prompt length, its
  // blocks allocated in the KV-cache manager: KV imported from another engine) straight to
  // the running batch with its first sampled token, which it applies like update() does.
  // Returns that token's output; the request may finish with it (and is then freed).
  RequestOutput add_prefilled(std::unique_ptr<Request> request, const SampledToken& first);
  SchedulerOutput schedule();
  // new_tokens[i]: the tokens accepted for output.scheduled[i] (empty while a prompt is
  // still being prefilled; with speculation, the accepted drafts then one sampled token).
  // Returns an output for every request with new tokens or that finished; a request with a
  // decoder gets its text, stop strings applied.
  std::vector<RequestOutput> update(const SchedulerOutput& output, std::span<const std::vector<SampledToken>> new_tokens);
  // Finishes a request now, frees its blocks and queues its final output for take_aborted().
  Status abort(const std::string& request_id);
  std::vector<RequestOutput> take_aborted();

  int num_running() const { return static_cast<int>(running_.size()); }
  int num_waiting() const { return static_cast<int>(waiting_.size()); }
  int64_t num_preemptions() const { return num_preemptions_; }
  bool has_unfinished() const { return !requests_.empty(); }
  const SchedulerConfig& config() const { return config_; }
  const std::vector<Request*>& running() const { return running_; }
  const Request* find(const std::string& request_id) const;

 private:
  void preempt(Request* request);
  // Appends one token and applies stop conditions; returns true when the request finished.
  bool append_token(Request& request, const SampledToken& token, RequestOutput& out);
  void finish(Request* request, FinishReason reason);
  void insert_waiting(Request* request);

  SchedulerConfig config_;
  KvCacheManager& kv_;
  std::unordered_map<std::string, std::unique_ptr<Request>> requests_;
  std::deque<Request*> waiting_;   // in (priority, arrival) order
  std::vector<Request*> running_;  // in (priority, arrival) order
  std::vector<RequestOutput> aborted_;
  int64_t num_preemptions_ = 0;
};

}  // namespace koi::engine
