#include "engine/engine.h"

#include <algorithm>

#include <fmt/format.h>

#include "base/check.h"
#include "base/logging.h"
#include "engine/step_trace.h"

namespace koi::engine {

namespace {

// The tables the runner's KV memory keeps (a split cache: sliding-window layers apart).
KvGroups kv_groups(ModelRunner& runner) {
  const model::KvCache* kv = runner.kv_memory();
  if (kv == nullptr || !kv->shape().split()) return {};
  return {kv->shape().has_full_layers(), kv->shape().window};
}

// The longest sequence the pool holds: every block, or with a split cache its full table's
// blocks beside the most its window table holds.
int kv_capacity_tokens(const EngineConfig& c, ModelRunner& runner) {
  const model::KvCache* kv = runner.kv_memory();
  if (kv == nullptr || !kv->shape().split()) return c.num_kv_blocks * c.block_size;
  model::KvCacheShape shape = kv->shape();
  shape.num_blocks = c.num_kv_blocks;
  shape.block_size = c.block_size;
  return static_cast<int>(std::min<int64_t>(shape.capacity_tokens(c.max_num_batched_tokens), INT32_MAX));
}

SchedulerConfig scheduler_config(const EngineConfig& c, ModelRunner& runner) {
  SchedulerConfig s;
  s.max_num_batched_tokens = c.max_num_batched_tokens;
  s.max_num_seqs = c.max_num_seqs;
  s.max_model_len = std::min(runner.max_context(), kv_capacity_tokens(c, runner));
  if (c.max_model_len > 0) s.max_model_len = std::min(s.max_model_len, c.max_model_len);
  s.eos_token_ids = c.eos_token_ids;
  return s;
}

}  // namespace

Engine::Engine(EngineConfig config, ModelRunner& runner, const Clock& clock)
    : config_(std::move(config)),
      runner_(runner),
      clock_(clock),
      kv_(config_.num_kv_blocks, config_.block_size, config_.enable_prefix_caching, kv_groups(runner)),
      scheduler_(scheduler_config(config_, runner), kv_),
      rng_(config_.seed) {
  if (config_.publish_kv_events) kv_.set_event_log(&kv_events_);
  const SpeculativeConfig& spec = config_.speculative;
  const Status spec_status = validate(spec, runner);
  if (!spec_status.ok()) log::error("{}", spec_status.message());
  KOI_CHECK(spec_status.ok());
  KOI_CHECK(config_.max_num_batched_tokens > spec.num_speculative_tokens);
  if (spec.method == SpeculativeMethod::kDraftModel && spec.num_speculative_tokens > 0) {
    draft_ = std::make_unique<DraftModelProposer>(*spec.draft_runner, spec.draft_num_kv_blocks, config_.block_size,
                                                  config_.max_num_batched_tokens);
  }
  log::info("KV cache: {} blocks of {} tokens, {} tokens in all; at most {} tokens per sequence",
            config_.num_kv_blocks, config_.block_size, int64_t{config_.num_kv_blocks} * config_.block_size,
            max_model_len());
}

Result<std::unique_ptr<Request>> Engine::make_request(RequestSpec& spec) {
  const int n_vocab = runner_.n_vocab();
  KOI_RETURN_IF_ERROR(validate(spec.params, n_vocab).with_prefix(fmt::format("request '{}'", spec.id)));
  for (int32_t token : spec.prompt) {
    if (token < 0 || token >= n_vocab) {
      return Status::invalid_argument(fmt::format(
          "request '{}': prompt token {} is outside the vocabulary [0, {}); tokenize with the model's tokenizer",
          spec.id, token, n_vocab));
    }
  }
  if (spec.grammar && spec.grammar->vocab().n_vocab() != n_vocab) {
    return Status::invalid_argument(fmt::format(
        "request '{}': its grammar was compiled for a vocabulary of {} tokens, but the model has {}", spec.id,
        spec.grammar->vocab().n_vocab(), n_vocab));
  }
  const uint64_t seed = spec.params.seed ? *spec.params.seed : rng_.next_u64();
  auto request = std::make_unique<Request>(std::move(spec.id), std::move(spec.prompt), std::move(spec.params),
                                           spec.priority, next_arrival_++, spec.cache_key, seed);
  if (spec.grammar) request->matcher.emplace(std::move(spec.grammar));
  request->lora = std::move(spec.lora);
  if (config_.tokenizer) {
    request->decoder.emplace(config_.tokenizer, /*skip_special=*/true);
    // The first output token renders after the prompt's end (SentencePiece spaces); the last
    // few prompt tokens also bring the start of a character the output may complete.
    constexpr size_t kMaxCharTokens = 4;
    const std::span<const int32_t> prompt = request->prompt();
    for (int32_t token : prompt.subspan(prompt.size() - std::min(prompt.size(), kMaxCharTokens))) {
      request->decoder->push(token);
    }
  }
  return request;
}

Engine::~Engine() = default;

void Engine::set_trace(trace::Recorder* trace) {
  trace_ = trace ? std::make_unique<StepTrace>(trace) : nullptr;
  runner_.set_trace(trace);
}

Status Engine::add_request(RequestSpec spec) {
  std::shared_ptr<KvImport> import = std::move(spec.kv_import);
  Status added = add(std::move(spec), import);
  // A refused request never reserves: its transfer thread must not wait for it.
  if (!added.ok() && import) import->cancel();
  return added;
}

Status Engine::add(RequestSpec spec, std::shared_ptr<KvImport> import) {
  if (imports_.count(spec.id)) {
    return Status::already_exists(fmt::format("request id '{}' is already in use; use a unique id", spec.id));
  }
  std::shared_ptr<KvExport> export_ticket = std::move(spec.kv_export);
  if (export_ticket && !can_transfer_kv()) {
    return Status::failed_precondition(
        "this engine cannot export its KV: its runner does not share its KV memory");
  }
  KOI_ASSIGN_OR_RETURN(std::unique_ptr<Request> request, make_request(spec));
  KOI_RETURN_IF_ERROR(scheduler_.check_new(*request));
  if (trace_) trace_->added(request->id, request->num_prompt_tokens, clock_.now_ns());
  if (import) {
    add_import(std::move(request), std::move(import));
    return ok_status();
  }
  const std::string id = request->id;
  KOI_RETURN_IF_ERROR(scheduler_.add(std::move(request)));
  if (export_ticket) exports_.emplace(id, std::move(export_ticket));
  return ok_status();
}

Status Engine::abort(const std::string& request_id) {
  if (abort_import(request_id)) return ok_status();
  KOI_RETURN_IF_ERROR(scheduler_.abort(request_id));
  if (draft_) draft_->free(request_id);
  return ok_status();
}

void Engine::build_batch(const SchedulerOutput& plan) {
  batch_.clear();
  first_logit_row_.clear();
  for (size_t seq_idx = 0; seq_idx < plan.scheduled.size(); ++seq_idx) {
    const Request& r = *plan.scheduled[seq_idx].request;
    const int num_tokens = plan.scheduled[seq_idx].num_tokens;
    const int num_drafts = static_cast<int>(r.spec_token_ids.size());
    batch_.sequences.push_back({kv_.block_table(r), r.lora.get(), kv_.window_block_table(r)});
    for (int i = 0; i < num_tokens; ++i) {
      const int pos = r.num_computed_tokens + i;
      batch_.token_ids.push_back(pos < r.num_tokens() ? r.token_ids[pos] : r.spec_token_ids[pos - r.num_tokens()]);
      batch_.positions.push_back(pos);
      batch_.seq_index.push_back(static_cast<int32_t>(seq_idx));
    }
    // A request samples when this step reaches its last token: rows for it and each draft.
    if (r.num_computed_tokens + num_tokens - num_drafts < r.num_tokens()) {
      first_logit_row_.push_back(-1);
      continue;
    }
    first_logit_row_.push_back(static_cast<int32_t>(batch_.logit_indices.size()));
    const int32_t last = static_cast<int32_t>(batch_.token_ids.size()) - 1;
    for (int32_t t = last - num_drafts; t <= last; ++t) batch_.logit_indices.push_back(t);
  }
}

Result<std::vector<RequestOutput>> Engine::step() {
  const int64_t start_ns = clock_.now_ns();
  poll_imports();
  // First tokens of requests prefilled elsewhere go out at once, before the next forward.
  std::vector<RequestOutput> outputs = std::move(pending_);
  pending_.clear();
  if (!outputs.empty()) {
    if (trace_) trace_->outputs(outputs, clock_.now_ns());
    return outputs;
  }
  const SchedulerOutput plan = scheduler_.schedule();
  if (plan.scheduled.empty()) {
    for (RequestOutput& out : scheduler_.take_aborted()) outputs.push_back(std::move(out));
    drop_finished_exports();
    if (trace_) trace_->outputs(outputs, clock_.now_ns());
    return outputs;
  }
  const int64_t scheduled_ns = clock_.now_ns();
  if (trace_) trace_->scheduled(plan, scheduled_ns);
  StepStats step = batch_composition(plan);

  build_batch(plan);
  plan_exports(plan);
  const size_t n_vocab = static_cast<size_t>(runner_.n_vocab());
  logits_.resize(batch_.logit_indices.size() * n_vocab);
  KOI_RETURN_IF_ERROR(runner_.forward(batch_, logits_.data()));
  const int64_t forward_done_ns = clock_.now_ns();

  // Sampling: each request draws from its own Rng and reads only its own rows, so the requests
  // go to the runner's threads in any split with the same tokens.
  std::vector<std::vector<SampledToken>> new_tokens(plan.scheduled.size());
  const auto sample = [&](int64_t begin, int64_t end) {
    for (auto i = static_cast<size_t>(begin); i < static_cast<size_t>(end); ++i) {
      if (first_logit_row_[i] < 0) continue;
      Request& r = *plan.scheduled[i].request;
      const size_t num_rows = r.spec_token_ids.size() + 1;
      const auto rows = std::span<const float>(logits_).subspan(static_cast<size_t>(first_logit_row_[i]) * n_vocab,
                                                                 num_rows * n_vocab);
      // Tokens this request may still emit: its max_tokens and the sequence limit.
      const int budget = std::min(r.params.max_tokens - r.num_output_tokens(), max_model_len() - r.num_tokens());
      new_tokens[i] = sample_with_drafts(r, rows, static_cast<int>(n_vocab), budget);
    }
  };
  const auto n_scheduled = static_cast<int64_t>(plan.scheduled.size());
  if (ThreadPool* pool = runner_.pool(); pool != nullptr) {  // parallel_for runs 1 item inline
    pool->parallel_for(n_scheduled, sample);
  } else {
    sample(0, n_scheduled);
  }
  for (size_t i = 0; i < plan.scheduled.size(); ++i) {
    if (first_logit_row_[i] < 0) continue;
    counters_.num_draft_tokens += static_cast<int64_t>(plan.scheduled[i].request->spec_token_ids.size());
    counters_.num_accepted_tokens += static_cast<int64_t>(new_tokens[i].size() - 1);
  }
  const int64_t sampled_ns = clock_.now_ns();
  export_kv(plan, new_tokens);
  for (RequestOutput& out : scheduler_.take_aborted()) outputs.push_back(std::move(out));
  for (RequestOutput& out : scheduler_.update(plan, new_tokens)) {
    counters_.num_generated_tokens += static_cast<int64_t>(out.token_ids.size());
    outputs.push_back(std::move(out));
  }
  free_drafts(plan, outputs);
  drop_finished_exports();
  propose_drafts();

  ++counters_.num_steps;
  if (step.num_models > 1) ++counters_.num_mixed_model_steps;
  counters_.num_computed_tokens += plan.num_batched_tokens;
  const int64_t end_ns = clock_.now_ns();
  busy_ns_ += end_ns - start_ns;
  step.schedule_seconds = (scheduled_ns - start_ns) * 1e-9;
  step.forward_seconds = (forward_done_ns - scheduled_ns) * 1e-9;
  step.total_seconds = (end_ns - start_ns) * 1e-9;
  step.number = counters_.num_steps;
  last_step_ = step;
  if (trace_) {
    trace_->step({start_ns, scheduled_ns, forward_done_ns, sampled_ns, end_ns}, step);
    trace_->outputs(outputs, end_ns);
  }
  return outputs;
}

StepStats Engine::batch_composition(const SchedulerOutput& plan) {
  StepStats s;
  std::vector<const model::LoraAdapter*> models;  // null: the base model
  for (const ScheduledRequest& sr : plan.scheduled) {
    const bool prefill = sr.request->num_computed_tokens < sr.request->num_tokens() - 1;
    (prefill ? s.num_prefill_requests : s.num_decode_requests) += 1;
    (prefill ? s.num_prefill_tokens : s.num_decode_tokens) += sr.num_tokens;
    const model::LoraAdapter* lora = sr.request->lora.get();
    if (std::find(models.begin(), models.end(), lora) == models.end()) models.push_back(lora);
  }
  s.num_models = static_cast<int>(models.size());
  return s;
}

void Engine::free_drafts(const SchedulerOutput& plan, const std::vector<RequestOutput>& outputs) {
  if (!draft_) return;
  for (const std::string& id : plan.preempted) draft_->free(id);
  for (const RequestOutput& out : outputs) {
    if (out.finished) draft_->free(out.request_id);
  }
}

void Engine::propose_drafts() {
  const SpeculativeConfig& spec = config_.speculative;
  if (spec.num_speculative_tokens == 0) return;
  std::vector<DraftRequest> drafting;
  for (Request* r : scheduler_.running()) {
    if (r->num_computed_tokens != r->num_tokens() - 1) continue;  // still prefilling
    // Drafts past max_tokens or the sequence limit could never be emitted.
    const int room = std::min(r->params.max_tokens - r->num_output_tokens(), max_model_len() - r->num_tokens()) - 1;
    const int k = std::min(spec.num_speculative_tokens, room);
    if (k <= 0) continue;
    if (draft_) {
      drafting.push_back({r, k});
    } else {
      r->spec_token_ids = propose_ngram(r->token_ids, spec.prompt_lookup_min, spec.prompt_lookup_max, k);
    }
  }
  // Drafts only save time: a failed draft forward costs this step its drafts, nothing more.
  if (!drafting.empty()) {
    if (Status s = draft_->propose(drafting); !s.ok()) {
      log::warn("draft model failed; no drafts this step: {}", s.to_string());
    }
  }
  check_drafts_against_grammar();
}

void Engine::check_drafts_against_grammar() {
  for (Request* r : scheduler_.running()) {
    if (!r->matcher || r->spec_token_ids.empty()) continue;
    grammar::Matcher ahead = *r->matcher;
    size_t valid = 0;
    while (valid < r->spec_token_ids.size() && !ahead.finished() && ahead.accept(r->spec_token_ids[valid])) ++valid;
    r->spec_token_ids.resize(valid);
  }
}

EngineStats Engine::stats() const {
  EngineStats s = counters_;
  s.num_running = scheduler_.num_running();
  s.num_waiting = scheduler_.num_waiting();
  s.kv_usage = kv_.pool().usage();
  const PrefixCacheStats& prefix = kv_.prefix_cache_stats();
  s.prefix_cache_queried_tokens = prefix.queried_tokens;
  s.prefix_cache_hit_tokens = prefix.hit_tokens;
  s.prefix_cache_hit_rate = prefix.hit_rate();
  s.num_preemptions = scheduler_.num_preemptions();
  s.busy_seconds = static_cast<double>(busy_ns_) * 1e-9;
  s.generated_tokens_per_second = s.busy_seconds > 0 ? static_cast<double>(s.num_generated_tokens) / s.busy_seconds : 0;
  s.spec_acceptance_rate =
      s.num_draft_tokens ? static_cast<double>(s.num_accepted_tokens) / static_cast<double>(s.num_draft_tokens) : 0;
  return s;
}

}  // namespace koi::engine
