#include "train/zero.h"

#include <sys/resource.h>

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "base/check.h"
#include "train/data_parallel.h"

namespace koi::train {
namespace {

constexpr int64_t kFloat = sizeof(float);

int64_t capacity_bytes(const std::vector<float>& v) { return static_cast<int64_t>(v.capacity()) * kFloat; }

// "layer 3", or "root" (the embedding, final norm and output): a unit in collective names.
std::string unit_name(int unit, int num_units) {
  return unit + 1 == num_units ? "root" : "layer " + std::to_string(unit);
}

}  // namespace

ShardedDataParallel::ShardedDataParallel(Communicator* comm, LlamaTrain* model, AdamWConfig config, int stage,
                                         bool overlap)
    : comm_(comm), model_(model), config_(config), stage_(stage), overlap_(overlap), opt_(config, 0) {
  KOI_CHECK(stage == 2 || stage == 3);
  KOI_CHECK(model->lora() == nullptr);
  const int ranks = comm->size(), rank = comm->rank();
  for (int u = 0; u < model->num_units(); ++u) {
    Unit unit;
    unit.pieces = model->unit_pieces(u);
    for (const Range& r : unit.pieces) unit.size += r.size();
    for (int r = 0; r < ranks; ++r) unit.counts.push_back(split_range(unit.size, ranks, r).size());
    unit.mine = split_range(unit.size, ranks, rank);
    unit.own_offset = own_size_;
    own_size_ += unit.mine.size();
    units_.push_back(std::move(unit));
  }
  const std::vector<float>& flat = model->params();
  acquire(params_, own_size_, /*zeroed=*/false);
  acquire(grads_, own_size_, /*zeroed=*/true);
  for (const Unit& u : units_) {
    for_each_own_run(u, [&](int64_t flat_begin, int64_t own, int64_t n) {
      std::copy_n(flat.begin() + flat_begin, n, params_.begin() + own);
      for (ParamTensor t : clip_layout(model->layout(), {flat_begin, flat_begin + n})) {
        t.offset += own;
        own_layout_.push_back(std::move(t));
      }
    });
  }
  opt_ = AdamW(config, own_size_);
  tracked_ += 2 * own_size_ * kFloat;  // m and v
  unit_params_.resize(units_.size());
  unit_grads_.resize(units_.size());
  gathering_.assign(units_.size(), -1);
  std::vector<float>().swap(model->grads());
  if (stage_ == 3) std::vector<float>().swap(model->params());
  model->set_unit_stream(this);
  peak_ = current();
}

ShardedDataParallel::~ShardedDataParallel() { model_->set_unit_stream(nullptr); }

void ShardedDataParallel::for_each_own_run(const Unit& u,
                                           const std::function<void(int64_t, int64_t, int64_t)>& f) const {
  int64_t position = 0;  // of the piece in the unit's buffer
  for (const Range& piece : u.pieces) {
    const int64_t begin = std::max(position, u.mine.begin), end = std::min(position + piece.size(), u.mine.end);
    if (begin < end) f(piece.begin + (begin - position), u.own_offset + (begin - u.mine.begin), end - begin);
    position += piece.size();
  }
}

bool ShardedDataParallel::failed(Status s) {
  if (s.ok()) return false;
  if (status_.ok()) status_ = std::move(s);
  return true;
}

void ShardedDataParallel::acquire(std::vector<float>& v, int64_t n, bool zeroed) {
  release(v);
  const size_t size = static_cast<size_t>(n);
  auto spare = std::find_if(spares_.begin(), spares_.end(), [&](const std::vector<float>& b) { return b.size() == size; });
  if (spare != spares_.end()) {  // already counted in tracked_
    v.swap(*spare);
    spares_.erase(spare);
    if (zeroed) std::fill(v.begin(), v.end(), 0.0f);
    return;
  }
  v.assign(size, 0.0f);
  ++allocated_;
  tracked_ += capacity_bytes(v);
  peak_ = std::max(peak_, current());
}

void ShardedDataParallel::release(std::vector<float>& v) {
  if (v.empty()) return;
  spares_.push_back(std::move(v));  // kept, and still counted, for the next acquire of its size
  v = std::vector<float>();
}

void ShardedDataParallel::free(std::vector<float>& v) {
  tracked_ -= capacity_bytes(v);
  std::vector<float>().swap(v);
}

int64_t ShardedDataParallel::current() const {
  return tracked_ + capacity_bytes(model_->params()) + capacity_bytes(model_->grads());
}

Status ShardedDataParallel::gather_unit(int unit, const std::vector<float>& own, std::vector<float>& buffer,
                                        const std::string& what) {
  const Unit& u = units_[static_cast<size_t>(unit)];
  acquire(buffer, u.size, /*zeroed=*/false);  // the allgather writes every element
  std::copy_n(own.begin() + u.own_offset, u.mine.size(), buffer.begin() + u.mine.begin);
  return comm_->allgather(buffer.data(), u.counts, "allgather " + what + " " + unit_name(unit, model_->num_units()));
}

Status ShardedDataParallel::gather_flat(const std::vector<float>& own, std::vector<float>& flat,
                                        const std::string& what) {
  std::vector<float> buffer;
  for (size_t unit = 0; unit < units_.size(); ++unit) {
    Status s = gather_unit(static_cast<int>(unit), own, buffer, what);
    if (s.ok()) {
      int64_t position = 0;
      for (const Range& piece : units_[unit].pieces) {
        std::copy_n(buffer.begin() + position, piece.size(), flat.begin() + piece.begin);
        position += piece.size();
      }
    }
    release(buffer);
    KOI_RETURN_IF_ERROR(s);
  }
  return ok_status();
}

void ShardedDataParallel::fetch(int unit, bool wait) {
  if (unit < 0) return;
  const size_t i = static_cast<size_t>(unit);
  if (unit_params_[i].empty() && gathering_[i] < 0) {
    const Unit& u = units_[i];
    acquire(unit_params_[i], u.size, /*zeroed=*/false);  // the allgather writes every element
    std::copy_n(params_.begin() + u.own_offset, u.mine.size(), unit_params_[i].begin() + u.mine.begin);
    // After a failure no collective starts: the pass runs on this rank's part and whatever the
    // buffer held, and the caller discards it (status()).
    if (status_.ok()) {
      const std::string what = "allgather weights " + unit_name(unit, model_->num_units());
      gathering_[i] = comm_->start_allgather(unit_params_[i].data(), u.counts, what);
    }
  }
  if (wait && gathering_[i] >= 0) {
    const int64_t ticket = gathering_[i];
    gathering_[i] = -1;
    failed(comm_->wait(ticket));
  }
}

const float* ShardedDataParallel::forward_params(int unit) {
  if (stage_ == 2) return nullptr;
  const int root = model_->num_units() - 1;
  fetch(unit, /*wait=*/true);
  const int next = unit == root ? 0 : unit + 1 < root ? unit + 1 : -1;  // root, 0, 1, ..., last layer
  if (overlap_) fetch(next, /*wait=*/false);
  return unit_params_[static_cast<size_t>(unit)].data();
}

void ShardedDataParallel::forward_done(int unit) {
  if (stage_ == 3) release(unit_params_[static_cast<size_t>(unit)]);
  comm_->progress();
}

const float* ShardedDataParallel::backward_params(int unit) {
  if (stage_ == 2) return nullptr;
  const int root = model_->num_units() - 1;
  fetch(unit, /*wait=*/true);
  const int next = unit == root ? root - 1 : unit - 1;  // root, last layer, ..., 0 (then -1: none)
  if (overlap_) fetch(next, /*wait=*/false);
  return unit_params_[static_cast<size_t>(unit)].data();
}

float* ShardedDataParallel::backward_grads(int unit) {
  // The root's reduction of the previous micro-batch may still read its buffer.
  if (in_flight_ && in_flight_->unit == unit) finish_reduction();
  std::vector<float>& g = unit_grads_[static_cast<size_t>(unit)];
  acquire(g, units_[static_cast<size_t>(unit)].size, /*zeroed=*/true);  // backward adds into it
  return g.data();
}

void ShardedDataParallel::backward_done(int unit) {
  const size_t i = static_cast<size_t>(unit);
  if (stage_ == 3) release(unit_params_[i]);
  finish_reduction();
  if (!status_.ok()) {
    release(unit_grads_[i]);
    return;
  }
  const Unit& u = units_[i];
  in_flight_.emplace();
  in_flight_->unit = unit;
  // A part, freed after its reduction rather than kept (the working set counts one).
  in_flight_->received.assign(static_cast<size_t>(u.mine.size()), 0.0f);
  tracked_ += capacity_bytes(in_flight_->received);
  peak_ = std::max(peak_, current());
  const std::string what = "reduce-scatter grads " + unit_name(unit, model_->num_units());
  in_flight_->ticket =
      comm_->start_reduce_scatter_sum(unit_grads_[i].data(), in_flight_->received.data(), u.counts, what);
  if (overlap_) {
    comm_->progress();
  } else {
    finish_reduction();
  }
}

void ShardedDataParallel::finish_reduction() {
  if (!in_flight_) return;
  Reduction r = std::move(*in_flight_);
  in_flight_.reset();
  if (!failed(comm_->wait(r.ticket))) {
    const Unit& u = units_[static_cast<size_t>(r.unit)];
    float* own = grads_.data() + u.own_offset;
    for (int64_t j = 0; j < u.mine.size(); ++j) own[j] += r.received[static_cast<size_t>(j)];
  }
  free(r.received);
  release(unit_grads_[static_cast<size_t>(r.unit)]);
}

void ShardedDataParallel::zero_grad() { std::fill(grads_.begin(), grads_.end(), 0.0f); }

Status ShardedDataParallel::finish_backward() {
  finish_reduction();
  return status_;
}

Result<float> ShardedDataParallel::clip_grad_norm(float max_norm) {
  KOI_RETURN_IF_ERROR(status_);
  double ss = sum_of_squares(grads_.data(), own_size_);
  KOI_RETURN_IF_ERROR(comm_->allreduce_sum(&ss, 1, "allreduce grad norm"));
  const float norm = static_cast<float>(std::sqrt(ss));
  scale_to_max_norm(grads_, norm, max_norm);
  return norm;
}

Status ShardedDataParallel::step(float lr, ThreadPool* pool) {
  KOI_RETURN_IF_ERROR(status_);
  opt_.step(params_, grads_, own_layout_, lr, pool);
  if (stage_ == 3) return ok_status();  // the next forward gathers the new weights
  return gather_flat(params_, model_->params(), "weights");
}

Status ShardedDataParallel::with_full_state(const std::function<Status(AdamW&)>& use) {
  KOI_RETURN_IF_ERROR(status_);
  const int64_t total = model_->layout().back().offset + model_->layout().back().size;
  AdamW full(config_, total);
  full.set_steps(opt_.steps());
  tracked_ += 2 * total * kFloat;
  Status s = gather_flat(opt_.m(), full.m(), "adam m");
  if (s.ok()) s = gather_flat(opt_.v(), full.v(), "adam v");
  if (s.ok() && stage_ == 3) {
    model_->params().assign(static_cast<size_t>(total), 0.0f);
    s = gather_flat(params_, model_->params(), "weights");
  }
  peak_ = std::max(peak_, current());
  if (s.ok()) s = use(full);
  if (stage_ == 3) std::vector<float>().swap(model_->params());
  tracked_ -= 2 * total * kFloat;
  return s;
}

void ShardedDataParallel::load_full_state(AdamW& full) {
  opt_.set_steps(full.steps());
  for (const Unit& u : units_) {
    for_each_own_run(u, [&](int64_t flat_begin, int64_t own, int64_t n) {
      std::copy_n(full.m().begin() + flat_begin, n, opt_.m().begin() + own);
      std::copy_n(full.v().begin() + flat_begin, n, opt_.v().begin() + own);
    });
  }
}

ZeroMemory ShardedDataParallel::memory() const {
  ZeroMemory m;
  const int64_t total = model_->layout().back().offset + model_->layout().back().size;
  m.one_process = 4 * total * kFloat;
  m.own = 4 * own_size_ * kFloat + capacity_bytes(model_->params()) + capacity_bytes(model_->grads());
  const int root = model_->num_units() - 1;
  int64_t layer = 0, part = 0;
  for (int u = 0; u < root; ++u) layer = std::max(layer, units_[static_cast<size_t>(u)].size);
  for (const Unit& u : units_) part = std::max(part, u.mine.size());
  const int64_t root_size = units_[static_cast<size_t>(root)].size;
  // Held at once, at most: the root's weights and gradient (the whole pass), a layer's weights
  // and gradient, with overlap also the next layer's prefetched weights and the previous
  // layer's gradient in flight, and the received part of that reduction. Stage 2 gathers no
  // weights.
  const int64_t layers_held = overlap_ ? 2 : 1;
  const int64_t weights = stage_ == 3 ? root_size + layers_held * layer : 0;
  const int64_t grads = root_size + layers_held * layer;
  m.working_set = (weights + grads + part) * kFloat;
  m.arithmetic = fmt::format(
      "M = 4 x {} params x 4 B = {} B; own = 4 x {} (this rank's parts){} = {} B; working set = ({} weights + {} "
      "gradient + {} received) x 4 B = {} B (root {} + {} layer(s) of <= {} params)",
      total, m.one_process, own_size_, stage_ == 2 ? " + every weight" : "", m.own, weights, grads, part,
      m.working_set, root_size, layers_held, layer);
  m.tracked_now = current();
  m.tracked_peak = peak_;
  m.buffers_allocated = allocated_;
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  m.peak_rss = static_cast<int64_t>(usage.ru_maxrss) * 1024;
  return m;
}

}  // namespace koi::train
