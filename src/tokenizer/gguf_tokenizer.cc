// GGUF tokenizer.* metadata <-> TokenizerSpec, with llama.cpp's key names and defaults.
#include <algorithm>
#include <cstring>
#include <limits>
#include <unordered_map>

#include "base/file.h"
#include "tokenizer/hf_writer.h"
#include "tokenizer/load.h"
#include "tokenizer/unicode.h"

namespace koi::tokenizer {
namespace {

constexpr std::string_view kModel = "tokenizer.ggml.model";
constexpr std::string_view kPre = "tokenizer.ggml.pre";
constexpr std::string_view kTokens = "tokenizer.ggml.tokens";
constexpr std::string_view kScores = "tokenizer.ggml.scores";
constexpr std::string_view kTokenType = "tokenizer.ggml.token_type";
constexpr std::string_view kMerges = "tokenizer.ggml.merges";
constexpr std::string_view kBos = "tokenizer.ggml.bos_token_id";
constexpr std::string_view kEos = "tokenizer.ggml.eos_token_id";
constexpr std::string_view kUnk = "tokenizer.ggml.unknown_token_id";
constexpr std::string_view kPad = "tokenizer.ggml.padding_token_id";
constexpr std::string_view kEot = "tokenizer.ggml.eot_token_id";
constexpr std::string_view kEom = "tokenizer.ggml.eom_token_id";
constexpr std::string_view kAddBos = "tokenizer.ggml.add_bos_token";
constexpr std::string_view kAddEos = "tokenizer.ggml.add_eos_token";
constexpr std::string_view kAddSpacePrefix = "tokenizer.ggml.add_space_prefix";
constexpr std::string_view kChatTemplate = "tokenizer.chat_template";
// Koi's own key (llama.cpp ignores it and applies ignore_merges to "llama-bpe" by itself).
constexpr std::string_view kIgnoreMerges = "koi.tokenizer.ignore_merges";
// The whole pipeline, where the llama.cpp keys cannot hold it (spec_to_gguf).
constexpr std::string_view kKoiJson = "koi.tokenizer.json";
constexpr std::string_view kKoiConfigJson = "koi.tokenizer.config_json";

Result<std::optional<int32_t>> optional_id(const model::GgufFile& file, std::string_view key) {
  if (!file.has(key)) return std::optional<int32_t>();
  KOI_ASSIGN_OR_RETURN(int64_t v, file.get_int(key));
  if (v < 0 || v > std::numeric_limits<int32_t>::max()) {
    return Status::invalid_argument(file.path() + ": " + std::string(key) + " is " + std::to_string(v) +
                                    ", not a token id");
  }
  return std::optional<int32_t>(int32_t(v));
}

Result<bool> optional_bool(const model::GgufFile& file, std::string_view key, bool fallback) {
  if (!file.has(key)) return fallback;
  return file.get_bool(key);
}

}  // namespace

Result<TokenizerSpec> spec_from_gguf(const model::GgufFile& file) {
  if (file.has(kKoiJson)) {  // the whole pipeline, which the llama.cpp keys below do not hold
    KOI_ASSIGN_OR_RETURN(std::string json, file.get_string(kKoiJson));
    KOI_ASSIGN_OR_RETURN(std::string config, file.get_string(kKoiConfigJson));
    return hf_tokenizer_from_text(json, config, file.path() + ": " + std::string(kKoiJson));
  }
  TokenizerSpec spec;
  KOI_ASSIGN_OR_RETURN(std::string model, file.get_string(kModel));
  if (model == "llama") {
    spec.kind = TokenizerKind::kSentencePiece;
  } else if (model == "gpt2") {
    spec.kind = TokenizerKind::kBpeMerges;
    spec.byte_level = true;
  } else {
    return Status::unsupported(file.path() + ": " + std::string(kModel) + " is '" + model +
                               "'; Koi reads the 'llama' (SentencePiece) and 'gpt2' (byte-level BPE) tokenizers");
  }
  const bool spm = spec.kind == TokenizerKind::kSentencePiece;
  KOI_ASSIGN_OR_RETURN(spec.tokens, file.get_string_array(kTokens));
  if (spm || file.has(kScores)) {
    KOI_ASSIGN_OR_RETURN(spec.scores, file.get_float_array(kScores));
  }
  if (file.has(kTokenType)) {
    KOI_ASSIGN_OR_RETURN(std::vector<int64_t> types, file.get_int_array(kTokenType));
    for (int64_t t : types) {
      if (t < int64_t(TokenType::kNormal) || t > int64_t(TokenType::kByte)) {
        return Status::invalid_argument(file.path() + ": " + std::string(kTokenType) + " holds " +
                                        std::to_string(t) + ", not a token type (1..6)");
      }
      spec.types.push_back(TokenType(t));
    }
  }
  if (!spm) {
    KOI_ASSIGN_OR_RETURN(spec.merges, file.get_string_array(kMerges));
    spec.pre = "default";
    if (file.has(kPre)) {
      KOI_ASSIGN_OR_RETURN(spec.pre, file.get_string(kPre));
    }
  }
  KOI_ASSIGN_OR_RETURN(spec.bos_id, optional_id(file, kBos));
  KOI_ASSIGN_OR_RETURN(spec.eos_id, optional_id(file, kEos));
  KOI_ASSIGN_OR_RETURN(spec.unk_id, optional_id(file, kUnk));
  KOI_ASSIGN_OR_RETURN(spec.pad_id, optional_id(file, kPad));
  for (std::string_view key : {kEot, kEom}) {
    KOI_ASSIGN_OR_RETURN(std::optional<int32_t> id, optional_id(file, key));
    if (id) spec.eog_ids.push_back(*id);
  }
  KOI_ASSIGN_OR_RETURN(spec.add_bos, optional_bool(file, kAddBos, spm));
  KOI_ASSIGN_OR_RETURN(spec.add_eos, optional_bool(file, kAddEos, false));
  KOI_ASSIGN_OR_RETURN(spec.add_space_prefix, optional_bool(file, kAddSpacePrefix, spm));
  KOI_ASSIGN_OR_RETURN(spec.ignore_merges, optional_bool(file, kIgnoreMerges, false));
  if (file.has(kChatTemplate)) {
    KOI_ASSIGN_OR_RETURN(std::string chat_template, file.get_string(kChatTemplate));
    spec.chat_template = std::move(chat_template);
  }
  return spec;
}

namespace {

std::string_view step_name(const NormalizerStep& step) {
  using K = NormalizerStep::Kind;
  constexpr std::string_view kNames[] = {"NFC", "NFD", "NFKC", "NFKD", "Lowercase", "Strip", "Replace", "Prepend"};
  static_assert(std::size(kNames) == size_t(K::kPrepend) + 1);
  return kNames[size_t(step.kind)];
}
std::string_view step_name(const PreTokenizerStep& step) {
  using K = PreTokenizerStep::Kind;
  constexpr std::string_view kNames[] = {"Split",      "ByteLevel",       "Digits",   "Punctuation",
                                         "Whitespace", "WhitespaceSplit", "Metaspace"};
  static_assert(std::size(kNames) == size_t(K::kMetaspace) + 1);
  return kNames[size_t(step.kind)];
}
std::string_view step_name(const DecoderStep& step) {
  using K = DecoderStep::Kind;
  constexpr std::string_view kNames[] = {"ByteLevel", "Metaspace", "Replace", "Strip", "Fuse", "ByteFallback"};
  static_assert(std::size(kNames) == size_t(K::kByteFallback) + 1);
  return kNames[size_t(step.kind)];
}

// A ByteLevel pre-tokenizer with use_regex is a Split by the GPT-2 regex before it.
std::vector<PreTokenizerStep> expand_byte_level(const std::vector<PreTokenizerStep>& steps) {
  std::vector<PreTokenizerStep> out;
  for (PreTokenizerStep step : steps) {
    if (step.kind == PreTokenizerStep::Kind::kByteLevel && step.use_regex) {
      PreTokenizerStep split;
      split.pattern = pre_tokenizer_regexes("gpt2")->front();
      split.regex = true;
      out.push_back(split);
      step.use_regex = false;
    }
    out.push_back(step);
  }
  return out;
}

// Whether the normalizers leave no ' ' in any text: a literal Replace of ' ' by a content
// without one, after which no step can make a space again (a Unicode normalization can: NFKC
// turns U+00A0 into ' ').
bool normalized_text_has_no_space(const std::vector<NormalizerStep>& steps) {
  using K = NormalizerStep::Kind;
  bool none = false;
  for (const NormalizerStep& n : steps) {
    const bool adds_space = n.content.find(' ') != std::string::npos;
    if (n.kind == K::kReplace && !n.regex && n.pattern == " " && !adds_space) {
      none = true;
    } else if (((n.kind == K::kReplace || n.kind == K::kPrepend) && adds_space) || n.kind == K::kNfc ||
               n.kind == K::kNfd || n.kind == K::kNfkc || n.kind == K::kNfkd) {
      none = false;
    }
  }
  return none;
}

// The tokenizer's pre-tokenizers less leading Splits on a literal ' ' that cannot match: after
// Gemma's Replace(' ', '▁') normalizer its Split(' ') leaves every text whole.
std::vector<PreTokenizerStep> without_noop_space_splits(const TokenizerSpec& spec) {
  std::vector<PreTokenizerStep> steps = spec.pre_tokenizers;
  if (!normalized_text_has_no_space(spec.normalizers)) return steps;
  auto noop = [](const PreTokenizerStep& p) {
    return p.kind == PreTokenizerStep::Kind::kSplit && !p.regex && p.pattern == " " && !p.invert;
  };
  while (!steps.empty() && noop(steps.front())) steps.erase(steps.begin());
  return steps;
}

// Ok when `have` (the tokenizer's steps) equals `gguf` (what the GGUF file implies);
// otherwise an error naming the first step of `have` that differs.
template <typename Step>
Status same_steps(std::string_view stage, const std::vector<Step>& have, const std::vector<Step>& gguf,
                  std::string_view (*name)(const Step&)) {
  const size_t n = std::min(have.size(), gguf.size());
  size_t i = 0;
  while (i < n && have[i] == gguf[i]) ++i;
  if (i == have.size() && i == gguf.size()) return ok_status();
  const std::string step = " (step " + std::to_string(i + 1) + ")";
  const std::string what = i < have.size() ? "'" + std::string(name(have[i])) + "'" + step
                                           : "without '" + std::string(name(gguf[i])) + "'" + step;
  return Status::unsupported(
      "the tokenizer's " + std::string(stage) + " " + what + " cannot be written to GGUF's llama.cpp keys " +
      "('llama' or 'gpt2' with a known pre-tokenizer), so llama.cpp would encode differently");
}

}  // namespace

Status check_gguf_tokenizer(const TokenizerSpec& spec) {
  auto refuse = [](const std::string& what) {
    return Status::unsupported(what + ", which GGUF's llama.cpp keys cannot hold, so llama.cpp would encode "
                               "differently");
  };
  if (spec.kind == TokenizerKind::kUnigram) return refuse("the tokenizer's model is 'Unigram'");
  if (!spec.special_prefix.empty() || !spec.special_suffix.empty()) {
    return refuse("the post_processor 'TemplateProcessing' adds more around the text than one BOS and one EOS");
  }
  if (!spec.lstrip_ids.empty() || !spec.rstrip_ids.empty()) {
    const int32_t id = spec.lstrip_ids.empty() ? *spec.rstrip_ids.begin() : *spec.lstrip_ids.begin();
    return refuse("added token '" + spec.tokens[size_t(id)] + "' strips the spaces beside it (lstrip/rstrip)");
  }
  if (!spec.pipeline) return ok_status();  // its fields are the GGUF keys
  // What a reader of the file gets back: the pipeline the GGUF fields imply.
  TokenizerSpec back;
  back.kind = spec.kind == TokenizerKind::kBpeMerges && spec.byte_level ? TokenizerKind::kBpeMerges
                                                                         : TokenizerKind::kSentencePiece;
  back.byte_level = spec.byte_level;
  back.pre = spec.pre.empty() ? "default" : spec.pre;
  if (spec.byte_level && spec.pre.empty()) {
    return refuse("the tokenizer's pre_tokenizer regexes are not one of llama.cpp's pre-tokenizers (llama-bpe, qwen2, "
                  "gpt2)");
  }
  Pipeline gguf;
  KOI_RETURN_IF_ERROR(derive_pipeline(back, spec.add_space_prefix && !spec.byte_level, &gguf));
  KOI_RETURN_IF_ERROR(same_steps("normalizer", spec.normalizers, gguf.normalizers, step_name));
  KOI_RETURN_IF_ERROR(same_steps("pre_tokenizer", expand_byte_level(without_noop_space_splits(spec)),
                                 expand_byte_level(gguf.pre_tokenizers), step_name));
  return same_steps("decoder", spec.decoders, gguf.decoders, step_name);
}

Status spec_to_gguf(const TokenizerSpec& spec, model::GgufWriter& writer) {
  const bool byte_level_bpe = spec.kind == TokenizerKind::kBpeMerges && spec.byte_level;
  writer.set_string(std::string(kModel), byte_level_bpe ? "gpt2" : "llama");
  // llama.cpp knows the GPT-2 regex as "gpt-2" and refuses a file that says "gpt2".
  const std::string pre = spec.pre.empty() ? "default" : spec.pre == "gpt2" ? "gpt-2" : spec.pre;
  if (byte_level_bpe) writer.set_string(std::string(kPre), pre);
  writer.set_string_array(std::string(kTokens), spec.tokens);
  std::vector<float> scores = spec.scores;
  if (scores.empty() && !byte_level_bpe) {
    // Metaspace BPE written as SentencePiece: a token's score is minus the rank of the merge
    // that makes it, so that the best score is the first merge; other tokens never merge.
    scores.assign(spec.tokens.size(), -1e10f);
    std::unordered_map<std::string, size_t> ids;
    for (size_t i = 0; i < spec.tokens.size(); ++i) ids.emplace(spec.tokens[i], i);
    for (size_t rank = spec.merges.size(); rank-- > 0;) {
      const std::string& m = spec.merges[rank];
      size_t space = m.find(' ', 1);
      if (space == std::string::npos) continue;
      auto it = ids.find(m.substr(0, space) + m.substr(space + 1));
      if (it != ids.end()) scores[it->second] = -float(rank);
    }
    for (size_t i = 0; i < spec.tokens.size(); ++i) {
      const std::string& t = spec.tokens[i];
      if (scores[i] == -1e10f && !t.empty() && utf8_piece_len(t, 0) == t.size()) scores[i] = 0;  // one character
    }
  }
  if (!scores.empty()) writer.set_f32_array(std::string(kScores), scores);
  std::vector<int32_t> types;
  for (TokenType t : spec.types) types.push_back(int32_t(t));
  if (!types.empty()) writer.set_i32_array(std::string(kTokenType), types);
  if (spec.kind == TokenizerKind::kBpeMerges) writer.set_string_array(std::string(kMerges), spec.merges);
  for (auto [key, id] : {std::pair{kBos, spec.bos_id}, {kEos, spec.eos_id}, {kUnk, spec.unk_id}, {kPad, spec.pad_id}}) {
    if (id) writer.set_u32(std::string(key), uint32_t(*id));
  }
  writer.set_bool(std::string(kAddBos), spec.add_bos);
  writer.set_bool(std::string(kAddEos), spec.add_eos);
  if (!byte_level_bpe) writer.set_bool(std::string(kAddSpacePrefix), spec.add_space_prefix);
  if (spec.ignore_merges) writer.set_bool(std::string(kIgnoreMerges), true);
  if (spec.chat_template) writer.set_string(std::string(kChatTemplate), *spec.chat_template);
  if (check_gguf_tokenizer(spec).ok()) return ok_status();
  KOI_ASSIGN_OR_RETURN(std::string json, to_hf_tokenizer_json(spec));
  writer.set_string(std::string(kKoiJson), json);
  writer.set_string(std::string(kKoiConfigJson), to_hf_tokenizer_config_json(spec));
  return ok_status();
}

Result<Tokenizer> load_tokenizer(const std::string& path, int32_t vocab_size) {
  TokenizerSpec spec;
  if (is_directory(path)) {
    KOI_ASSIGN_OR_RETURN(spec, load_hf_tokenizer(path));
  } else {
    KOI_ASSIGN_OR_RETURN(MappedFile file, MappedFile::open(path));
    if (file.size() >= 4 && std::memcmp(file.data(), "GGUF", 4) == 0) {
      KOI_ASSIGN_OR_RETURN(model::GgufFile gguf, model::GgufFile::parse(file.data(), file.size(), path));
      KOI_ASSIGN_OR_RETURN(spec, spec_from_gguf(gguf));
    } else {
      KOI_ASSIGN_OR_RETURN(spec, load_llama2c_tokenizer(path, vocab_size));
    }
  }
  Result<Tokenizer> tokenizer = Tokenizer::create(std::move(spec));
  if (!tokenizer.ok()) return tokenizer.status().with_prefix(path);
  return tokenizer;
}

}  // namespace koi::tokenizer
