#include "train/parallel_strategy.h"

namespace koi::train {

Result<double> ParallelStrategy::forward_backward(const int32_t* inputs, const int32_t* targets, int B, int T,
                                                  float loss_scale, bool last_micro_batch) {
  if (pipeline != nullptr) {
    const trace::Span span(trace, "pipeline schedule", "compute");
    return pipeline->train_batch(inputs, targets, B, T, loss_scale);
  }
  double loss = 0.0;
  {
    const trace::Span span(trace, "forward", "compute");
    loss = (model->forward(inputs, targets, B, T) + model->aux_loss()) * static_cast<float>(B);
  }
  const trace::Span span(trace, "backward", "compute");
  if (overlap != nullptr && last_micro_batch) {
    overlap->backward(loss_scale);
  } else {
    model->backward(loss_scale);
  }
  KOI_RETURN_IF_ERROR(model->parallel_status());
  return loss;
}

Status ParallelStrategy::reduce_grads(int64_t bucket_floats) {
  if (zero != nullptr) {
    const trace::Span span(trace, "wait for gradient reductions", "collective");
    return zero->finish_backward();
  }
  if (overlap != nullptr && overlap->started()) {
    const trace::Span span(trace, "wait for gradient allreduces", "collective");
    return overlap->finish();
  }
  if (pipeline != nullptr && data->size() == 1) return ok_status();  // the stages' gradients are disjoint
  const trace::Span span(trace, "allreduce grads", "collective");
  return allreduce_grads(*data, model->trainable_grads(), bucket_floats);
}

Result<float> ParallelStrategy::clip_grad_norm(float max_norm) {
  const trace::Span span(trace, "clip grad norm", "optimizer");
  if (zero != nullptr) return zero->clip_grad_norm(max_norm);
  if (pipeline != nullptr) return pipeline->clip_grad_norm(max_norm);
  if (tp != nullptr) return tp->clip_grad_norm(model->trainable_grads(), max_norm);
  return train::clip_grad_norm(model->trainable_grads(), max_norm);
}

Status ParallelStrategy::step(float lr, ThreadPool* pool) {
  const trace::Span span(trace, "optimizer", "optimizer");
  if (zero != nullptr) return zero->step(lr, pool);
  if (pipeline != nullptr) return pipeline->step(lr, pool);
  return opt->step(model->trainable_params(), model->trainable_grads(), lr, pool);
}

Status ParallelStrategy::with_full_state(const std::function<Status(AdamW&)>& use) {
  if (pipeline != nullptr) return pipeline->with_full_state(use);
  return zero != nullptr ? zero->with_full_state(use) : opt->with_full_state(use);
}

Result<std::vector<double>> ParallelStrategy::bubble() {
  if (pipeline == nullptr) return std::vector<double>();
  return pipeline->bubble();
}

}  // namespace koi::train
