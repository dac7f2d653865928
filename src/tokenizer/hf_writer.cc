#include "tokenizer/hf_writer.h"

#include <boost/json.hpp>

#include <algorithm>
#include <unordered_map>

#include "base/file.h"
#include "tokenizer/unicode.h"

namespace koi::tokenizer {
namespace {

namespace json = boost::json;

constexpr std::string_view kSpaceMark = "\xE2\x96\x81";  // "▁"
// Tokenizer::encode merges a SentencePiece pair only when its token scores above this.
constexpr float kMinMergeScore = -1e10f;

bool is_mergeable(TokenType t) { return t == TokenType::kNormal || t == TokenType::kUserDefined; }
bool is_added(TokenType t) {
  return t == TokenType::kControl || t == TokenType::kUnknown || t == TokenType::kUserDefined;
}

std::string token_error(const TokenizerSpec& spec, size_t id, std::string_view why) {
  return "token " + std::to_string(id) + " '" + spec.tokens[id] + "' " + std::string(why);
}

// Texts that tokenizer.json maps to ids must be unique and valid UTF-8.
Status check_tokens(const TokenizerSpec& spec) {
  if (spec.types.size() != spec.tokens.size()) {
    return Status::invalid_argument("the spec has " + std::to_string(spec.tokens.size()) + " tokens but " +
                                    std::to_string(spec.types.size()) + " token types");
  }
  std::unordered_map<std::string_view, size_t> seen;
  for (size_t id = 0; id < spec.tokens.size(); ++id) {
    if (!valid_utf8(spec.tokens[id])) {
      return Status::unsupported(token_error(spec, id, "is not valid UTF-8; tokenizer.json holds UTF-8 text only"));
    }
    auto [it, added] = seen.emplace(spec.tokens[id], id);
    if (!added) {
      return Status::unsupported(token_error(spec, id, "has the text of token " + std::to_string(it->second) +
                                                           "; tokenizer.json maps each text to one id"));
    }
  }
  return ok_status();
}

struct Split {
  float score;
  int32_t merged;
  std::string left, right;
};

json::object added_token(const TokenizerSpec& spec, int32_t id) {
  return {{"id", id},
          {"content", spec.tokens[size_t(id)]},
          {"single_word", false},
          {"lstrip", spec.lstrip_ids.count(id) > 0},
          {"rstrip", spec.rstrip_ids.count(id) > 0},
          {"normalized", false},
          {"special", spec.types[size_t(id)] != TokenType::kUserDefined}};
}

json::value replace(std::string_view pattern, std::string_view content) {
  return json::object{{"type", "Replace"}, {"pattern", {{"String", pattern}}}, {"content", content}};
}

json::value template_processing(const TokenizerSpec& spec) {
  const std::vector<TemplateItem> single = single_template(spec, 'A', 0);
  if (single.size() == 1 && spec.pair_template.empty()) return nullptr;  // the text alone
  json::object specials;
  auto special = [&](const std::vector<int32_t>& ids, uint32_t type_id) {
    // A special token is named by its first token's text and maps to all its ids.
    const std::string& name = spec.tokens[size_t(ids.front())];
    json::array texts;
    for (int32_t id : ids) texts.push_back(json::string(spec.tokens[size_t(id)]));
    specials[name] = {{"id", name}, {"ids", json::array(ids.begin(), ids.end())}, {"tokens", texts}};
    return json::object{{"SpecialToken", {{"id", name}, {"type_id", type_id}}}};
  };
  auto items = [&](const std::vector<TemplateItem>& list) {
    json::array out;
    for (const TemplateItem& item : list) {
      out.push_back(item.tokens.empty()
                        ? json::object{{"Sequence", {{"id", std::string(1, item.sequence)}, {"type_id", item.type_id}}}}
                        : special(item.tokens, item.type_id));
    }
    return out;
  };
  return json::object{{"type", "TemplateProcessing"},
                      {"single", items(single)},
                      {"pair", items(pair_template(spec))},
                      {"special_tokens", specials}};
}

json::object pattern_json(const std::string& pattern, bool regex) {
  return {{regex ? "Regex" : "String", pattern}};
}

std::string_view behavior_name(SplitBehavior b) {
  switch (b) {
    case SplitBehavior::kRemoved: return "Removed";
    case SplitBehavior::kIsolated: return "Isolated";
    case SplitBehavior::kMergedWithPrevious: return "MergedWithPrevious";
    case SplitBehavior::kMergedWithNext: return "MergedWithNext";
    case SplitBehavior::kContiguous: return "Contiguous";
  }
  return "Isolated";
}

// Metaspace's options, in the current form (prepend_scheme) and the older one
// (add_prefix_space), which the JavaScript port still reads.
json::object metaspace_json(const std::string& replacement, PrependScheme scheme) {
  const std::string_view name = scheme == PrependScheme::kAlways  ? "always"
                                : scheme == PrependScheme::kFirst ? "first"
                                                                  : "never";
  return {{"type", "Metaspace"},
          {"replacement", replacement},
          {"add_prefix_space", scheme != PrependScheme::kNever},
          {"prepend_scheme", name}};
}

json::value normalizer_step_json(const NormalizerStep& step) {
  using K = NormalizerStep::Kind;
  switch (step.kind) {
    case K::kNfc: return json::object{{"type", "NFC"}};
    case K::kNfd: return json::object{{"type", "NFD"}};
    case K::kNfkc: return json::object{{"type", "NFKC"}};
    case K::kNfkd: return json::object{{"type", "NFKD"}};
    case K::kLowercase: return json::object{{"type", "Lowercase"}};
    case K::kStrip: return json::object{{"type", "Strip"}, {"strip_left", step.left}, {"strip_right", step.right}};
    case K::kReplace:
      return json::object{{"type", "Replace"}, {"pattern", pattern_json(step.pattern, step.regex)}, {"content", step.content}};
    case K::kPrepend: return json::object{{"type", "Prepend"}, {"prepend", step.content}};
  }
  return nullptr;
}

json::value pre_tokenizer_step_json(const PreTokenizerStep& step) {
  using K = PreTokenizerStep::Kind;
  switch (step.kind) {
    case K::kSplit:
      return json::object{{"type", "Split"},
                          {"pattern", pattern_json(step.pattern, step.regex)},
                          {"behavior", behavior_name(step.behavior)},
                          {"invert", step.invert}};
    case K::kByteLevel:
      return json::object{
          {"type", "ByteLevel"}, {"add_prefix_space", step.add_prefix_space}, {"trim_offsets", true}, {"use_regex", step.use_regex}};
    case K::kDigits: return json::object{{"type", "Digits"}, {"individual_digits", step.individual_digits}};
    case K::kPunctuation: return json::object{{"type", "Punctuation"}, {"behavior", behavior_name(step.behavior)}};
    case K::kWhitespace: return json::object{{"type", "Whitespace"}};
    case K::kWhitespaceSplit: return json::object{{"type", "WhitespaceSplit"}};
    case K::kMetaspace: {
      json::object m = metaspace_json(step.replacement, step.prepend_scheme);
      m["split"] = step.split;
      return m;
    }
  }
  return nullptr;
}

json::value decoder_step_json(const DecoderStep& step) {
  using K = DecoderStep::Kind;
  switch (step.kind) {
    case K::kByteLevel:
      return json::object{{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
    case K::kMetaspace: return metaspace_json(step.replacement, step.prepend_scheme);
    case K::kReplace:
      return json::object{{"type", "Replace"}, {"pattern", pattern_json(step.pattern, step.regex)}, {"content", step.content}};
    case K::kStrip: return json::object{{"type", "Strip"}, {"content", step.content}, {"start", step.start}, {"stop", step.stop}};
    case K::kFuse: return json::object{{"type", "Fuse"}};
    case K::kByteFallback: return json::object{{"type", "ByteFallback"}};
  }
  return nullptr;
}

// A pipeline stage: null without steps, the step alone, or a Sequence under `list_key`.
template <typename Step>
json::value stage_json(const std::vector<Step>& steps, std::string_view list_key, json::value (*one)(const Step&)) {
  if (steps.empty()) return nullptr;
  if (steps.size() == 1) return one(steps.front());
  json::array list;
  for (const Step& step : steps) list.push_back(one(step));
  return json::object{{"type", "Sequence"}, {list_key, std::move(list)}};
}

Result<json::value> pre_tokenizer_json(const TokenizerSpec& spec) {
  if (!spec.byte_level) return json::value(nullptr);
  std::vector<std::string> regexes = spec.pre_regexes;
  if (regexes.empty()) {
    auto table = pre_tokenizer_regexes(spec.pre);
    if (!table) return Status::unsupported("pre-tokenizer '" + spec.pre + "' is not known to Koi");
    regexes = *table;
  }
  json::array list;
  for (const std::string& r : regexes) {
    list.push_back({{"type", "Split"}, {"pattern", {{"Regex", r}}}, {"behavior", "Isolated"}, {"invert", false}});
  }
  list.push_back({{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}});
  return json::value{{"type", "Sequence"}, {"pretokenizers", list}};
}

json::value decoder_json(const TokenizerSpec& spec) {
  if (spec.byte_level) {
    return json::object{{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
  }
  json::array steps{replace(kSpaceMark, " "), json::object{{"type", "ByteFallback"}}, json::object{{"type", "Fuse"}}};
  if (spec.add_space_prefix) steps.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
  return json::object{{"type", "Sequence"}, {"decoders", steps}};
}

std::string optional_text(const TokenizerSpec& spec, std::optional<int32_t> id) {
  return id && *id >= 0 && size_t(*id) < spec.tokens.size() ? spec.tokens[size_t(*id)] : "";
}

}  // namespace

Result<TokenizerSpec> sentencepiece_to_bpe(const TokenizerSpec& spec) {
  if (spec.kind != TokenizerKind::kSentencePiece) return Status::invalid_argument("the spec is not SentencePiece");
  KOI_RETURN_IF_ERROR(check_tokens(spec));
  if (spec.scores.size() != spec.tokens.size()) {
    return Status::invalid_argument("the SentencePiece spec has " + std::to_string(spec.tokens.size()) +
                                    " tokens but " + std::to_string(spec.scores.size()) + " scores");
  }
  std::unordered_map<std::string_view, int32_t> mergeable;
  int bytes = 0;
  for (size_t id = 0; id < spec.tokens.size(); ++id) {
    const TokenType type = spec.types[id];
    if (is_mergeable(type)) mergeable.emplace(spec.tokens[id], int32_t(id));
    if (type == TokenType::kByte) ++bytes;
    // A BPE starts from every single-character token; SentencePiece from mergeable ones only.
    if (!is_mergeable(type) && type != TokenType::kByte &&
        utf8_char_len(uint8_t(spec.tokens[id][0])) == spec.tokens[id].size()) {
      return Status::unsupported(token_error(spec, id, "is one character but not a normal token; a BPE would "
                                                       "start from it where SentencePiece does not"));
    }
  }
  if (bytes != 256) {
    return Status::unsupported("the SentencePiece spec has " + std::to_string(bytes) +
                               " of the 256 byte tokens; without all of them SentencePiece and a BPE with "
                               "byte fallback encode unknown characters differently");
  }
  std::vector<Split> splits;
  for (const auto& [text, id] : mergeable) {
    if (!(spec.scores[size_t(id)] > kMinMergeScore)) continue;
    for (size_t cut = utf8_char_len(uint8_t(text[0])); cut < text.size(); cut += utf8_char_len(uint8_t(text[cut]))) {
      auto left = mergeable.find(text.substr(0, cut));
      auto right = mergeable.find(text.substr(cut));
      if (left == mergeable.end() || right == mergeable.end()) continue;
      if (text.find(' ') != std::string_view::npos) {
        return Status::unsupported(
            token_error(spec, size_t(id), "holds a space; a merge \"left right\" cannot name it"));
      }
      splits.push_back({spec.scores[size_t(id)], id, std::string(left->first), std::string(right->first)});
    }
  }
  // Best score first; a token's splits by the length of their left part.
  std::sort(splits.begin(), splits.end(), [](const Split& a, const Split& b) {
    if (a.score != b.score) return a.score > b.score;
    if (a.merged != b.merged) return a.merged < b.merged;
    return a.left.size() < b.left.size();
  });
  TokenizerSpec out = spec;
  out.kind = TokenizerKind::kBpeMerges;
  out.byte_level = false;
  out.ignore_merges = false;
  out.pre.clear();
  out.pre_regexes.clear();
  for (size_t i = 0; i < splits.size(); ++i) {
    if (i > 0 && splits[i].score == splits[i - 1].score && splits[i].merged != splits[i - 1].merged) {
      return Status::unsupported(
          token_error(spec, size_t(splits[i].merged),
                      "has the score of token " + std::to_string(splits[i - 1].merged) + " (" +
                          std::to_string(splits[i].score) +
                          "): SentencePiece merges the leftmost of tied pairs, which a BPE merges list cannot "
                          "express"));
    }
    out.merges.push_back(splits[i].left + " " + splits[i].right);
  }
  return out;
}

namespace {

bool has_byte_tokens(const TokenizerSpec& spec) {
  return std::any_of(spec.types.begin(), spec.types.end(), [](TokenType t) { return t == TokenType::kByte; });
}

Result<json::value> merges_json(const TokenizerSpec& spec) {
  json::array merges;
  for (size_t rank = 0; rank < spec.merges.size(); ++rank) {
    const std::string& m = spec.merges[rank];
    const size_t space = m.find(' ', 1);
    if (space == std::string::npos) {
      return Status::invalid_argument("merge " + std::to_string(rank) + " '" + m + "' is not of the form 'left right'");
    }
    merges.push_back({m.substr(0, space), m.substr(space + 1)});
  }
  return json::value(std::move(merges));
}

// The "model": BPE (vocab {text: id}, merges) or Unigram (vocab [[text, score]] by id).
Result<json::object> model_json(const TokenizerSpec& spec) {
  const std::string unk = optional_text(spec, spec.unk_id);
  const bool byte_fallback = spec.pipeline ? has_byte_tokens(spec) : !spec.byte_level;
  if (spec.kind == TokenizerKind::kUnigram) {
    if (spec.scores.size() != spec.tokens.size()) {
      return Status::invalid_argument("the Unigram spec has " + std::to_string(spec.tokens.size()) + " tokens but " +
                                      std::to_string(spec.scores.size()) + " scores");
    }
    json::array vocab;
    for (size_t id = 0; id < spec.tokens.size(); ++id) vocab.push_back({spec.tokens[id], spec.scores[id]});
    return json::object{{"type", "Unigram"},
                        {"unk_id", spec.unk_id ? json::value(*spec.unk_id) : json::value(nullptr)},
                        {"vocab", std::move(vocab)},
                        {"byte_fallback", byte_fallback}};
  }
  json::object vocab;
  for (size_t id = 0; id < spec.tokens.size(); ++id) {
    // Ids the source left without a token (filled as unused) stay gaps.
    if (spec.pipeline && spec.types[id] == TokenType::kUnused) continue;
    vocab[spec.tokens[id]] = id;
  }
  KOI_ASSIGN_OR_RETURN(json::value merges, merges_json(spec));
  return json::object{{"type", "BPE"},
                      {"dropout", nullptr},
                      {"unk_token", unk.empty() ? json::value(nullptr) : json::value(unk)},
                      {"continuing_subword_prefix", nullptr},
                      {"end_of_word_suffix", nullptr},
                      {"fuse_unk", false},
                      {"byte_fallback", byte_fallback},
                      {"ignore_merges", spec.ignore_merges},
                      {"vocab", std::move(vocab)},
                      {"merges", std::move(merges)}};
}

// Normalizer, pre-tokenizer and decoder of a spec without a pipeline, from its fields.
Status legacy_stages_json(const TokenizerSpec& spec, json::object* root) {
  if (!spec.byte_level && spec.pre_regexes.size() + spec.pre.size() > 0) {
    return Status::unsupported("a metaspace tokenizer with a regex pre-tokenizer cannot be written as tokenizer.json");
  }
  KOI_ASSIGN_OR_RETURN((*root)["pre_tokenizer"], pre_tokenizer_json(spec));
  json::value normalizer = nullptr;
  if (!spec.byte_level) {
    json::value space = replace(" ", kSpaceMark);
    normalizer = spec.add_space_prefix
                     ? json::value(json::object{
                           {"type", "Sequence"},
                           {"normalizers", {json::object{{"type", "Prepend"}, {"prepend", kSpaceMark}}, space}}})
                     : space;
  }
  (*root)["normalizer"] = std::move(normalizer);
  (*root)["decoder"] = decoder_json(spec);
  return ok_status();
}

// The spec's own pipeline, step for step (what load_hf_tokenizer read).
void pipeline_stages_json(const TokenizerSpec& spec, json::object* root) {
  (*root)["normalizer"] = stage_json(spec.normalizers, "normalizers", normalizer_step_json);
  (*root)["pre_tokenizer"] = stage_json(spec.pre_tokenizers, "pretokenizers", pre_tokenizer_step_json);
  (*root)["decoder"] = stage_json(spec.decoders, "decoders", decoder_step_json);
}

}  // namespace

Result<std::string> to_hf_tokenizer_json(const TokenizerSpec& input) {
  TokenizerSpec converted;
  if (input.kind == TokenizerKind::kSentencePiece) {
    KOI_ASSIGN_OR_RETURN(converted, sentencepiece_to_bpe(input));
  }
  const TokenizerSpec& spec = input.kind == TokenizerKind::kSentencePiece ? converted : input;
  if (spec.kind == TokenizerKind::kUnigram && !spec.pipeline) {
    return Status::invalid_argument("a Unigram spec needs its Hugging Face pipeline");
  }
  KOI_RETURN_IF_ERROR(check_tokens(spec));
  json::array added;
  for (size_t id = 0; id < spec.tokens.size(); ++id) {
    if (is_added(spec.types[id])) added.push_back(added_token(spec, int32_t(id)));
  }
  json::object root{{"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr}, {"added_tokens", std::move(added)}};
  if (spec.pipeline) {
    pipeline_stages_json(spec, &root);
  } else {
    KOI_RETURN_IF_ERROR(legacy_stages_json(spec, &root));
  }
  root["post_processor"] = template_processing(spec);
  KOI_ASSIGN_OR_RETURN(root["model"], model_json(spec));
  return json::serialize(root);
}

std::string to_hf_tokenizer_config_json(const TokenizerSpec& spec) {
  json::object config{{"tokenizer_class", "PreTrainedTokenizerFast"},
                      {"add_bos_token", spec.add_bos},
                      {"add_eos_token", spec.add_eos},
                      {"clean_up_tokenization_spaces", false}};
  for (auto [key, id] : {std::pair{"bos_token", spec.bos_id}, {"eos_token", spec.eos_id},
                         {"unk_token", spec.unk_id}, {"pad_token", spec.pad_id}}) {
    const std::string text = optional_text(spec, id);
    config[key] = text.empty() ? json::value(nullptr) : json::value(text);
  }
  if (spec.chat_template) config["chat_template"] = *spec.chat_template;
  return json::serialize(config);
}

Status write_hf_tokenizer(const TokenizerSpec& spec, const std::string& dir) {
  KOI_ASSIGN_OR_RETURN(std::string tokenizer, to_hf_tokenizer_json(spec));
  KOI_RETURN_IF_ERROR(write_file_atomic(path_join(dir, "tokenizer.json"), tokenizer));
  return write_file_atomic(path_join(dir, "tokenizer_config.json"), to_hf_tokenizer_config_json(spec));
}

}  // namespace koi::tokenizer
