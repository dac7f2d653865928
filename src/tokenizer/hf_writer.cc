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
  const bool bos = spec.add_bos && spec.bos_id;
  const bool eos = spec.add_eos && spec.eos_id;
  if (!bos && !eos) return nullptr;
  json::array single, pair;
  json::object specials;
  auto special = [&](int32_t id) {
    const std::string& text = spec.tokens[size_t(id)];
    specials[text] = {{"id", text}, {"ids", {id}}, {"tokens", {text}}};
    return json::object{{"SpecialToken", {{"id", text}, {"type_id", 0}}}};
  };
  auto sequence = [](std::string_view which) { return json::object{{"Sequence", {{"id", which}, {"type_id", 0}}}}; };
  for (std::string_view which : {"A", "B"}) {
    json::array& items = which == "A" ? single : pair;
    if (bos) items.push_back(special(*spec.bos_id));
    items.push_back(sequence(which));
    if (eos) items.push_back(special(*spec.eos_id));
  }
  pair.insert(pair.begin(), single.begin(), single.end());
  return json::object{{"type", "TemplateProcessing"}, {"single", single}, {"pair", pair}, {"special_tokens", specials}};
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

Result<std::string> to_hf_tokenizer_json(const TokenizerSpec& input) {
  if (input.kind == TokenizerKind::kUnigram) {
    return Status::unsupported("writing a Unigram tokenizer is not supported; keep its own tokenizer.json");
  }
  TokenizerSpec converted;
  if (input.kind == TokenizerKind::kSentencePiece) {
    KOI_ASSIGN_OR_RETURN(converted, sentencepiece_to_bpe(input));
  }
  const TokenizerSpec& spec = input.kind == TokenizerKind::kSentencePiece ? converted : input;
  KOI_RETURN_IF_ERROR(check_tokens(spec));
  if (!spec.byte_level && spec.pre_regexes.size() + spec.pre.size() > 0) {
    return Status::unsupported("a metaspace tokenizer with a regex pre-tokenizer cannot be written as tokenizer.json");
  }
  KOI_ASSIGN_OR_RETURN(json::value pre_tokenizer, pre_tokenizer_json(spec));

  json::object vocab;
  json::array added;
  for (size_t id = 0; id < spec.tokens.size(); ++id) {
    vocab[spec.tokens[id]] = id;
    if (is_added(spec.types[id])) added.push_back(added_token(spec, int32_t(id)));
  }
  json::array merges;
  for (size_t rank = 0; rank < spec.merges.size(); ++rank) {
    const std::string& m = spec.merges[rank];
    const size_t space = m.find(' ', 1);
    if (space == std::string::npos) {
      return Status::invalid_argument("merge " + std::to_string(rank) + " '" + m + "' is not of the form 'left right'");
    }
    merges.push_back({m.substr(0, space), m.substr(space + 1)});
  }
  const std::string unk = optional_text(spec, spec.unk_id);
  json::object model{{"type", "BPE"},
                     {"dropout", nullptr},
                     {"unk_token", unk.empty() ? json::value(nullptr) : json::value(unk)},
                     {"continuing_subword_prefix", nullptr},
                     {"end_of_word_suffix", nullptr},
                     {"fuse_unk", false},
                     {"byte_fallback", !spec.byte_level},
                     {"ignore_merges", spec.ignore_merges},
                     {"vocab", std::move(vocab)},
                     {"merges", std::move(merges)}};
  json::value normalizer = nullptr;
  if (!spec.byte_level) {
    json::value space = replace(" ", kSpaceMark);
    normalizer = spec.add_space_prefix
                     ? json::value(json::object{
                           {"type", "Sequence"},
                           {"normalizers", {json::object{{"type", "Prepend"}, {"prepend", kSpaceMark}}, space}}})
                     : space;
  }
  json::object root{{"version", "1.0"},
                    {"truncation", nullptr},
                    {"padding", nullptr},
                    {"added_tokens", std::move(added)},
                    {"normalizer", std::move(normalizer)},
                    {"pre_tokenizer", std::move(pre_tokenizer)},
                    {"post_processor", template_processing(spec)},
                    {"decoder", decoder_json(spec)},
                    {"model", std::move(model)}};
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
