#include "train/lora.h"

#include <algorithm>
#include <boost/json.hpp>
#include <cmath>
#include <cstring>
#include <tuple>
#include <utility>

#include "base/check.h"
#include "base/file.h"
#include "base/random.h"
#include "kernels/ops.h"
#include "train/checkpoint.h"
#include "train/linear.h"

namespace koi::train {
namespace {

namespace json = boost::json;

constexpr LoraTarget kAllTargets[kNumLoraTargets] = {LoraTarget::kQ,    LoraTarget::kK,  LoraTarget::kV,
                                                     LoraTarget::kO,    LoraTarget::kGate, LoraTarget::kUp,
                                                     LoraTarget::kDown};

}  // namespace

LoraAdapters::LoraAdapters(model::ModelConfig model, LoraConfig config)
    : model_(std::move(model)), config_(std::move(config)) {}

Result<LoraAdapters> LoraAdapters::create(const model::ModelConfig& model, const LoraConfig& config) {
  if (config.rank < 1) return Status::invalid_argument("the LoRA rank must be at least 1");
  if (config.targets.empty()) return Status::invalid_argument("LoRA needs at least one target projection");
  LoraAdapters a(model, config);
  if (a.config_.alpha <= 0.0f) a.config_.alpha = static_cast<float>(config.rank);
  for (LoraTarget t : config.targets) a.adapted_[static_cast<int>(t)] = true;
  a.config_.targets.clear();  // canonical order, no repeats
  for (const LoraTarget target : kAllTargets) {
    if (a.adapts(target)) a.config_.targets.push_back(target);
  }
  a.slots_.resize(static_cast<size_t>(model.n_layers) * kNumLoraTargets);
  const int64_t r = config.rank;
  int64_t offset = 0;
  for (int l = 0; l < model.n_layers; ++l) {
    for (const LoraTarget target : kAllTargets) {
      if (!a.adapts(target)) continue;
      Slot& s = a.slot(l, target);
      std::tie(s.in, s.out) = model::lora_projection_shape(model, target);
      const std::string name = "base_model.model." + model::lora_module_path(l, target);
      s.a = static_cast<int>(a.layout_.size());
      a.layout_.push_back({name + ".lora_A.weight", {r, s.in}, offset, r * s.in, true});
      offset += r * s.in;
      s.b = static_cast<int>(a.layout_.size());
      a.layout_.push_back({name + ".lora_B.weight", {s.out, r}, offset, s.out * r, true});
      offset += s.out * r;
    }
  }
  a.params_.assign(static_cast<size_t>(offset), 0.0f);
  a.grads_.assign(static_cast<size_t>(offset), 0.0f);
  return a;
}

Result<LoraAdapters> LoraAdapters::load(const std::string& dir, const model::ModelConfig& model) {
  KOI_ASSIGN_OR_RETURN(model::LoraFileConfig file, model::read_lora_config(dir));
  if (file.rslora) {
    return Status::unsupported(path_join(dir, model::kLoraConfigFile) +
                               ": use_rslora adapters are served but not trained by Koi");
  }
  LoraConfig config;
  config.rank = file.rank;
  config.alpha = file.alpha;
  config.targets = file.targets;
  KOI_ASSIGN_OR_RETURN(LoraAdapters a, create(model, config));
  KOI_RETURN_IF_ERROR(a.load_params(dir));
  return a;
}

void LoraAdapters::init_random(uint64_t seed) {
  for (size_t i = 0; i < layout_.size(); ++i) {
    const ParamTensor& t = layout_[i];
    float* dst = params_.data() + t.offset;
    if (t.name.ends_with(".lora_B.weight")) {
      std::fill_n(dst, t.size, 0.0f);
      continue;
    }
    const float bound = 1.0f / std::sqrt(static_cast<float>(t.shape[1]));
    Rng rng(seed * 1000003 + i);
    for (int64_t j = 0; j < t.size; ++j) dst[j] = (2.0f * rng.uniform_f() - 1.0f) * bound;
  }
}

void LoraAdapters::zero_grad() { std::fill(grads_.begin(), grads_.end(), 0.0f); }

void LoraAdapters::forward(ThreadPool* pool, int layer, LoraTarget target, const float* x, float* y, int64_t N) {
  Slot& s = slot(layer, target);
  const int64_t r = config_.rank;
  const float* A = params_.data() + layout_[static_cast<size_t>(s.a)].offset;
  const float* B = params_.data() + layout_[static_cast<size_t>(s.b)].offset;
  ensure(s.u, N * r);
  linear_forward(pool, s.u.data(), x, A, nullptr, N, s.in, r);  // u (N, r) = x A^T
  ensure(tmp_, N * s.out);
  linear_forward(pool, tmp_.data(), s.u.data(), B, nullptr, N, r, s.out);  // (N, out) = u B^T
  kernels::axpy(config_.scale(), tmp_.data(), y, N * s.out);
}

void LoraAdapters::backward(ThreadPool* pool, int layer, LoraTarget target, const float* x, const float* dy, float* dx,
                            int64_t N) {
  Slot& s = slot(layer, target);
  const int64_t r = config_.rank;
  const ParamTensor& ta = layout_[static_cast<size_t>(s.a)];
  const ParamTensor& tb = layout_[static_cast<size_t>(s.b)];
  // tmp = scale dy (N, out);  du (N, r) = tmp B;  dB += tmp^T u.
  ensure(tmp_, N * s.out);
  for (int64_t i = 0; i < N * s.out; ++i) tmp_[i] = config_.scale() * dy[i];
  ensure(du_, N * r);
  std::fill_n(du_.data(), N * r, 0.0f);
  linear_backward(pool, du_.data(), grads_.data() + tb.offset, nullptr, tmp_.data(), s.u.data(),
                  params_.data() + tb.offset, N, r, s.out);
  // dx (N, in) += du A;  dA += du^T x.
  linear_backward(pool, dx, grads_.data() + ta.offset, nullptr, du_.data(), x, params_.data() + ta.offset, N,
                  s.in, r);
}

void LoraAdapters::merge_into(std::vector<float>* base_params, const std::vector<ParamTensor>& base_layout) const {
  const int64_t r = config_.rank;
  for (int l = 0; l < model_.n_layers; ++l) {
    for (const LoraTarget target : kAllTargets) {
      if (!adapts(target)) continue;
      const Slot& s = slots_[static_cast<size_t>(l) * kNumLoraTargets + static_cast<size_t>(target)];
      const std::string name = model::lora_module_path(l, target) + ".weight";
      auto w = std::find_if(base_layout.begin(), base_layout.end(),
                            [&](const ParamTensor& p) { return p.name == name; });
      KOI_CHECK(w != base_layout.end() && w->size == s.in * s.out);
      const float* A = params_.data() + layout_[static_cast<size_t>(s.a)].offset;
      const float* B = params_.data() + layout_[static_cast<size_t>(s.b)].offset;
      float* W = base_params->data() + w->offset;
      for (int64_t o = 0; o < s.out; ++o) {
        for (int64_t i = 0; i < s.in; ++i) {
          float ba = 0.0f;
          for (int64_t k = 0; k < r; ++k) ba += B[o * r + k] * A[k * s.in + i];
          W[o * s.in + i] += config_.scale() * ba;
        }
      }
    }
  }
}

Status LoraAdapters::save(const std::string& dir) const {
  json::object o;
  o["peft_type"] = "LORA";
  o["task_type"] = "CAUSAL_LM";
  o["r"] = config_.rank;
  const float alpha = config_.alpha;
  o["lora_alpha"] = alpha == std::floor(alpha) ? json::value(static_cast<int64_t>(alpha)) : json::value(double{alpha});
  o["lora_dropout"] = 0.0;
  o["bias"] = "none";
  o["fan_in_fan_out"] = false;
  o["inference_mode"] = true;
  json::array modules;
  for (LoraTarget t : config_.targets) modules.emplace_back(lora_module_name(t));
  o["target_modules"] = std::move(modules);
  KOI_RETURN_IF_ERROR(write_file_atomic(path_join(dir, model::kLoraConfigFile), json::serialize(o)));
  return write_params(path_join(dir, model::kLoraWeightsFile), layout_, params_);
}

Status LoraAdapters::load_params(const std::string& dir) {
  return read_params(path_join(dir, model::kLoraWeightsFile), layout_, &params_);
}

}  // namespace koi::train
