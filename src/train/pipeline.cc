#include "train/pipeline.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>

#include "base/check.h"
#include "train/linear.h"

namespace koi::train {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The offset of layer l's first tensor in the flat parameters (the total for l == n_layers).
int64_t layer_offset(const std::vector<ParamTensor>& layout, int l, int n_layers) {
  if (l == n_layers) return layout.back().offset + layout.back().size;
  const std::string first = "model.layers." + std::to_string(l) + ".input_layernorm.weight";
  for (const ParamTensor& t : layout) {
    if (t.name == first) return t.offset;
  }
  KOI_CHECK(false && "layer without input_layernorm");
  return 0;
}

// Every stage's slice of the flat parameters: stage s from its first layer's first tensor
// (0 for the first: the embedding) to the next stage's (the end for the last: the final norm
// and the classifier).
std::vector<Range> stage_param_ranges(const std::vector<ParamTensor>& layout, int n_layers, int stages) {
  std::vector<Range> out;
  for (int s = 0; s < stages; ++s) {
    const Range layers = stage_layers(n_layers, stages, s);
    out.push_back({s == 0 ? 0 : layer_offset(layout, static_cast<int>(layers.begin), n_layers),
                   layer_offset(layout, s + 1 == stages ? n_layers : static_cast<int>(layers.end), n_layers)});
  }
  return out;
}

}  // namespace

Range stage_layers(int n_layers, int stages, int stage) { return split_range(n_layers, stages, stage); }

Result<Pipeline> Pipeline::create(Communicator* comm, LlamaTrain* model, const PipelineConfig& config,
                                  const AdamWConfig& adam, int batch_size) {
  const int n_layers = model->config().n_layers;
  KOI_CHECK(comm->size() == config.stages);
  if (n_layers < config.stages) {
    return Status::invalid_argument("the model has " + std::to_string(n_layers) + " layers, fewer than the " +
                                    std::to_string(config.stages) + " pipeline stages; use --pp " +
                                    std::to_string(n_layers) + " or less");
  }
  if (config.micro_batches < 1 || batch_size % config.micro_batches != 0) {
    return Status::invalid_argument("train.batch_size " + std::to_string(batch_size) + " does not split into " +
                                    std::to_string(config.micro_batches) +
                                    " micro-batches; use a --pp-microbatches that divides it");
  }
  if (model->lora() != nullptr) {
    return Status::unsupported("pipeline parallel LoRA training is not supported; train the adapters without --pp");
  }
  const int stage = comm->rank();
  const Range layers = stage_layers(n_layers, config.stages, stage);
  model->set_layer_range(static_cast<int>(layers.begin), static_cast<int>(layers.end));
  return Pipeline(comm, model, config, adam, stage_param_ranges(model->layout(), n_layers, config.stages));
}

Pipeline::Pipeline(Communicator* comm, LlamaTrain* model, PipelineConfig config, const AdamWConfig& adam,
                   std::vector<Range> stage_params)
    : comm_(comm),
      model_(model),
      config_(config),
      adam_(adam),
      stage_(comm->rank()),
      params_(stage_params[static_cast<size_t>(comm->rank())]),
      layout_(clip_layout(model->layout(), params_)),
      opt_(adam, params_.size()) {
  for (const Range& r : stage_params) stage_sizes_.push_back(r.size());
}

int64_t Pipeline::tied_floats() const {
  const model::ModelConfig& c = model_->config();
  return c.tied_embeddings && config_.stages > 1 ? int64_t{c.n_vocab} * c.dim : 0;
}

Status Pipeline::recv_timed(float* data, int64_t n, int src, const std::string& what) {
  const auto t0 = std::chrono::steady_clock::now();
  Status s = comm_->recv(data, n, src, what);
  idle_s_ += seconds_since(t0);
  return s;
}

Status Pipeline::forward_micro(const int32_t* inputs, const int32_t* targets, int micro, int mb, int T, double* loss) {
  const int64_t offset = int64_t{micro} * mb * T, n = int64_t{mb} * T * model_->config().dim;
  LlamaTrain::SavedActivations acts;
  if (!spare_.empty()) acts = std::move(spare_.back()), spare_.pop_back();
  model_->swap_activations(acts);  // this micro-batch's set in, the model's own out
  if (!first()) {
    KOI_RETURN_IF_ERROR(recv_timed(model_->stage_input(mb, T), n, stage_ - 1,
                                   "recv activations of micro-batch " + std::to_string(micro)));
  }
  const float ce = model_->forward(inputs + offset, targets + offset, mb, T);  // 0 before the last stage
  *loss += (static_cast<double>(ce) + model_->aux_loss()) * mb;
  if (!last()) {
    KOI_RETURN_IF_ERROR(comm_->send(model_->stage_output(), n, stage_ + 1,
                                    "send activations of micro-batch " + std::to_string(micro)));
  }
  model_->swap_activations(acts);
  held_[static_cast<size_t>(micro)] = std::move(acts);
  return ok_status();
}

Status Pipeline::backward_micro(int micro, int mb, int T, float loss_scale) {
  const int64_t n = int64_t{mb} * T * model_->config().dim;
  LlamaTrain::SavedActivations acts = std::move(held_[static_cast<size_t>(micro)]);
  model_->swap_activations(acts);
  if (!last()) {
    KOI_RETURN_IF_ERROR(recv_timed(model_->stage_output_grad(mb, T), n, stage_ + 1,
                                   "recv gradient of micro-batch " + std::to_string(micro)));
  }
  model_->backward(loss_scale);
  if (!first()) {
    KOI_RETURN_IF_ERROR(comm_->send(model_->stage_input_grad(), n, stage_ - 1,
                                    "send gradient of micro-batch " + std::to_string(micro)));
  }
  model_->swap_activations(acts);
  spare_.push_back(std::move(acts));
  return ok_status();
}

Result<double> Pipeline::train_batch(const int32_t* inputs, const int32_t* targets, int B, int T, float loss_scale) {
  const int m = config_.micro_batches, mb = B / m;
  KOI_CHECK(B % m == 0);
  const auto t0 = std::chrono::steady_clock::now();
  held_.resize(static_cast<size_t>(m));
  double loss = 0.0;
  for (const PipelineOp& op : stage_schedule(config_.schedule, config_.stages, stage_, m)) {
    if (op.kind == PipelineOp::Kind::kForward) {
      KOI_RETURN_IF_ERROR(forward_micro(inputs, targets, op.micro_batch, mb, T, &loss));
    } else {
      KOI_RETURN_IF_ERROR(backward_micro(op.micro_batch, mb, T, loss_scale));
    }
  }
  schedule_s_ += seconds_since(t0);
  return loss;
}

Result<double> Pipeline::eval_batch(const int32_t* inputs, const int32_t* targets, int B, int T) {
  const int64_t n = int64_t{B} * T * model_->config().dim;
  if (!first()) KOI_RETURN_IF_ERROR(comm_->recv(model_->stage_input(B, T), n, stage_ - 1, "recv eval activations"));
  const float ce = model_->forward(inputs, targets, B, T);
  if (!last()) KOI_RETURN_IF_ERROR(comm_->send(model_->stage_output(), n, stage_ + 1, "send eval activations"));
  return last() ? static_cast<double>(ce) * B : 0.0;
}

Result<float> Pipeline::clip_grad_norm(float max_norm) {
  std::vector<float>& grads = model_->grads();
  if (const int64_t n = tied_floats(); n > 0) {
    if (last()) KOI_RETURN_IF_ERROR(comm_->send(grads.data(), n, 0, "send tied embedding gradient"));
    if (first()) {
      ensure(message_, n);
      KOI_RETURN_IF_ERROR(comm_->recv(message_.data(), n, config_.stages - 1, "recv tied embedding gradient"));
      add_into(grads.data(), message_.data(), n);
    }
  }
  double ss = 0.0;
  if (tp_ != nullptr) {
    KOI_ASSIGN_OR_RETURN(ss, tp_->grad_sum_of_squares(grads, params_.begin, params_.end));
  } else {
    ss = sum_of_squares(grads.data() + params_.begin, params_.size());
  }
  KOI_RETURN_IF_ERROR(comm_->allreduce_sum(&ss, 1, "allreduce gradient norm"));
  const float norm = static_cast<float>(std::sqrt(ss));
  scale_to_max_norm(grads.data() + params_.begin, params_.size(), norm, max_norm);
  return norm;
}

Status Pipeline::step(float lr, ThreadPool* pool) {
  std::vector<float>& params = model_->params();
  const std::vector<float>& grads = model_->grads();
  slice_params_.assign(params.begin() + params_.begin, params.begin() + params_.end);
  slice_grads_.assign(grads.begin() + params_.begin, grads.begin() + params_.end);
  opt_.step(slice_params_, slice_grads_, layout_, lr, pool);
  std::copy(slice_params_.begin(), slice_params_.end(), params.begin() + params_.begin);
  if (const int64_t n = tied_floats(); n > 0) {
    if (first()) KOI_RETURN_IF_ERROR(comm_->send(params.data(), n, config_.stages - 1, "send tied embedding"));
    if (last()) KOI_RETURN_IF_ERROR(comm_->recv(params.data(), n, 0, "recv tied embedding"));
  }
  return ok_status();
}

Result<std::vector<double>> Pipeline::bubble() {
  const size_t p = static_cast<size_t>(config_.stages), me = static_cast<size_t>(stage_);
  std::vector<double> times(2 * p, 0.0);  // every stage's compute seconds, then its schedule seconds
  times[me] = schedule_s_ - idle_s_;
  times[p + me] = schedule_s_;
  idle_s_ = schedule_s_ = 0.0;
  KOI_RETURN_IF_ERROR(comm_->allreduce_sum(times.data(), 2 * config_.stages, "allreduce pipeline bubble"));
  // The stages enter a step's schedule together (the last step ended in collectives), so the
  // pipeline's span is the longest schedule; a stage idles whatever of it it did not compute,
  // waiting inside recv or done before the others.
  const double span = *std::max_element(times.begin() + static_cast<std::ptrdiff_t>(p), times.end());
  std::vector<double> shares(p, 0.0);
  for (size_t s = 0; s < p && span > 0.0; ++s) shares[s] = 1.0 - times[s] / span;
  return shares;
}

Status Pipeline::with_full_state(const std::function<Status(AdamW&)>& use) {
  KOI_RETURN_IF_ERROR(comm_->allgather(model_->params().data(), stage_sizes_, "allgather stage params"));
  const int64_t total = static_cast<int64_t>(model_->params().size());
  AdamW full(adam_, total);
  full.set_steps(opt_.steps());
  std::copy(opt_.m().begin(), opt_.m().end(), full.m().begin() + params_.begin);
  std::copy(opt_.v().begin(), opt_.v().end(), full.v().begin() + params_.begin);
  KOI_RETURN_IF_ERROR(comm_->allgather(full.m().data(), stage_sizes_, "allgather stage adam m"));
  KOI_RETURN_IF_ERROR(comm_->allgather(full.v().data(), stage_sizes_, "allgather stage adam v"));
  return use(full);
}

void Pipeline::load_full_state(AdamW& full) {
  KOI_CHECK(full.m().size() == model_->params().size());
  opt_.set_steps(full.steps());
  std::copy(full.m().begin() + params_.begin, full.m().begin() + params_.end, opt_.m().begin());
  std::copy(full.v().begin() + params_.begin, full.v().begin() + params_.end, opt_.v().begin());
}

}  // namespace koi::train
