#include "serve/engine_service.h"

#include <chrono>

#include <fmt/format.h>

#include "base/logging.h"

namespace koi::serve {

namespace {
constexpr std::chrono::microseconds kImportPoll{500};
}  // namespace

EngineService::EngineService(engine::Engine& engine, ServeMetrics& metrics, int max_waiting, const Clock& clock)
    : engine_(engine), metrics_(metrics), max_waiting_(max_waiting), clock_(clock) {}

EngineService::~EngineService() { stop(); }

void EngineService::start() { thread_ = std::thread([this] { loop(); }); }

void EngineService::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

Status EngineService::submit(std::vector<engine::RequestSpec> requests, Sink sink,
                             std::shared_ptr<std::atomic<int64_t>> taken_ns) {
  const int count = static_cast<int>(requests.size());
  {
    std::lock_guard lock(mu_);
    if (draining_ || stopping_) return Status::unavailable("the server is shutting down; retry on another replica");
    if (count > max_waiting_) {
      return Status::invalid_argument(fmt::format(
          "this request holds {} sequences (prompts times n), more than the server ever queues at once "
          "(--max-waiting {}); send at most {} per request",
          count, max_waiting_, max_waiting_));
    }
    const int queued = num_unfinished_ - num_running_;
    if (queued + count > max_waiting_) {
      return Status::resource_exhausted(fmt::format(
          "the server is at capacity ({} requests waiting, limit {}); retry after a short wait", queued, max_waiting_));
    }
    num_unfinished_ += count;
    inbound_.push_back({std::move(requests), std::make_shared<Sink>(std::move(sink)), clock_.now_ns(),
                        std::move(taken_ns)});
  }
  cv_.notify_one();
  return ok_status();
}

void EngineService::abort(std::vector<std::string> request_ids) {
  {
    std::lock_guard lock(mu_);
    for (auto& id : request_ids) aborts_.push_back(std::move(id));
  }
  cv_.notify_one();
}

void EngineService::drain(bool cancel) {
  {
    std::lock_guard lock(mu_);
    draining_ = true;
    cancel_all_ |= cancel;
  }
  cv_.notify_one();
}

int EngineService::num_unfinished() const {
  std::lock_guard lock(mu_);
  return num_unfinished_;
}

void EngineService::loop() {
  int failed_steps = 0;
  for (;;) {
    std::deque<Submission> submissions;
    std::vector<std::string> aborts;
    bool cancel = false;
    {
      std::unique_lock lock(mu_);
      const auto ready = [&] {
        return stopping_ || !inbound_.empty() || !aborts_.empty() || cancel_all_ || engine_.has_work();
      };
      // Requests waiting for KV from a prefill worker need a look now and then (their
      // transfer completes, fails or runs out of lease on another thread).
      if (engine_.num_importing() > 0) {
        cv_.wait_for(lock, kImportPoll, ready);
      } else {
        cv_.wait(lock, ready);
      }
      if (stopping_) return;
      submissions.swap(inbound_);
      aborts.swap(aborts_);
      std::swap(cancel, cancel_all_);
    }
    for (Submission& s : submissions) admit(std::move(s));
    if (cancel) {
      for (const auto& [id, live] : live_) aborts.push_back(id);
    }
    bool aborted = false;
    for (const std::string& id : aborts) aborted |= engine_.abort(id).ok();
    // Aborted requests report their final output from the next step, even when idle.
    if (!engine_.has_unfinished() && !aborted) continue;


    const int64_t step_start = clock_.now_ns();
    auto outputs = engine_.step();
    if (!outputs.ok()) {
      log::error("engine step failed: {}", outputs.status().to_string());
      if (++failed_steps >= 2) fail_all(outputs.status());
      continue;
    }
    failed_steps = 0;
    metrics_.engine_step.observe(engine_.last_step());
    for (engine::RequestOutput& out : *outputs) deliver(std::move(out), step_start);
    if (kv_events_) kv_events_->append(engine_.take_kv_events());
    update_gauges();
  }
}

void EngineService::admit(Submission s) {
  if (s.taken_ns) s.taken_ns->store(clock_.now_ns());
  for (size_t i = 0; i < s.requests.size(); ++i) {
    engine::RequestSpec& spec = s.requests[i];
    Live live;
    live.sink = s.sink;
    live.index = static_cast<int>(i);
    live.num_prompt_tokens = static_cast<int>(spec.prompt.size());
    live.arrival_ns = s.arrival_ns;
    const std::string id = spec.id;
    live_.emplace(id, std::move(live));
    if (Status st = engine_.add_request(std::move(spec)); !st.ok()) {
      live_.erase(id);
      {
        std::lock_guard lock(mu_);
        --num_unfinished_;
      }
      Event ev;
      ev.index = static_cast<int>(i);
      ev.output.request_id = id;
      ev.output.finished = true;
      ev.error = st;
      (*s.sink)(std::move(ev));
    }
  }
}

void EngineService::deliver(engine::RequestOutput out, int64_t step_start_ns) {
  auto it = live_.find(out.request_id);
  if (it == live_.end()) return;
  Live& live = it->second;
  const int64_t now = clock_.now_ns();
  const int num_new = static_cast<int>(out.token_ids.size());
  if (num_new > 0) {
    if (live.num_output_tokens == 0) {
      metrics_.time_to_first_token.observe((now - live.arrival_ns) * 1e-9);
      metrics_.request_queue_time.observe(std::max<int64_t>(0, step_start_ns - live.arrival_ns) * 1e-9);
    } else {
      const double gap = (now - live.last_token_ns) * 1e-9 / num_new;
      for (int t = 0; t < num_new; ++t) metrics_.inter_token_latency.observe(gap);
    }
    live.num_output_tokens += num_new;
    live.last_token_ns = now;
    metrics_.generation_tokens.inc(num_new);
  }
  std::shared_ptr<Sink> sink = live.sink;
  Event ev;
  ev.index = live.index;
  if (out.finished) {
    metrics_.e2e_request_latency.observe((now - live.arrival_ns) * 1e-9);
    metrics_.prompt_tokens.inc(live.num_prompt_tokens);
    metrics_.request_prompt_tokens.observe(live.num_prompt_tokens);
    metrics_.request_generation_tokens.observe(live.num_output_tokens);
    metrics_.request_success(std::string(engine::finish_reason_name(out.finish_reason))).inc();
    live_.erase(it);
    std::lock_guard lock(mu_);
    --num_unfinished_;
  }
  ev.output = std::move(out);
  (*sink)(std::move(ev));
}

void EngineService::fail_all(const Status& status) {
  for (auto& [id, live] : live_) {
    (void)engine_.abort(id);
    Event ev;
    ev.index = live.index;
    ev.output.request_id = id;
    ev.output.finished = true;
    ev.error = Status::internal("the engine failed: " + status.message());
    (*live.sink)(std::move(ev));
  }
  {
    std::lock_guard lock(mu_);
    num_unfinished_ -= static_cast<int>(live_.size());
  }
  live_.clear();
}

void EngineService::update_gauges() {
  const engine::EngineStats s = engine_.stats();
  metrics_.num_requests_running.set(s.num_running);
  metrics_.num_requests_waiting.set(s.num_waiting);
  metrics_.kv_cache_usage_perc.set(s.kv_usage);
  metrics_.prefix_cache_queries.set(static_cast<double>(s.prefix_cache_queried_tokens));
  metrics_.prefix_cache_hits.set(static_cast<double>(s.prefix_cache_hit_tokens));
  metrics_.num_preemptions.set(static_cast<double>(s.num_preemptions));
  metrics_.spec_decode_num_draft_tokens.set(static_cast<double>(s.num_draft_tokens));
  metrics_.spec_decode_num_accepted_tokens.set(static_cast<double>(s.num_accepted_tokens));
  metrics_.kv_transfer_imports.set(static_cast<double>(s.num_kv_imports));
  metrics_.kv_transfer_fallbacks.set(static_cast<double>(s.num_kv_fallbacks));
  metrics_.kv_transfer_exports.set(static_cast<double>(s.num_kv_exports));
  std::lock_guard lock(mu_);
  num_running_ = s.num_running;
}

}  // namespace koi::serve
