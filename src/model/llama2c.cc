#include "model/llama2c.h"

#include <cstring>

#include "base/file.h"

namespace koi::model {
namespace {

constexpr int kHeaderInts = 7;

}  // namespace

Result<Llama2cModel> load_llama2c(const std::string& path) {
  KOI_ASSIGN_OR_RETURN(MappedFile file, MappedFile::open(path));
  if (file.size() < kHeaderInts * sizeof(int32_t)) {
    return Status::corrupt(path + ": too short for a llama2.c checkpoint header (" + std::to_string(file.size()) +
                           " bytes)");
  }
  int32_t h[kHeaderInts];
  std::memcpy(h, file.data(), sizeof h);
  Llama2cModel m;
  ModelConfig& c = m.config;
  c.arch = "llama";
  c.dim = h[0];
  c.ffn_dim = h[1];
  c.n_layers = h[2];
  c.n_heads = h[3];
  c.n_kv_heads = h[4];
  c.tied_embeddings = h[5] > 0;
  c.n_vocab = h[5] < 0 ? -h[5] : h[5];
  c.max_seq_len = h[6];
  c.norm_eps = 1e-5f;
  c.rope_theta = 10000.0f;
  c.rope_style = kernels::RopeStyle::kInterleaved;
  if (c.n_heads > 0) c.head_dim = c.dim / c.n_heads;
  for (int v : h) {
    if (v == 0 || v > (1 << 24) || v < -(1 << 24)) {
      return Status::corrupt(path + ": header value " + std::to_string(v) +
                             " is not plausible; is this a llama2.c checkpoint (version 0)?");
    }
  }
  if (Status s = c.validate(); !s.ok()) return s.with_prefix(path);

  const int64_t dim = c.dim, L = c.n_layers, hd = c.head_dim, qd = c.q_dim(), kvd = c.kv_dim(),
                ffn = c.ffn_dim, vocab = c.n_vocab;
  const int64_t freq_floats = static_cast<int64_t>(c.max_seq_len) * hd / 2;
  int64_t need = vocab * dim + L * dim + L * dim * qd + 2 * L * dim * kvd + L * qd * dim + L * dim +
                 3 * L * dim * ffn + dim + 2 * freq_floats + (c.tied_embeddings ? 0 : vocab * dim);
  const int64_t have = static_cast<int64_t>(file.size() / sizeof(float)) - kHeaderInts;
  if (have < need) {
    return Status::corrupt(path + ": holds " + std::to_string(have) + " weights but its header implies " +
                           std::to_string(need) + "; the file is truncated");
  }

  const float* p = reinterpret_cast<const float*>(file.data()) + kHeaderInts;
  ModelWeights& w = m.weights;
  // Copies `count` floats of ggml shape ne into an owned f32 tensor.
  auto take = [&](std::initializer_list<int64_t> ne) {
    TensorView v = make_view(DType::kF32, ne, nullptr);
    const int64_t count = v.num_elements();
    v.data = w.own(std::vector<float>(p, p + count));
    p += count;
    return v;
  };
  // Per-layer tensors are stored layer-major for each kind in turn.
  auto take_layers = [&](auto member, std::initializer_list<int64_t> ne) {
    w.layers.resize(static_cast<size_t>(L));
    for (auto& layer : w.layers) layer.*member = take(ne);
  };
  w.token_embd = take({dim, vocab});
  take_layers(&LayerWeights::attn_norm, {dim});
  take_layers(&LayerWeights::wq, {dim, qd});
  take_layers(&LayerWeights::wk, {dim, kvd});
  take_layers(&LayerWeights::wv, {dim, kvd});
  take_layers(&LayerWeights::wo, {qd, dim});
  take_layers(&LayerWeights::ffn_norm, {dim});
  take_layers(&LayerWeights::w_gate, {dim, ffn});
  take_layers(&LayerWeights::w_down, {ffn, dim});
  take_layers(&LayerWeights::w_up, {dim, ffn});
  w.output_norm = take({dim});
  p += 2 * freq_floats;  // precomputed rope tables of old exports; recomputed from theta
  w.output = c.tied_embeddings ? w.token_embd : take({dim, vocab});
  return m;
}

}  // namespace koi::model
