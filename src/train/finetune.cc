#include "train/finetune.h"

#include <cstring>
#include <vector>

#include "model/loader.h"
#include "tokenizer/load.h"

namespace koi::train {
namespace {

// Reorders the rows (each `width` floats) of every head from the interleaved rope layout
// (pair i is rows 2i and 2i + 1) to the rotate-half layout (rows i and i + head_dim/2): the
// inverse of the GGUF export's permutation.
void to_rotate_half(float* rows, int64_t width, int64_t n_heads, int64_t head_dim) {
  const int64_t half = head_dim / 2;
  const std::vector<float> src(rows, rows + n_heads * head_dim * width);
  for (int64_t head_idx = 0; head_idx < n_heads; ++head_idx) {
    for (int64_t pair = 0; pair < half; ++pair) {
      for (int64_t part = 0; part < 2; ++part) {
        const int64_t from = head_idx * head_dim + 2 * pair + part;
        const int64_t to = head_idx * head_dim + part * half + pair;
        std::memcpy(rows + to * width, src.data() + from * width, static_cast<size_t>(width) * sizeof(float));
      }
    }
  }
}

}  // namespace

Result<BaseModel> load_base_model(const std::string& path) {
  KOI_ASSIGN_OR_RETURN(model::LoadedWeights loaded, model::load_weights(path));
  KOI_ASSIGN_OR_RETURN(tokenizer::Tokenizer tok, tokenizer::load_tokenizer(path));
  BaseModel base;
  base.config = loaded.config;
  base.stored_rope = loaded.config.rope_style;
  base.config.rope_style = kernels::RopeStyle::kNeox;
  base.weights = std::move(loaded.weights);
  base.tokenizer = tok.spec();
  return base;
}

Status load_base_weights(const BaseModel& base, LlamaTrain* model) {
  Status loaded = model->load(base.weights);
  if (!loaded.ok()) return loaded.with_prefix("model.init_from");
  if (base.stored_rope == kernels::RopeStyle::kNeox) return ok_status();
  const model::ModelConfig& c = base.config;
  for (const ParamTensor& t : model->layout()) {
    const bool q = t.name.ends_with("q_proj.weight") || t.name.ends_with("q_proj.bias");
    const bool k = t.name.ends_with("k_proj.weight") || t.name.ends_with("k_proj.bias");
    if (!q && !k) continue;
    const int64_t width = t.shape.size() == 2 ? t.shape[1] : 1;
    to_rotate_half(model->params().data() + t.offset, width, q ? c.n_heads : c.n_kv_heads, c.head_dim);
  }
  return ok_status();
}

}  // namespace koi::train
