#include "train/tensor_parallel.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "base/check.h"
#include "train/llama_train.h"
#include "train/optimizer.h"

namespace koi::train {
namespace {

int64_t end_of(const std::vector<ParamTensor>& layout) { return layout.back().offset + layout.back().size; }

Status must_divide(const char* what, int64_t n, int tp) {
  if (n % tp == 0) return ok_status();
  return Status::invalid_argument("tensor parallel: " + std::string(what) + " (" + std::to_string(n) +
                                  ") does not divide by --tp " + std::to_string(tp) +
                                  "; choose a --tp that divides the query heads, the key/value heads and ffn_dim");
}

}  // namespace

Result<TensorParallel> TensorParallel::create(const model::ModelConfig& full, Communicator* tp, bool lora) {
  const int n = tp->size();
  if (full.moe.enabled()) {
    return Status::unsupported("tensor parallel: mixture-of-experts models are not split by --tp (experts would go "
                               "over --ep, not built yet); train them with --tp 1");
  }
  if (lora) return Status::unsupported("tensor parallel: LoRA runs train with --tp 1 (the adapters are not split)");
  KOI_RETURN_IF_ERROR(must_divide("the number of query heads", full.n_heads, n));
  KOI_RETURN_IF_ERROR(must_divide("the number of key/value heads", full.n_kv_heads, n));
  KOI_RETURN_IF_ERROR(must_divide("ffn_dim", full.ffn_dim, n));
  TensorParallel t;
  t.tp_ = tp;
  t.shard_config_ = full;
  t.shard_config_.n_heads /= n;
  t.shard_config_.n_kv_heads /= n;
  t.shard_config_.ffn_dim /= n;
  t.shard_config_.n_vocab = (full.n_vocab + n - 1) / n;  // padded
  t.vocab_full_ = full.n_vocab;
  // The two layouts list the same tensors in the same order; a dimension that shrank is the
  // one that is cut.
  const std::vector<ParamTensor> whole = param_layout(full), part = param_layout(t.shard_config_);
  KOI_CHECK(whole.size() == part.size());
  for (size_t i = 0; i < whole.size(); ++i) {
    const ParamTensor &w = whole[i], &s = part[i];
    KOI_CHECK(w.name == s.name && w.shape.size() == s.shape.size());
    Piece p;
    p.full_offset = w.offset, p.shard_offset = s.offset;
    p.rows = w.shape[0], p.cols = w.shape.size() > 1 ? w.shape[1] : 1;
    p.shard_rows = s.shape[0], p.shard_cols = s.shape.size() > 1 ? s.shape[1] : 1;
    if (s.shape[0] != w.shape[0]) {
      p.cut = Piece::Cut::kRows;
    } else if (w.shape.size() > 1 && s.shape[1] != w.shape[1]) {
      p.cut = Piece::Cut::kCols;
    }
    t.pieces_.push_back(p);
  }
  t.full_layout_ = whole;
  t.full_size_ = end_of(whole);
  t.shard_size_ = end_of(part);
  return t;
}

void TensorParallel::copy_piece(const Piece& p, int part, float* full, float* shard, bool to_shard) const {
  float* f = full + p.full_offset;
  float* s = shard + p.shard_offset;
  auto copy = [to_shard](float* full_at, float* shard_at, int64_t count) {
    if (to_shard) {
      std::copy_n(full_at, count, shard_at);
    } else {
      std::copy_n(shard_at, count, full_at);
    }
  };
  switch (p.cut) {
    case Piece::Cut::kReplicated:
      copy(f, s, p.rows * p.cols);
      break;
    case Piece::Cut::kRows: {  // rows [part Rs, (part+1) Rs), contiguous; past R: zero padding
      const int64_t first = part * p.shard_rows;
      const int64_t valid = std::clamp<int64_t>(p.rows - first, 0, p.shard_rows);
      copy(f + first * p.cols, s, valid * p.cols);
      if (to_shard) std::fill(s + valid * p.cols, s + p.shard_rows * p.cols, 0.0f);
      break;
    }
    case Piece::Cut::kCols: {  // in every row, columns [part Cs, (part+1) Cs)
      for (int64_t row_idx = 0; row_idx < p.rows; ++row_idx) {
        copy(f + row_idx * p.cols + part * p.shard_cols, s + row_idx * p.shard_cols, p.shard_cols);
      }
      break;
    }
  }
}

void TensorParallel::slice(const float* full, float* shard) const {
  for (const Piece& p : pieces_) copy_piece(p, tp_->rank(), const_cast<float*>(full), shard, /*to_shard=*/true);
}

void TensorParallel::init_random(uint64_t seed, float* shard) const {
  std::vector<float> tensor;  // one full tensor at a time
  for (size_t i = 0; i < pieces_.size(); ++i) {
    tensor.resize(static_cast<size_t>(full_layout_[i].size));
    init_random_tensor(full_layout_[i], i, shard_config_.n_layers, seed, tensor.data());
    slice_tensor(i, tensor.data(), shard);
  }
}

void TensorParallel::slice_tensor(size_t index, const float* whole, float* shard) const {
  Piece at_zero = pieces_[index];
  at_zero.full_offset = 0;  // the tensor alone stands for the full vector
  copy_piece(at_zero, tp_->rank(), const_cast<float*>(whole), shard, /*to_shard=*/true);
}

Status TensorParallel::gather(const std::vector<float>& shard, std::vector<float>* full, const char* what) const {
  KOI_CHECK(static_cast<int64_t>(shard.size()) == shard_size_);
  const int n = tp_->size();
  std::vector<float> all(static_cast<size_t>(shard_size_ * n));  // rank r's shard at r * shard_size
  std::copy(shard.begin(), shard.end(), all.begin() + tp_->rank() * shard_size_);
  KOI_RETURN_IF_ERROR(tp_->allgather(all.data(), std::vector<int64_t>(static_cast<size_t>(n), shard_size_), what));
  full->assign(static_cast<size_t>(full_size_), 0.0f);
  for (int part = 0; part < n; ++part) {
    for (const Piece& p : pieces_) {
      if (p.cut == Piece::Cut::kReplicated && part != 0) continue;  // the same on every rank
      copy_piece(p, part, full->data(), all.data() + part * shard_size_, /*to_shard=*/false);
    }
  }
  return ok_status();
}

Result<double> TensorParallel::grad_sum_of_squares(const std::vector<float>& grads, int64_t begin,
                                                   int64_t end) const {
  // [sum of squares of the split tensors (summed over the ranks), of the replicated ones]
  double ss[2] = {0.0, 0.0};
  for (const Piece& p : pieces_) {
    if (p.shard_offset < begin || p.shard_offset >= end) continue;
    ss[p.cut == Piece::Cut::kReplicated ? 1 : 0] +=
        sum_of_squares(grads.data() + p.shard_offset, p.shard_rows * p.shard_cols);
  }
  KOI_RETURN_IF_ERROR(tp_->allreduce_sum(ss, 1, "allreduce tp grad norm"));
  return ss[0] + ss[1];
}

Result<float> TensorParallel::clip_grad_norm(std::vector<float>& grads, float max_norm) const {
  KOI_ASSIGN_OR_RETURN(const double ss, grad_sum_of_squares(grads, 0, shard_size_));
  const float norm = static_cast<float>(std::sqrt(ss));
  scale_to_max_norm(grads, norm, max_norm);
  return norm;
}

Result<double> vocab_parallel_cross_entropy(Communicator& tp, ThreadPool* pool, float* logits, const int32_t* targets,
                                            int64_t N, int64_t V_local, int64_t vocab_begin, int64_t valid) {
  const int n = tp.size();
  // Every rank's row maxima (rank r's at [r N, (r+1) N)), then the global maximum per row.
  std::vector<float> maxima(static_cast<size_t>(N * n), -INFINITY);
  for (int64_t row = 0; row < N; ++row) {
    const float* l = logits + row * V_local;
    for (int64_t v = 0; v < valid; ++v) maxima[tp.rank() * N + row] = std::max(maxima[tp.rank() * N + row], l[v]);
  }
  KOI_RETURN_IF_ERROR(tp.allgather(maxima.data(), std::vector<int64_t>(static_cast<size_t>(n), N), "allgather tp logit max"));
  // sums[row] = this rank's sum of exp(l - max); shifted[row] = l_t - max where it holds the
  // target (else 0); sums[N] = their total.
  std::vector<double> sums(static_cast<size_t>(N + 1), 0.0), shifted(static_cast<size_t>(N), 0.0);
  pool->parallel_for(N, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      float m = -INFINITY;
      for (int r = 0; r < n; ++r) m = std::max(m, maxima[r * N + row]);
      float* l = logits + row * V_local;
      const int64_t t = targets[row] - vocab_begin;
      if (t >= 0 && t < valid) shifted[row] = static_cast<double>(l[t]) - m;
      double s = 0.0;
      for (int64_t v = 0; v < valid; ++v) s += (l[v] = std::exp(l[v] - m));
      std::fill(l + valid, l + V_local, 0.0f);
      sums[row] = s;
    }
  });
  for (int64_t row = 0; row < N; ++row) sums[N] += shifted[row];
  KOI_RETURN_IF_ERROR(tp.allreduce_sum(sums.data(), N + 1, "allreduce tp softmax sums"));
  double loss = -sums[N];
  for (int64_t row = 0; row < N; ++row) {
    loss += std::log(sums[row]);
    const float inv = static_cast<float>(1.0 / sums[row]);
    for (int64_t v = 0; v < valid; ++v) logits[row * V_local + v] *= inv;
  }
  return loss;
}

}  // namespace koi::train
