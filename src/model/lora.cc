#include "model/lora.h"

#include <algorithm>
#include <boost/json.hpp>
#include <cmath>
#include <cstring>
#include <map>

#include "base/file.h"
#include "model/safetensors.h"
#include "tensor/dtype.h"

namespace koi::model {
namespace {

namespace json = boost::json;

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

// PEFT keys that change what an adapter computes and that Koi does not implement: present
// with a value other than the "off" one, they are refused.
bool is_off(const json::value& v) {
  if (v.is_null()) return true;
  if (v.is_bool()) return !v.as_bool();
  if (v.is_string()) return v.as_string() == "none";
  if (v.is_object()) return v.as_object().empty();
  if (v.is_array()) return v.as_array().empty();
  return false;
}
constexpr const char* kUnsupportedKeys[] = {"use_dora", "fan_in_fan_out", "modules_to_save", "rank_pattern",
                                            "alpha_pattern", "layers_to_transform", "bias"};

Result<LoraFileConfig> parse_lora_config(const std::string& path, const std::string& text) {
  boost::system::error_code ec;
  json::value v = json::parse(text, ec);
  if (ec || !v.is_object()) return Status::corrupt(path + ": not a JSON object");
  const json::object& o = v.as_object();
  const json::value* type = o.if_contains("peft_type");
  if (type == nullptr || !type->is_string() || type->as_string() != "LORA") {
    return Status::unsupported(path + ": peft_type is not LORA; only LoRA adapters are supported");
  }
  for (const char* key : kUnsupportedKeys) {
    if (const json::value* value = o.if_contains(key); value != nullptr && !is_off(*value)) {
      return Status::unsupported(path + ": " + key + " = " + json::serialize(*value) +
                                 " is not supported; Koi serves plain LoRA adapters");
    }
  }
  LoraFileConfig c;
  const json::value* r = o.if_contains("r");
  if (r == nullptr || !r->is_int64() || r->as_int64() < 1 || r->as_int64() > kernels::kMaxLoraRank) {
    return Status::corrupt(path + ": r must be an integer in [1, " + std::to_string(kernels::kMaxLoraRank) + "]");
  }
  c.rank = static_cast<int>(r->as_int64());
  const json::value* alpha = o.if_contains("lora_alpha");
  if (alpha == nullptr || !alpha->is_number() || alpha->to_number<double>() <= 0) {
    return Status::corrupt(path + ": lora_alpha must be a positive number");
  }
  c.alpha = static_cast<float>(alpha->to_number<double>());
  if (const json::value* rs = o.if_contains("use_rslora"); rs != nullptr && rs->is_bool()) c.rslora = rs->as_bool();
  const json::value* modules = o.if_contains("target_modules");
  if (modules == nullptr || !modules->is_array() || modules->as_array().empty()) {
    return Status::unsupported(path + ": target_modules must be a non-empty list of module names (q_proj, "
                               "k_proj, ...); a regular expression is not supported");
  }
  for (const json::value& name : modules->as_array()) {
    if (!name.is_string()) return Status::corrupt(path + ": target_modules holds a non-string");
    auto t = lora_target_from_name(std::string_view(name.as_string()));
    if (!t.ok()) return t.status().with_prefix(path + ": target_modules");
    if (std::find(c.targets.begin(), c.targets.end(), *t) == c.targets.end()) c.targets.push_back(*t);
  }
  return c;
}

// Rows of B (out, r) of a q or k projection, from rotate-half order to interleaved pairs.
void permute_rows_for_interleaved_rope(float* rows, int64_t width, int64_t n_heads, int64_t head_dim) {
  const std::vector<float> src(rows, rows + n_heads * head_dim * width);
  const int64_t half = head_dim / 2;
  for (int64_t head_idx = 0; head_idx < n_heads; ++head_idx) {
    for (int64_t pair = 0; pair < half; ++pair) {
      for (int64_t part = 0; part < 2; ++part) {
        const int64_t from = head_idx * head_dim + part * half + pair;
        const int64_t to = head_idx * head_dim + 2 * pair + part;
        std::memcpy(rows + to * width, src.data() + from * width, static_cast<size_t>(width) * sizeof(float));
      }
    }
  }
}

// The tensor's values as f32, row-major, after checking it is (rows, cols) of a float type.
Result<std::vector<float>> read_matrix(const SafetensorsFile& file, const std::string& name, int64_t rows,
                                       int64_t cols) {
  const SafetensorsTensor* t = file.find(name);
  if (t == nullptr) return Status::corrupt(file.path() + ": tensor " + name + " is missing");
  const TensorView& v = t->view;
  if (v.type != DType::kF32 && v.type != DType::kF16 && v.type != DType::kBF16) {
    return Status::unsupported(file.path() + ": tensor " + name + " has type " + std::string(dtype_name(v.type)) +
                               "; LoRA tensors must be f32, f16 or bf16");
  }
  if (v.n_dims != 2 || v.ne[0] != cols || v.ne[1] != rows) {
    return Status::corrupt(file.path() + ": tensor " + name + " has shape " + v.shape_string() + ", expected [" +
                           std::to_string(cols) + ", " + std::to_string(rows) +
                           "] (ggml order); the adapter does not belong to this model");
  }
  std::vector<float> out(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) dequantize_row(v.type, v.row(r), out.data() + r * cols, cols);
  return out;
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

std::string lora_module_path(int layer, LoraTarget target) {
  return "model.layers." + std::to_string(layer) + "." + info(target).module;
}

std::pair<int64_t, int64_t> lora_projection_shape(const ModelConfig& c, LoraTarget target) {
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

float LoraFileConfig::scale() const {
  return rslora ? alpha / std::sqrt(static_cast<float>(rank)) : alpha / static_cast<float>(rank);
}

Result<LoraFileConfig> read_lora_config(const std::string& dir) {
  const std::string path = path_join(dir, kLoraConfigFile);
  KOI_ASSIGN_OR_RETURN(std::string text, read_file(path));
  return parse_lora_config(path, text);
}

Result<LoraAdapter> LoraAdapter::load(const std::string& dir, const ModelConfig& model) {
  LoraAdapter a;
  KOI_ASSIGN_OR_RETURN(a.config_, read_lora_config(dir));
  KOI_RETURN_IF_ERROR(a.read_tensors(path_join(dir, kLoraWeightsFile), model));
  return a;
}

Status LoraAdapter::read_tensors(const std::string& path, const ModelConfig& model) {
  KOI_ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::open(path));
  const int64_t r = config_.rank;
  std::map<std::string, bool> expected;  // tensor name -> seen
  std::vector<int64_t> offsets;          // per (layer, target): A at offsets[i], B^T after it; -1: none
  int64_t total = 0;
  for (int layer = 0; layer < model.n_layers; ++layer) {
    for (const TargetInfo& t : kTargets) {
      const bool adapted = std::find(config_.targets.begin(), config_.targets.end(), t.target) != config_.targets.end();
      offsets.push_back(adapted ? total : -1);
      if (!adapted) continue;
      const auto [in, out] = lora_projection_shape(model, t.target);
      total += r * (in + out);
    }
  }
  weights_.assign(static_cast<size_t>(total), 0.0f);
  slots_.assign(offsets.size(), kernels::LoraMatrices{});
  for (int layer = 0; layer < model.n_layers; ++layer) {
    for (const TargetInfo& t : kTargets) {
      const size_t slot = static_cast<size_t>(layer) * kNumLoraTargets + static_cast<size_t>(t.target);
      if (offsets[slot] < 0) continue;
      const auto [in, out] = lora_projection_shape(model, t.target);
      const std::string name = "base_model.model." + lora_module_path(layer, t.target);
      KOI_ASSIGN_OR_RETURN(std::vector<float> a, read_matrix(file, name + ".lora_A.weight", r, in));
      KOI_ASSIGN_OR_RETURN(std::vector<float> b, read_matrix(file, name + ".lora_B.weight", out, r));
      expected[name + ".lora_A.weight"] = expected[name + ".lora_B.weight"] = true;
      const bool qk = t.target == LoraTarget::kQ || t.target == LoraTarget::kK;
      if (qk && model.rope_style == kernels::RopeStyle::kInterleaved) {
        permute_rows_for_interleaved_rope(b.data(), r, t.target == LoraTarget::kQ ? model.n_heads : model.n_kv_heads,
                                          model.head_dim);
      }
      float* dst_a = weights_.data() + offsets[slot];
      float* dst_bt = dst_a + r * in;
      std::copy(a.begin(), a.end(), dst_a);
      for (int64_t o = 0; o < out; ++o) {
        for (int64_t k = 0; k < r; ++k) dst_bt[k * out + o] = b[static_cast<size_t>(o * r + k)];
      }
      slots_[slot] = {dst_a, dst_bt, config_.rank, config_.scale()};
    }
  }
  for (const SafetensorsTensor& t : file.tensors()) {
    if (!expected.count(t.name)) {
      return Status::unsupported(path + ": tensor " + t.name + " is not an A or B of a target module of this " +
                                 "model's layers; only LoRA A/B matrices of target_modules are served");
    }
  }
  return ok_status();
}

}  // namespace koi::model
