#include "engine/loaded_model.h"

#include <boost/json.hpp>

#include "base/file.h"
#include "model/gguf.h"
#include "model/loader.h"
#include "tokenizer/load.h"

namespace koi::engine {
namespace {

// generation_config.json: defaults for sampling and extra end-of-generation ids are read by
// the tokenizer loader; here only the sampling defaults.
GenerationDefaults read_generation_config(const std::string& dir) {
  GenerationDefaults d;
  auto text = read_file(path_join(dir, "generation_config.json"));
  if (!text.ok()) return d;
  boost::system::error_code ec;
  boost::json::value v = boost::json::parse(*text, ec);
  if (ec || !v.is_object()) return d;
  const auto& o = v.as_object();
  auto num = [&](const char* key) -> std::optional<double> {
    const auto* x = o.if_contains(key);
    if (x == nullptr) return std::nullopt;
    if (x->is_double()) return x->as_double();
    if (x->is_int64()) return static_cast<double>(x->as_int64());
    return std::nullopt;
  };
  if (auto t = num("temperature")) d.temperature = static_cast<float>(*t);
  if (auto p = num("top_p")) d.top_p = static_cast<float>(*p);
  if (auto k = num("top_k")) d.top_k = static_cast<int>(*k);
  return d;
}

}  // namespace

Result<tokenizer::TokenizerSpec> load_tokenizer_spec(const std::string& path) {
  if (model::detect_format(path) == model::ModelFormat::kGguf) {
    KOI_ASSIGN_OR_RETURN(model::GgufFile gguf, model::GgufFile::open(path));
    return tokenizer::spec_from_gguf(gguf);
  }
  if (!file_exists(path_join(path, "tokenizer.json"))) {
    return Status::not_found(path + ": tokenizer.json is missing; Koi needs the model's own tokenizer beside "
                             "config.json");
  }
  return tokenizer::load_hf_tokenizer(path);
}

Result<LoadedModel> load_model(const std::string& path) {
  KOI_ASSIGN_OR_RETURN(model::LoadedWeights weights, model::load_weights(path));
  KOI_ASSIGN_OR_RETURN(tokenizer::TokenizerSpec spec, load_tokenizer_spec(path));
  GenerationDefaults defaults;
  if (model::detect_format(path) == model::ModelFormat::kHuggingFace) defaults = read_generation_config(path);
  KOI_ASSIGN_OR_RETURN(tokenizer::Tokenizer tok, tokenizer::Tokenizer::create(std::move(spec)));
  if (tok.n_vocab() > weights.config.n_vocab) {
    return Status::corrupt(path + ": the tokenizer has " + std::to_string(tok.n_vocab()) +
                           " tokens but the model's vocabulary is " + std::to_string(weights.config.n_vocab));
  }
  LoadedModel out{path, std::make_unique<model::LlamaModel>(weights.config, std::move(weights.weights)),
                  std::move(tok), defaults};
  return out;
}

}  // namespace koi::engine
