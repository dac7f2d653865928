#include "engine/scheduler.h"

#include <algorithm>

#include <fmt/format.h>

#include "base/check.h"

namespace koi::engine {

namespace {

bool contains(const std::vector<int32_t>& ids, int32_t token) {
  return std::find(ids.begin(), ids.end(), token) != ids.end();
}

bool by_order(const Request* a, const Request* b) { return a->runs_before(*b); }

}  // namespace

Scheduler::Scheduler(SchedulerConfig config, KvCacheManager& kv) : config_(std::move(config)), kv_(kv) {
  KOI_CHECK(config_.max_num_batched_tokens > 0 && config_.max_num_seqs > 0 && config_.max_model_len > 0);
}

Status Scheduler::add(std::unique_ptr<Request> request) {
  KOI_RETURN_IF_ERROR(check_new(*request));
  Request* r = request.get();
  requests_.emplace(r->id, std::move(request));
  insert_waiting(r);
  return ok_status();
}

Status Scheduler::check_new(const Request& r) const {
  const Request* request = &r;
  if (request->num_prompt_tokens == 0) {
    return Status::invalid_argument(fmt::format("request '{}' has an empty prompt; send at least one token", request->id));
  }
  if (request->num_prompt_tokens >= config_.max_model_len) {
    return Status::invalid_argument(fmt::format(
        "request '{}' has a prompt of {} tokens, but this engine holds at most {} tokens per sequence (the smaller "
        "of the model's context and the KV cache), one of them for the first generated token; shorten the prompt "
        "or give the KV cache more memory",
        request->id, request->num_prompt_tokens, config_.max_model_len));
  }
  if (requests_.count(request->id)) {
    return Status::already_exists(fmt::format("request id '{}' is already in use; use a unique id", request->id));
  }
  return ok_status();
}

RequestOutput Scheduler::add_prefilled(std::unique_ptr<Request> request, const SampledToken& first) {
  Request* r = request.get();
  KOI_CHECK(r->num_computed_tokens == r->num_prompt_tokens && r->num_output_tokens() == 0);
  requests_.emplace(r->id, std::move(request));
  r->status = RequestStatus::kRunning;
  running_.insert(std::upper_bound(running_.begin(), running_.end(), r, by_order), r);
  RequestOutput out;
  out.request_id = r->id;
  const bool finished = append_token(*r, first, out);
  kv_.cache_full_blocks(*r);
  if (finished) finish(r, out.finish_reason);
  return out;
}

void Scheduler::insert_waiting(Request* request) {
  request->status = RequestStatus::kWaiting;
  waiting_.insert(std::upper_bound(waiting_.begin(), waiting_.end(), request, by_order), request);
}

void Scheduler::preempt(Request* request) {
  kv_.free(*request);
  request->num_computed_tokens = 0;
  request->spec_token_ids.clear();
  ++request->num_preemptions;
  ++num_preemptions_;
  insert_waiting(request);
}

SchedulerOutput Scheduler::schedule() {
  SchedulerOutput out;
  int budget = config_.max_num_batched_tokens;

  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    Request* r = running_[i];
    const int wanted = r->num_tokens() + static_cast<int>(r->spec_token_ids.size()) - r->num_computed_tokens;
    const int num_new = std::min(wanted, budget);
    bool preempted_self = false;
    while (!kv_.allocate_slots(*r, num_new)) {
      Request* victim = running_.back();
      running_.pop_back();
      preempt(victim);
      out.preempted.push_back(victim->id);
      if (victim == r) {
        preempted_self = true;
        break;
      }
    }
    if (preempted_self) break;
    // Speculative tokens past the budget are dropped.
    r->spec_token_ids.resize(static_cast<size_t>(std::max(0, r->num_computed_tokens + num_new - r->num_tokens())));
    out.scheduled.push_back({r, num_new});
    budget -= num_new;
  }

  while (out.preempted.empty() && !waiting_.empty() && budget > 0 &&
         static_cast<int>(running_.size()) < config_.max_num_seqs) {
    Request* r = waiting_.front();
    const ComputedBlocks computed = kv_.get_computed_blocks(*r);
    const int num_new = std::min(r->num_tokens() - computed.num_tokens, budget);
    if (!kv_.allocate_slots(*r, num_new, computed)) break;
    waiting_.pop_front();
    r->num_computed_tokens = computed.num_tokens;
    if (r->num_cached_prompt_tokens < 0) r->num_cached_prompt_tokens = computed.num_tokens;
    r->status = RequestStatus::kRunning;
    running_.insert(std::upper_bound(running_.begin(), running_.end(), r, by_order), r);
    out.scheduled.push_back({r, num_new});
    budget -= num_new;
  }
  out.num_batched_tokens = config_.max_num_batched_tokens - budget;
  return out;
}

bool Scheduler::append_token(Request& r, const SampledToken& token, RequestOutput& out) {
  if (r.matcher && !r.matcher->accept(token.token)) {
    // Only when no token could continue the grammar, so sampling went unmasked.
    out.text += r.stop_checker.finish();
    out.finished = true;
    out.finish_reason = FinishReason::kStop;
    return true;
  }
  r.token_ids.push_back(token.token);
  out.token_ids.push_back(token.token);
  if (r.params.logprobs >= 0) out.logprobs.push_back(token);
  FinishReason reason = FinishReason::kNone;
  if ((!r.params.ignore_eos && contains(config_.eos_token_ids, token.token)) ||
      contains(r.params.stop_token_ids, token.token)) {
    reason = FinishReason::kStop;
  } else if (r.decoder) {
    out.text += r.stop_checker.push(r.decoder->push(token.token));
    if (r.stop_checker.stopped()) reason = FinishReason::kStop;
  }
  // A constrained request ends where its document is complete and nothing may follow.
  if (reason == FinishReason::kNone && r.matcher && r.matcher->finished()) reason = FinishReason::kStop;
  if (reason == FinishReason::kNone &&
      (r.num_output_tokens() >= r.params.max_tokens || r.num_tokens() >= config_.max_model_len)) {
    reason = FinishReason::kLength;
    // An incomplete UTF-8 character at the length limit comes out as U+FFFD.
    if (r.decoder) out.text += r.stop_checker.push(r.decoder->flush());
  }
  if (reason == FinishReason::kNone) return false;
  out.text += r.stop_checker.finish();
  out.finished = true;
  out.finish_reason = reason;
  return true;
}

std::vector<RequestOutput> Scheduler::update(const SchedulerOutput& output,
                                             std::span<const std::vector<SampledToken>> new_tokens) {
  KOI_CHECK(new_tokens.size() == output.scheduled.size());
  std::vector<RequestOutput> outputs;
  for (size_t i = 0; i < output.scheduled.size(); ++i) {
    Request& r = *output.scheduled[i].request;
    const std::vector<SampledToken>& tokens = new_tokens[i];
    const int num_drafts = static_cast<int>(r.spec_token_ids.size());
    const int num_accepted = num_drafts > 0 ? static_cast<int>(tokens.size()) - 1 : 0;
    r.num_computed_tokens += output.scheduled[i].num_tokens - num_drafts + num_accepted;
    r.spec_token_ids.clear();
    RequestOutput out;
    out.request_id = r.id;
    bool finished = false;
    for (const SampledToken& token : tokens) {
      finished = append_token(r, token, out);
      if (finished) break;
    }
    kv_.cache_full_blocks(r);
    if (!out.token_ids.empty() || finished) {
      if (!r.reported_cached) out.num_cached_tokens = std::max(r.num_cached_prompt_tokens, 0);
      r.reported_cached = true;
      outputs.push_back(std::move(out));
    }
    if (finished) finish(&r, outputs.back().finish_reason);
  }
  return outputs;
}

void Scheduler::finish(Request* request, FinishReason reason) {
  if (request->status == RequestStatus::kRunning) {
    running_.erase(std::find(running_.begin(), running_.end(), request));
  } else {
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), request));
  }
  kv_.free(*request);
  request->status = RequestStatus::kFinished;
  request->finish_reason = reason;
  requests_.erase(request->id);
}

Status Scheduler::abort(const std::string& request_id) {
  auto it = requests_.find(request_id);
  if (it == requests_.end()) {
    return Status::not_found(fmt::format("no unfinished request with id '{}'", request_id));
  }
  RequestOutput out;
  out.request_id = request_id;
  out.finished = true;
  out.finish_reason = FinishReason::kAbort;
  aborted_.push_back(std::move(out));
  finish(it->second.get(), FinishReason::kAbort);
  return ok_status();
}

std::vector<RequestOutput> Scheduler::take_aborted() {
  std::vector<RequestOutput> out;
  out.swap(aborted_);
  return out;
}

const Request* Scheduler::find(const std::string& request_id) const {
  auto it = requests_.find(request_id);
  return it == requests_.end() ? nullptr : it->second.get();
}

}  // namespace koi::engine
