// Engine: the step loop of one inference engine — Scheduler, KvCacheManager, sampling and
// speculative decoding around a ModelRunner. No networking and no JSON: callers hand in
// token ids and SamplingParams and get token ids back, and with a tokenizer their text:
// the engine owns each request's incremental detokenizer (tokenizer::StreamDecoder) and its
// stop strings (StopChecker), so every RequestOutput carries the new text.
//
// Each step(): the scheduler picks tokens to compute under the token budget, one
// ForwardBatch goes through the model over the paged KV cache, each request that reached
// the end of its tokens samples (verifying its draft tokens, if any), the scheduler applies
// the results and stop conditions, and drafts are proposed for the next step (prompt lookup,
// or a draft model: see spec_decode.h and draft_model.h).
//
// Prefill/decode disaggregation (kv_transfer.h, remote_prefill.cc): a RequestSpec with a
// kv_import waits, holding reserved blocks, until another engine's KV for its prompt has
// arrived (or falls back to prefilling here); one with a kv_export has its prompt's KV copied
// out after each forward pass.
//
// Threading: one thread owns the Engine and calls every method; nothing here locks. Other
// threads (HTTP handlers) talk to that thread through queues. A failed forward pass makes
// step() return its Status with no request changed, so the step can be retried. A failed
// draft-model forward is logged and only costs that step's drafts.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/clock.h"
#include "base/random.h"
#include "base/status.h"
#include "base/trace.h"
#include "engine/draft_model.h"
#include "grammar/matcher.h"
#include "engine/kv_cache_manager.h"
#include "engine/kv_transfer.h"
#include "engine/model_runner.h"
#include "engine/request.h"
#include "engine/scheduler.h"
#include "engine/spec_decode.h"
#include "model/forward_batch.h"
#include "tokenizer/tokenizer.h"

namespace koi::engine {

class StepTrace;

struct EngineConfig {
  int block_size = 16;                // tokens per KV block
  int num_kv_blocks = 0;              // size of the runner's KvCache, in blocks
  int max_num_batched_tokens = 2048;  // tokens computed per step
  int max_num_seqs = 256;             // running requests at most
  int max_model_len = 0;              // tokens per sequence at most; 0: the runner's context
  bool enable_prefix_caching = true;
  std::vector<int32_t> eos_token_ids;
  uint64_t seed = 0;                  // seeds requests that carry no seed of their own
  bool publish_kv_events = false;     // keep a log of prefix-cache changes (take_kv_events)
  SpeculativeConfig speculative;
  // Not owned; must outlive the engine. Set: outputs carry text (special tokens skipped),
  // stop strings apply. Null: token ids only, stop strings are ignored.
  const tokenizer::Tokenizer* tokenizer = nullptr;
};

struct RequestSpec {
  std::string id;                // unique among unfinished requests
  std::vector<int32_t> prompt;   // token ids
  SamplingParams params;
  int priority = 0;              // lower runs first and is preempted last
  uint64_t cache_key = 0;        // adapter id / tenant salt: prefixes are shared only within a key
  // Prefill/decode disaggregation (kv_transfer.h); at most one is set. kv_import: the prompt's
  // KV comes from another engine (decode side); kv_export: copy the prompt's KV out as it is
  // computed (prefill side; the request should have max_tokens 1).
  std::shared_ptr<KvImport> kv_import;
  std::shared_ptr<KvExport> kv_export;
  // Structured output: the output must be a document of this grammar (compiled for the
  // model's vocabulary). Shared between requests; null: unconstrained.
  std::shared_ptr<grammar::CompiledGrammar> grammar = nullptr;
  // A LoRA adapter of the base model (engine/lora_pool.h; loaded for this model): the request's
  // tokens go through it; null: the base model. Requests with different adapters share batches.
  // cache_key should include the adapter's id (cache_key_for_adapter).
  std::shared_ptr<const model::LoraAdapter> lora = nullptr;
};
// Arrival order is the order of add_request calls.

// One step() that ran the model: its batch composition and where its time went (koi serve
// exports it as koi:engine_step_*). A request is prefilling while more than one of its tokens
// is still to compute (its prompt, or its whole sequence again after a preemption).
struct StepStats {
  int64_t number = 0;  // the engine's count of model-running steps, this one included
  int num_prefill_requests = 0, num_decode_requests = 0;
  int num_prefill_tokens = 0, num_decode_tokens = 0;  // decode tokens include verified drafts
  int num_models = 0;  // distinct models among the scheduled requests: the base and each LoRA adapter
  double schedule_seconds = 0.0;                      // scheduler_.schedule()
  double forward_seconds = 0.0;                       // batch building and the model's forward
  double total_seconds = 0.0;                         // the whole step, sampling included
};

struct EngineStats {
  int num_running = 0;
  int num_waiting = 0;
  double kv_usage = 0.0;                 // fraction of KV blocks in use
  int64_t prefix_cache_queried_tokens = 0;
  int64_t prefix_cache_hit_tokens = 0;
  double prefix_cache_hit_rate = 0.0;
  int64_t num_preemptions = 0;
  int64_t num_steps = 0;
  int64_t num_computed_tokens = 0;       // tokens through the model (prefill, decode, drafts)
  int64_t num_generated_tokens = 0;      // tokens returned to requests
  double busy_seconds = 0.0;             // time spent inside step()
  double generated_tokens_per_second = 0.0;
  int64_t num_draft_tokens = 0;          // drafts verified (proposed and scheduled)
  int64_t num_accepted_tokens = 0;       // drafts accepted
  double spec_acceptance_rate = 0.0;
  int64_t num_kv_imports = 0;            // requests whose prompt KV came from another engine
  int64_t num_kv_fallbacks = 0;          // imports that failed and were prefilled here
  int64_t num_kv_exports = 0;            // prompts whose KV was copied out
  int64_t num_mixed_model_steps = 0;     // steps whose batch held requests of 2+ models (base, adapters)
};

class Engine {
 public:
  // `runner` must outlive the engine; its KvCache has config.num_kv_blocks blocks of
  // config.block_size tokens. config.speculative must pass validate(config.speculative, runner).
  Engine(EngineConfig config, ModelRunner& runner, const Clock& clock = SystemClock::instance());
  ~Engine();

  // From now on the steps, the runner's forward passes and the requests added from here on are
  // recorded on `trace` (engine/step_trace.h: tracks, span names); nullptr stops recording.
  // Needs the engine on SystemClock (its instants are the trace's). `trace` must outlive its use.
  void set_trace(trace::Recorder* trace);

  // Queues a request. Fails with a message naming the problem for invalid sampling
  // parameters, token ids outside the vocabulary, a taken id, or a prompt that can never fit.
  Status add_request(RequestSpec spec);
  // Runs one step; returns the new tokens of every request that got some, and the final
  // output of every request that finished (including those aborted since the last step).
  Result<std::vector<RequestOutput>> step();
  // Finishes a request at once and frees its blocks; its final output comes from step().
  Status abort(const std::string& request_id);

  bool has_unfinished() const { return scheduler_.has_unfinished() || !imports_.empty() || !pending_.empty(); }
  // Unfinished requests other than those waiting for their KV from another engine: step()
  // has computing to do.
  bool has_work() const { return scheduler_.has_unfinished() || !pending_.empty(); }
  // Requests waiting for their KV from another engine.
  int num_importing() const { return static_cast<int>(imports_.size()); }
  // Layout of this engine's KV blocks, for the transfer handshake; model_fingerprint empty.
  KvLayout kv_layout() const;
  // Whether this engine's runner exposes its KV memory in one table (required for a transfer:
  // a cache that keeps sliding-window layers apart cannot be moved yet).
  bool can_transfer_kv() const { return runner_.kv_memory() != nullptr; }
  EngineStats stats() const;
  // The prefix-cache changes since the last call, in order (config.publish_kv_events).
  std::vector<KvEvent> take_kv_events() { return std::exchange(kv_events_, {}); }
  // The last step() that ran the model (all zero before the first).
  const StepStats& last_step() const { return last_step_; }
  const KvCacheManager& kv_cache() const { return kv_; }
  // The draft-model proposer; null unless speculation uses a draft model.
  const DraftModelProposer* draft_proposer() const { return draft_.get(); }
  int max_model_len() const { return scheduler_.config().max_model_len; }
  const std::vector<int32_t>& eos_token_ids() const { return config_.eos_token_ids; }

 private:
  struct Import {
    std::unique_ptr<Request> request;
    std::shared_ptr<KvImport> ticket;
  };

  Status add(RequestSpec spec, std::shared_ptr<KvImport> import);
  Result<std::unique_ptr<Request>> make_request(RequestSpec& spec);
  // Disaggregation (remote_prefill.cc).
  void add_import(std::unique_ptr<Request> request, std::shared_ptr<KvImport> ticket);
  void poll_imports();
  void commit_import(Import& import);
  void fall_back(Import& import, const std::string& why);
  bool abort_import(const std::string& request_id);
  // Before the forward pass: which blocks each exporting request's chunk completes, and the
  // batch's layer hook that sends them layer by layer (export_layer) while the pass runs.
  void plan_exports(const SchedulerOutput& plan);
  void export_layer(int layer);
  // After it: the layers a runner without the hook did not send, then the first tokens.
  void export_kv(const SchedulerOutput& plan, const std::vector<std::vector<SampledToken>>& new_tokens);
  void copy_layer(const Request& r, int block_idx, int layer, KvExport& ticket);
  void drop_finished_exports();

  void build_batch(const SchedulerOutput& plan);
  void propose_drafts();
  // Cuts each constrained request's drafts at the first one its grammar rejects.
  void check_drafts_against_grammar();
  static StepStats batch_composition(const SchedulerOutput& plan);
  // Drops the draft-model state of requests that finished or were preempted this step.
  void free_drafts(const SchedulerOutput& plan, const std::vector<RequestOutput>& outputs);

  EngineConfig config_;
  ModelRunner& runner_;
  const Clock& clock_;
  KvCacheManager kv_;
  Scheduler scheduler_;
  std::unique_ptr<DraftModelProposer> draft_;  // set for SpeculativeMethod::kDraftModel
  Rng rng_;
  int64_t next_arrival_ = 0;
  model::ForwardBatch batch_;
  std::vector<int32_t> first_logit_row_;  // per scheduled request; -1 when it does not sample
  std::vector<float> logits_;
  std::unordered_map<std::string, Import> imports_;                      // decode side
  std::unordered_map<std::string, std::shared_ptr<KvExport>> exports_;   // prefill side
  // This step's blocks [first_block, end_block) of one exporting request, sent layer by layer.
  struct LayerExport {
    const Request* request = nullptr;
    KvExport* ticket = nullptr;
    int first_block = 0;
    int end_block = 0;
    int layers_sent = 0;
  };
  std::vector<LayerExport> step_exports_;  // set by plan_exports for one step
  std::vector<RequestOutput> pending_;  // first tokens of committed imports, aborted imports
  std::vector<KvEvent> kv_events_;
  EngineStats counters_;
  int64_t busy_ns_ = 0;
  StepStats last_step_;
  std::unique_ptr<StepTrace> trace_;  // set by set_trace
};

}  // namespace koi::engine
