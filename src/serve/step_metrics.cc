#include "serve/step_metrics.h"

#include <vector>

namespace koi::serve {
namespace {

const std::vector<double> kCountBuckets = {0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192};
const std::vector<double> kStepBuckets = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                          0.05,   0.1,     0.25,   0.5,   1.0,    2.5,   5.0};

}  // namespace

EngineStepMetrics::EngineStepMetrics(metrics::Registry& r, const std::string& model)
    : steps_(r.counter("koi:engine_steps", "Engine steps that ran the model.", {"model_name"}).labels({model})),
      prefill_requests_(r.histogram("koi:engine_step_batch_requests", "Requests in each engine step, by phase.",
                                    {"model_name", "phase"}, kCountBuckets)
                            .labels({model, "prefill"})),
      decode_requests_(r.histogram("koi:engine_step_batch_requests", "Requests in each engine step, by phase.",
                                   {"model_name", "phase"}, kCountBuckets)
                           .labels({model, "decode"})),
      prefill_tokens_(r.histogram("koi:engine_step_batch_tokens", "Tokens computed in each engine step, by phase.",
                                  {"model_name", "phase"}, kCountBuckets)
                          .labels({model, "prefill"})),
      decode_tokens_(r.histogram("koi:engine_step_batch_tokens", "Tokens computed in each engine step, by phase.",
                                 {"model_name", "phase"}, kCountBuckets)
                         .labels({model, "decode"})),
      models_(r.histogram("koi:engine_step_batch_models",
                          "Models among the requests of each engine step: the base and each LoRA adapter.",
                          {"model_name"}, kCountBuckets)
                  .labels({model})),
      schedule_seconds_(r.histogram("koi:engine_step_schedule_seconds", "Scheduler time of each engine step.",
                                    {"model_name"}, kStepBuckets)
                            .labels({model})),
      forward_seconds_(r.histogram("koi:engine_step_forward_seconds",
                                   "Batch building and forward pass time of each engine step.", {"model_name"},
                                   kStepBuckets)
                           .labels({model})),
      duration_seconds_(r.histogram("koi:engine_step_duration_seconds", "Wall time of each engine step.",
                                    {"model_name"}, kStepBuckets)
                            .labels({model})) {}

void EngineStepMetrics::observe(const engine::StepStats& step) {
  if (step.number == 0 || step.number == last_number_) return;
  last_number_ = step.number;
  steps_.inc();
  prefill_requests_.observe(step.num_prefill_requests);
  decode_requests_.observe(step.num_decode_requests);
  prefill_tokens_.observe(step.num_prefill_tokens);
  decode_tokens_.observe(step.num_decode_tokens);
  models_.observe(step.num_models);
  schedule_seconds_.observe(step.schedule_seconds);
  forward_seconds_.observe(step.forward_seconds);
  duration_seconds_.observe(step.total_seconds);
}

}  // namespace koi::serve
