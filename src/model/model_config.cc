#include "model/model_config.h"

#include <cmath>
#include <numbers>

#include "model/moe.h"

namespace koi::model {

Status ModelConfig::validate() const {
  auto bad = [](const std::string& what) {
    return Status::invalid_argument("model config: " + what);
  };
  if (arch != "llama" && arch != "qwen2" && arch != "qwen3" && arch != "gemma2" && arch != "gemma3" && arch != "phi3") {
    return Status::unsupported("model config: architecture '" + arch +
                               "' is not supported; Koi runs llama-family models (llama, mistral, qwen2, qwen3, gemma2, "
                               "gemma3, phi3)");
  }
  if (n_vocab <= 0) return bad("vocabulary size must be positive, got " + std::to_string(n_vocab));
  if (dim <= 0) return bad("hidden size must be positive, got " + std::to_string(dim));
  if (n_layers <= 0) return bad("number of layers must be positive, got " + std::to_string(n_layers));
  if (n_heads <= 0 || n_kv_heads <= 0) return bad("head counts must be positive");
  if (n_heads % n_kv_heads != 0) {
    return bad("attention heads (" + std::to_string(n_heads) + ") must be a multiple of key/value heads (" +
               std::to_string(n_kv_heads) + ")");
  }
  if (head_dim <= 0 || head_dim % 2 != 0) return bad("head dimension must be positive and even, got " + std::to_string(head_dim));
  if (ffn_dim <= 0) return bad("feed-forward size must be positive, got " + std::to_string(ffn_dim));
  if (max_seq_len <= 0) return bad("context length must be positive");
  if (!(norm_eps > 0.0f) || !(rope_theta > 0.0f)) return bad("norm epsilon and rope theta must be positive");
  if (!rope_factors.empty() && static_cast<int>(rope_factors.size()) != head_dim / 2) {
    return bad("rope_freqs has " + std::to_string(rope_factors.size()) + " values, expected head_dim/2 = " +
               std::to_string(head_dim / 2));
  }
  for (const std::vector<float>* f : {&rope_factors_short, &rope_factors_long}) {
    if (rope_factors_long.empty() && rope_factors_short.empty()) break;
    if (static_cast<int>(f->size()) != head_dim / 2) {
      return bad("rope_scaling long_factor and short_factor must have head_dim/2 = " + std::to_string(head_dim / 2) +
                 " values each, got " + std::to_string(f->size()));
    }
    for (float v : *f) {
      if (!(v > 0.0f) || !std::isfinite(v)) return bad("rope_scaling long_factor and short_factor must be positive");
    }
  }
  if (!rope_factors_long.empty() && rope_original_context <= 0) {
    return bad("LongRoPE needs original_max_position_embeddings > 0");
  }
  if (sliding_window < 0) return bad("sliding window must not be negative, got " + std::to_string(sliding_window));
  if (sliding_pattern < 0) return bad("sliding layer pattern must not be negative, got " + std::to_string(sliding_pattern));
  if (!(rope_attn_factor > 0.0f) || !std::isfinite(rope_attn_factor)) return bad("rope attention factor must be positive");
  for (float v : {embedding_scale, attn_scale, attn_softcap, final_softcap, rope_local_theta}) {
    if (!(v >= 0.0f) || !std::isfinite(v)) {
      return bad("embedding scale, attention scale, soft-caps and local rope theta must be finite and >= 0");
    }
  }
  return validate_moe_config(moe);
}

namespace {

// theta^(-2i/head_dim) for each of the head_dim/2 pairs.
std::vector<float> unscaled_inv_freq(float theta, int head_dim) {
  std::vector<float> inv(static_cast<size_t>(head_dim / 2));
  for (int i = 0; i < head_dim / 2; ++i) {
    inv[i] = static_cast<float>(1.0 / std::pow(static_cast<double>(theta), 2.0 * i / head_dim));
  }
  return inv;
}

}  // namespace

std::vector<float> ModelConfig::rope_inv_freq() const {
  std::vector<float> inv = unscaled_inv_freq(rope_theta, head_dim);
  std::vector<float> factors = rope_freq_factors();
  for (size_t i = 0; i < factors.size(); ++i) inv[i] /= factors[i];
  return inv;
}

std::vector<float> ModelConfig::rope_inv_freq_of(int layer) const {
  if (rope_local_theta > 0.0f && window_of(layer) > 0) return unscaled_inv_freq(rope_local_theta, head_dim);
  return rope_inv_freq();
}

std::vector<float> ModelConfig::rope_freq_factors() const {
  if (!rope_factors.empty()) return rope_factors;
  if (!rope_factors_long.empty()) return max_seq_len > rope_original_context ? rope_factors_long : rope_factors_short;
  if (!rope_scaling.enabled) return {};
  const int half = head_dim / 2;
  const RopeScaling& s = rope_scaling;
  if (s.type == RopeScaling::Type::kLinear) return std::vector<float>(static_cast<size_t>(half), s.factor);
  const double low_freq_wavelen = s.original_max_position / s.low_freq_factor;
  const double high_freq_wavelen = s.original_max_position / s.high_freq_factor;
  std::vector<float> factors(static_cast<size_t>(half));
  for (int i = 0; i < half; ++i) {
    double freq = 1.0 / std::pow(static_cast<double>(rope_theta), 2.0 * i / head_dim);
    double wavelen = 2.0 * std::numbers::pi / freq;
    double scaled;
    if (wavelen < high_freq_wavelen) {
      scaled = freq;
    } else if (wavelen > low_freq_wavelen) {
      scaled = freq / s.factor;
    } else {
      double smooth = (s.original_max_position / wavelen - s.low_freq_factor) /
                      (s.high_freq_factor - s.low_freq_factor);
      scaled = (1.0 - smooth) * freq / s.factor + smooth * freq;
    }
    factors[i] = static_cast<float>(freq / scaled);
  }
  return factors;
}

int64_t ModelConfig::num_parameters() const {
  int64_t per_layer = 2LL * dim + static_cast<int64_t>(dim) * (q_dim() + 2LL * kv_dim()) +
                      static_cast<int64_t>(q_dim()) * dim + 3LL * dim * ffn_dim;
  if (qkv_bias) per_layer += q_dim() + 2LL * kv_dim();
  if (qk_norm) per_layer += 2LL * head_dim;
  if (post_norms) per_layer += 2LL * dim;
  if (moe.enabled()) per_layer += moe_layer_parameters(*this) - 3LL * dim * ffn_dim;
  int64_t total = per_layer * n_layers + static_cast<int64_t>(n_vocab) * dim + dim;
  if (!tied_embeddings) total += static_cast<int64_t>(n_vocab) * dim;
  return total;
}

}  // namespace koi::model
