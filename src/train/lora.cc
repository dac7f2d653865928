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

constexpr char kWeightsFile[] = "adapter_model.safetensors";
constexpr char kConfigFile[] = "adapter_config.json";

struct TargetInfo {
  LoraTarget target;
  const char* short_name;
  const char* module;  // path inside a decoder layer
};
constexpr TargetInfo kTargets[kNumLoraTargets] = {
    {LoraTarget::kQ, "q", "self_attn.q_proj"},     {LoraTarget::kK, "k", "self_attn.k_proj"},
    {LoraTarget::kV, "v", "self_attn.v_proj"},     {LoraTarget::kO, "o", "self_attn.o_proj"},
    {LoraTarget::kGate, "gate", "mlp.gate_proj"}, {LoraTarget::kUp, "up", "mlp.up_proj"},
    {LoraTarget::kDown, "down", "mlp.down_proj"},
};

const TargetInfo& info(LoraTarget target) { return kTargets[static_cast<int>(target)]; }

// "model.layers.<layer>.self_attn.q_proj": the base weight's name without ".weight".
std::string module_path(int layer, LoraTarget target) {
  return "model.layers." + std::to_string(layer) + "." + info(target).module;
}

// (in, out) of a projection.
std::pair<int64_t, int64_t> projection_shape(const model::ModelConfig& c, LoraTarget target) {
  switch (target) {
    case LoraTarget::kQ: return {c.dim, c.q_dim()};
    case LoraTarget::kK:
    case LoraTarget::kV: return {c.dim, c.kv_dim()};
    case LoraTarget::kO: return {c.q_dim(), c.dim};
    case LoraTarget::kGate:
    case LoraTarget::kUp: return {c.dim, c.ffn_dim};
    case LoraTarget::kDown: return {c.ffn_dim, c.dim};
  }
  return {0, 0};
}

}  // namespace

Result<LoraTarget> lora_target_from_name(std::string_view name) {
  std::string known;
  for (const TargetInfo& t : kTargets) {
    const std::string module = lora_module_name(t.target);
    if (name == t.short_name || name == module) return t.target;
    known += std::string(known.empty() ? "" : ", ") + t.short_name;
  }
  return Status::invalid_argument("unknown LoRA target '" + std::string(name) + "' (known: " + known +
                                  ", or the same with _proj)");
}

const char* lora_module_name(LoraTarget target) {
  const char* module = info(target).module;
  return std::strchr(module, '.') + 1;
}

LoraAdapters::LoraAdapters(model::ModelConfig model, LoraConfig config)
    : model_(std::move(model)), config_(std::move(config)) {}

Result<LoraAdapters> LoraAdapters::create(const model::ModelConfig& model, const LoraConfig& config) {
  if (config.rank < 1) return Status::invalid_argument("the LoRA rank must be at least 1");
  if (config.targets.empty()) return Status::invalid_argument("LoRA needs at least one target projection");
  LoraAdapters a(model, config);
  if (a.config_.alpha <= 0.0f) a.config_.alpha = static_cast<float>(config.rank);
  for (LoraTarget t : config.targets) a.adapted_[static_cast<int>(t)] = true;
  a.config_.targets.clear();  // canonical order, no repeats
  for (const TargetInfo& t : kTargets) {
    if (a.adapts(t.target)) a.config_.targets.push_back(t.target);
  }
  a.slots_.resize(static_cast<size_t>(model.n_layers) * kNumLoraTargets);
  const int64_t r = config.rank;
  int64_t offset = 0;
  for (int l = 0; l < model.n_layers; ++l) {
    for (const TargetInfo& t : kTargets) {
      if (!a.adapts(t.target)) continue;
      Slot& s = a.slot(l, t.target);
      std::tie(s.in, s.out) = projection_shape(model, t.target);
      const std::string name = "base_model.model." + module_path(l, t.target);
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
  const std::string config_path = path_join(dir, kConfigFile);
  KOI_ASSIGN_OR_RETURN(std::string text, read_file(config_path));
  LoraConfig config;
  try {
    const json::object o = json::parse(text).as_object();
    if (o.at("peft_type").as_string() != "LORA") {
      return Status::unsupported(config_path + ": peft_type is not LORA; only LoRA adapters are supported");
    }
    config.rank = json::value_to<int>(o.at("r"));
    config.alpha = static_cast<float>(o.at("lora_alpha").to_number<double>());
    config.targets.clear();
    for (const json::value& name : o.at("target_modules").as_array()) {
      KOI_ASSIGN_OR_RETURN(LoraTarget t, lora_target_from_name(std::string_view(name.as_string())));
      config.targets.push_back(t);
    }
  } catch (const std::exception& e) {
    return Status::corrupt(config_path + ": not a PEFT LoRA config (needs peft_type, r, lora_alpha and a list " +
                           "target_modules): " + e.what());
  }
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
    for (const TargetInfo& t : kTargets) {
      if (!adapts(t.target)) continue;
      const Slot& s = slots_[static_cast<size_t>(l) * kNumLoraTargets + static_cast<size_t>(t.target)];
      const std::string name = module_path(l, t.target) + ".weight";
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
  KOI_RETURN_IF_ERROR(write_file_atomic(path_join(dir, kConfigFile), json::serialize(o)));
  return write_params(path_join(dir, kWeightsFile), layout_, params_);
}

Status LoraAdapters::load_params(const std::string& dir) {
  return read_params(path_join(dir, kWeightsFile), layout_, &params_);
}

}  // namespace koi::train
