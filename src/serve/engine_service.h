// EngineService: the engine thread of `koi serve`. One thread owns the Engine (and through it
// the ModelRunner) and loops: take new requests and aborts from the inbound queue, step()
// while there is work, hand each RequestOutput to its request's Sink, sleep on a condition
// variable when idle. HTTP threads only call the thread-safe methods below; no JSON and no
// network object ever reaches the engine thread.
//
// While requests wait for their KV from a prefill worker (engine::KvImport), the loop looks
// at them every 0.5 ms instead of sleeping until new work arrives.
//
// The engine's outputs already carry their text (the engine detokenizes and applies stop
// strings); the service routes them and records the request-level metrics.
//
// Failure: submit() refuses work with kInvalidArgument when the submission alone holds more
// requests than the waiting queue ever can (retrying cannot help), kResourceExhausted when
// the queue is too full for it now, and kUnavailable once draining has begun. A request the engine rejects gets one Event with
// the error. A failed step is retried once; a second failure ends every request with an
// internal error event.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/clock.h"
#include "base/status.h"
#include "engine/engine.h"
#include "serve/kv_events.h"
#include "serve/metrics.h"

namespace koi::serve {

// One delivery to a submission: an output of its request number `index`, or an error that
// ended that request.
struct Event {
  int index = 0;
  engine::RequestOutput output;
  Status error;
};
// Called on the engine thread; must not block (it hands the event to another thread).
using Sink = std::function<void(Event)>;

class EngineService {
 public:
  // `engine` and `metrics` must outlive the service. max_waiting bounds the requests
  // accepted but not yet running.
  EngineService(engine::Engine& engine, ServeMetrics& metrics, int max_waiting,
                const Clock& clock = SystemClock::instance());
  ~EngineService();  // stops the thread; unfinished requests are dropped

  // Before start(): after every step the engine's prefix-cache changes go to `log` (the engine
  // must be built with publish_kv_events). `log` must outlive the service.
  void publish_kv_events(KvEventLog* log) { kv_events_ = log; }
  void start();
  // Queues requests (each with a unique id) that report to `sink`. Thread-safe. `taken_ns`,
  // when given, is set to the clock's now_ns() when the engine thread takes them (a profile's
  // "queued" span ends there: serve/http_trace.h).
  Status submit(std::vector<engine::RequestSpec> requests, Sink sink,
                std::shared_ptr<std::atomic<int64_t>> taken_ns = nullptr);
  // Ends requests early (finish reason "abort"); unknown or finished ids are ignored. Thread-safe.
  void abort(std::vector<std::string> request_ids);
  // Refuses new work from now on; with cancel, also aborts everything unfinished. Thread-safe.
  void drain(bool cancel);
  // Requests submitted and not yet finished. Thread-safe.
  int num_unfinished() const;
  // Stops the thread and waits for it.
  void stop();

 private:
  struct Live {
    std::shared_ptr<Sink> sink;
    int index = 0;
    int num_prompt_tokens = 0;
    int num_output_tokens = 0;
    int64_t arrival_ns = 0;
    int64_t last_token_ns = 0;
  };
  struct Submission {
    std::vector<engine::RequestSpec> requests;
    std::shared_ptr<Sink> sink;
    int64_t arrival_ns;
    std::shared_ptr<std::atomic<int64_t>> taken_ns;
  };

  void loop();
  void admit(Submission s);
  void deliver(engine::RequestOutput out, int64_t step_start_ns);
  void fail_all(const Status& status);
  void update_gauges();

  engine::Engine& engine_;
  ServeMetrics& metrics_;
  const int max_waiting_;
  const Clock& clock_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Submission> inbound_;       // guarded by mu_
  std::vector<std::string> aborts_;      // guarded by mu_
  bool cancel_all_ = false;              // guarded by mu_
  bool draining_ = false;                // guarded by mu_
  bool stopping_ = false;                // guarded by mu_
  int num_unfinished_ = 0;               // guarded by mu_
  int num_running_ = 0;                  // guarded by mu_: the engine's running count after the last step

  std::unordered_map<std::string, Live> live_;  // engine thread only
  KvEventLog* kv_events_ = nullptr;
  std::thread thread_;
};

}  // namespace koi::serve
