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
  // The two layouts list the same tensors in the same order; a dimension that shrank is the
  // one that is cut.
  const std::vector<ParamTensor> whole = param_layout(full), part = param_layout(t.shard_config_);
  KOI_CHECK(whole.size() == part.size());
  for (size_t i = 0; i < whole.size(); ++i) {
    const ParamTensor &w = whole[i], &s = part[i];
    KOI_CHECK(w.name == s.name && w.shape.size() == s.shape.size());
    Piece p{w.offset, s.offset, w.shape[0], w.shape.size() > 1 ? w.shape[1] : 1, Piece::Cut::kReplicated};
    if (s.shape[0] != w.shape[0]) {
      p.cut = Piece::Cut::kRows;
    } else if (w.shape.size() > 1 && s.shape[1] != w.shape[1]) {
      p.cut = Piece::Cut::kCols;
    }
    t.pieces_.push_back(p);
  }
  t.full_size_ = end_of(whole);
  t.shard_size_ = end_of(part);
  return t;
}

void TensorParallel::copy_piece(const Piece& p, int part, float* full, float* shard, bool to_shard) const {
  const int n = tp_->size();
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
    case Piece::Cut::kRows: {  // rows [part R/n, (part+1) R/n), contiguous
      const int64_t rows = p.rows / n;
      copy(f + part * rows * p.cols, s, rows * p.cols);
      break;
    }
    case Piece::Cut::kCols: {  // in every row, columns [part C/n, (part+1) C/n)
      const int64_t cols = p.cols / n;
      for (int64_t row_idx = 0; row_idx < p.rows; ++row_idx) {
        copy(f + row_idx * p.cols + part * cols, s + row_idx * cols, cols);
      }
      break;
    }
  }
}

void TensorParallel::slice(const float* full, float* shard) const {
  for (const Piece& p : pieces_) copy_piece(p, tp_->rank(), const_cast<float*>(full), shard, /*to_shard=*/true);
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

Result<float> TensorParallel::clip_grad_norm(std::vector<float>& grads, float max_norm) const {
  // [sum of squares of the split tensors (summed over the ranks), of the replicated ones]
  double ss[2] = {0.0, 0.0};
  for (const Piece& p : pieces_) {
    const int64_t size = p.cut == Piece::Cut::kReplicated ? p.rows * p.cols : p.rows * p.cols / tp_->size();
    ss[p.cut == Piece::Cut::kReplicated ? 1 : 0] += sum_of_squares(grads.data() + p.shard_offset, size);
  }
  KOI_RETURN_IF_ERROR(tp_->allreduce_sum(ss, 1, "allreduce tp grad norm"));
  const float norm = static_cast<float>(std::sqrt(ss[0] + ss[1]));
  scale_to_max_norm(grads, norm, max_norm);
  return norm;
}

}  // namespace koi::train
