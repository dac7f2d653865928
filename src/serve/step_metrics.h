// EngineStepMetrics: what each engine step that ran the model did (engine::StepStats), in
// koi serve's registry beside ServeMetrics:
//   koi:engine_steps_total                              model-running steps
//   koi:engine_step_batch_requests{phase}               histogram: requests per step, phase prefill|decode
//   koi:engine_step_batch_tokens{phase}                 histogram: tokens computed per step
//   koi:engine_step_schedule_seconds                    histogram: the scheduler's time
//   koi:engine_step_forward_seconds                     histogram: batch building and the forward pass
//   koi:engine_step_duration_seconds                    histogram: the whole step (sampling included)
// Every series carries model_name. observe() is called by the engine loop's thread.
#pragma once

#include <string>

#include "base/metrics.h"
#include "engine/engine.h"

namespace koi::serve {

class EngineStepMetrics {
 public:
  EngineStepMetrics(metrics::Registry& registry, const std::string& model_name);
  // Records `step` unless it was already recorded (same step.number) or no step ran yet.
  void observe(const engine::StepStats& step);

 private:
  int64_t last_number_ = 0;
  metrics::Counter& steps_;
  metrics::Histogram& prefill_requests_;
  metrics::Histogram& decode_requests_;
  metrics::Histogram& prefill_tokens_;
  metrics::Histogram& decode_tokens_;
  metrics::Histogram& models_;
  metrics::Histogram& schedule_seconds_;
  metrics::Histogram& forward_seconds_;
  metrics::Histogram& duration_seconds_;
};

}  // namespace koi::serve
