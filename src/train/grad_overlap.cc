#include "train/grad_overlap.h"

#include <algorithm>

namespace koi::train {

void GradientOverlap::backward(float loss_scale) {
  model_->set_unit_stream(this);
  model_->backward(loss_scale);
  model_->set_unit_stream(nullptr);
}

float* GradientOverlap::backward_grads(int unit) {
  const std::vector<Range> runs = model_->unit_pieces(unit);
  float* grads = model_->grads().data();
  if (runs.size() == 1) return grads + runs[0].begin;  // backward adds into it in place
  root_.clear();
  for (const Range& r : runs) root_.insert(root_.end(), grads + r.begin, grads + r.end);
  return root_.data();
}

void GradientOverlap::backward_done(int unit) {
  const std::vector<Range> runs = model_->unit_pieces(unit);
  float* grads = model_->grads().data();
  if (runs.size() > 1) {  // the root's buffer back into grads()
    int64_t position = 0;
    for (const Range& r : runs) {
      std::copy_n(root_.begin() + position, r.size(), grads + r.begin);
      position += r.size();
    }
  }
  const std::string what =
      "allreduce grads " + (unit + 1 == model_->num_units() ? std::string("root") : "layer " + std::to_string(unit));
  for (const Range& r : runs) tickets_.push_back(data_->start_allreduce_sum(grads + r.begin, r.size(), what));
  data_->progress();
}

Status GradientOverlap::finish() {
  std::vector<int64_t> tickets;
  tickets.swap(tickets_);
  // After a failure (the watchdog's DeadlineExceeded) the rest are not waited for: each would
  // wait out the timeout again, and the process aborts (collectives.h).
  for (int64_t ticket : tickets) KOI_RETURN_IF_ERROR(data_->wait(ticket));
  return ok_status();
}

}  // namespace koi::train
