#include "engine/step_trace.h"

#include <fmt/format.h>

#include <algorithm>

namespace koi::engine {

StepTrace::StepTrace(trace::Recorder* recorder) : recorder_(recorder), track_busy_(1, true) {
  recorder_->name_track(0, "engine steps");
}

void StepTrace::span(const char* name, int64_t begin, int64_t end, int track, const std::string& args) {
  recorder_->record(name, "engine", trace::Recorder::at_ns(begin), trace::Recorder::at_ns(end), track, args);
}

int StepTrace::take_track() {
  for (size_t t = 1; t < track_busy_.size(); ++t) {
    if (!track_busy_[t]) {
      track_busy_[t] = true;
      return static_cast<int>(t);
    }
  }
  track_busy_.push_back(true);
  const int track = static_cast<int>(track_busy_.size() - 1);
  recorder_->name_track(track, fmt::format("requests {}", track));
  return track;
}

void StepTrace::added(const std::string& id, int num_prompt_tokens, int64_t now) {
  Live r;
  r.track = take_track();
  r.num_prompt_tokens = num_prompt_tokens;
  r.added = now;
  live_[id] = r;
}

void StepTrace::scheduled(const SchedulerOutput& plan, int64_t now) {
  for (const ScheduledRequest& sr : plan.scheduled) {
    auto it = live_.find(sr.request->id);
    if (it != live_.end() && it->second.scheduled < 0) it->second.scheduled = now;
  }
}

void StepTrace::step(const StepInstants& at, const StepStats& s) {
  span("step", at.start, at.end, 0,
       fmt::format("\"step\":{},\"prefill_requests\":{},\"prefill_tokens\":{},\"decode_requests\":{},"
                   "\"decode_tokens\":{}",
                   s.number, s.num_prefill_requests, s.num_prefill_tokens, s.num_decode_requests, s.num_decode_tokens));
  span("schedule", at.start, at.scheduled, 0);
  span("forward", at.scheduled, at.forwarded, 0);
  span("sample", at.forwarded, at.sampled, 0);
  span("update", at.sampled, at.end, 0);
}

void StepTrace::outputs(const std::vector<RequestOutput>& outputs, int64_t now) {
  for (const RequestOutput& out : outputs) {
    auto it = live_.find(out.request_id);
    if (it == live_.end()) continue;
    Live& r = it->second;
    r.num_output_tokens += static_cast<int>(out.token_ids.size());
    if (!out.token_ids.empty() && r.first_token < 0) r.first_token = now;
    if (!out.finished) continue;
    finish(it->first, r, out.finish_reason, now);
    live_.erase(it);
  }
}

// The request's span and its phases; a phase it never reached has no span.
void StepTrace::finish(const std::string& id, Live& r, FinishReason reason, int64_t now) {
  span("request", r.added, now, r.track,
       fmt::format("\"id\":{},\"prompt_tokens\":{},\"output_tokens\":{},\"finish_reason\":{}", trace::quote(id),
                   r.num_prompt_tokens, r.num_output_tokens, trace::quote(std::string(finish_reason_name(reason)))));
  // A request whose prompt's KV came from another engine has its first token before it is
  // first scheduled, and no prefill here.
  int64_t waited = now;
  if (r.scheduled >= 0) waited = std::min(waited, r.scheduled);
  if (r.first_token >= 0) waited = std::min(waited, r.first_token);
  span("waiting", r.added, waited, r.track);
  if (r.scheduled >= 0 && (r.first_token < 0 || r.scheduled <= r.first_token)) {
    span("prefill", r.scheduled, r.first_token < 0 ? now : r.first_token, r.track);
  }
  if (r.first_token >= 0 && r.first_token < now) span("decode", r.first_token, now, r.track);
  track_busy_[static_cast<size_t>(r.track)] = false;
}

}  // namespace koi::engine
