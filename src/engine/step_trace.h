// StepTrace: the engine's profile on a trace::Recorder (`koi serve --profile`, `koi bench
// offline --profile`), fed by Engine::step() with the instants it already measures for
// StepStats, so each "step" span lasts exactly the step's total_seconds.
//
// Track 0, "engine steps": per step that ran the model a "step" span (args: step number,
// prefill and decode requests and tokens) holding, in order, "schedule" (Scheduler::schedule),
// "forward" (batch building and the model's forward; the runner's per-layer and per-op spans
// nest inside it), "sample" (sampling and draft verification) and "update" (Scheduler::update,
// detokenizing, stop strings, KV export and the next step's drafts).
// Tracks 1, 2, ... "requests N": a "request" span per request from add_request to its final
// output (args: id, prompt and output tokens, finish reason) holding "waiting" (until first
// scheduled), "prefill" (until its first token) and "decode" (the rest). A track carries one
// request at a time, so its spans nest; the engine reuses the lowest free track.
// Requests still unfinished when the trace is read have no span.
//
// Instants are engine clock readings (nanoseconds of SystemClock, see trace::Recorder::at_ns).
// Engine thread only, like the Engine.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/trace.h"
#include "engine/engine.h"

namespace koi::engine {

// The instants of one step() that ran the model (engine clock nanoseconds).
struct StepInstants {
  int64_t start = 0, scheduled = 0, forwarded = 0, sampled = 0, end = 0;
};

class StepTrace {
 public:
  // `recorder` must outlive this object; names track 0.
  explicit StepTrace(trace::Recorder* recorder);

  // A request accepted by add_request at `now`.
  void added(const std::string& id, int num_prompt_tokens, int64_t now);
  // The step's plan: requests scheduled for the first time stop waiting at `now`.
  void scheduled(const SchedulerOutput& plan, int64_t now);
  // The step's span and its parts.
  void step(const StepInstants& at, const StepStats& stats);
  // Outputs returned at `now`: first tokens end prefills, final outputs end requests.
  void outputs(const std::vector<RequestOutput>& outputs, int64_t now);

 private:
  struct Live {
    int track = 0;
    int num_prompt_tokens = 0, num_output_tokens = 0;
    int64_t added = 0, scheduled = -1, first_token = -1;
  };
  void span(const char* name, int64_t begin, int64_t end, int track, const std::string& args = "");
  int take_track();
  void finish(const std::string& id, Live& r, FinishReason reason, int64_t now);

  trace::Recorder* recorder_;
  std::unordered_map<std::string, Live> live_;
  std::vector<bool> track_busy_;  // request tracks 1.. (index 0 unused)
};

}  // namespace koi::engine
