// Hugging Face tokenizer.json + tokenizer_config.json -> TokenizerSpec with its pipeline.
//
// Supported: model types "BPE" and "Unigram"; the normalizers, pre-tokenizers and decoders
// of spec.h (NormalizerStep, PreTokenizerStep, DecoderStep) and Sequences of them; the
// post-processors TemplateProcessing (its "single" template: the special tokens around the
// text; its "pair" template for Tokenizer::encode_pair), ByteLevel (it changes offsets only) and
// a Sequence of those. Anything else is refused with the component's name. Besides the
// pipeline the loader fills the byte_level / add_space_prefix / pre fields the GGUF and
// tokenizer.json writers use, as far as they describe it.
#include <boost/json.hpp>

#include <algorithm>
#include <functional>
#include <map>
#include <unordered_map>

#include "base/file.h"
#include "tokenizer/load.h"
#include "tokenizer/unicode.h"

namespace koi::tokenizer {
namespace {

namespace json = boost::json;

constexpr std::string_view kSpaceMark = "\xE2\x96\x81";

// The GPT-2 pattern a ByteLevel pre-tokenizer applies when use_regex is true.
const std::string& gpt2_regex() {
  static const std::string regex = pre_tokenizer_regexes("gpt2")->front();
  return regex;
}

// `text` as a JSON object; `where` names its source in errors.
Result<json::value> parse_json_object(std::string_view text, const std::string& where) {
  boost::system::error_code ec;
  json::value v = json::parse(text, ec);
  if (ec) {
    return Status::invalid_argument(where + ": invalid JSON (" + ec.message() +
                                    "); the file is damaged, download it again");
  }
  if (!v.is_object()) return Status::invalid_argument(where + ": expected a JSON object at the top");
  return v;
}

Result<json::value> parse_json_file(const std::string& path) {
  KOI_ASSIGN_OR_RETURN(std::string text, read_file(path));
  return parse_json_object(text, path);
}

const json::value* member(const json::value& v, std::string_view key) {
  if (!v.is_object()) return nullptr;
  const json::value* m = v.as_object().if_contains(key);
  return m != nullptr && !m->is_null() ? m : nullptr;
}

std::string string_or(const json::value* v, std::string fallback) {
  return v != nullptr && v->is_string() ? std::string(v->as_string()) : fallback;
}

bool bool_or(const json::value* v, bool fallback) {
  return v != nullptr && v->is_bool() ? v->as_bool() : fallback;
}

// A token in tokenizer_config.json: "<s>" or {"content": "<s>", ...}.
std::string config_token(const json::value& config, std::string_view key) {
  const json::value* v = member(config, key);
  if (v != nullptr && v->is_object()) return string_or(member(*v, "content"), "");
  return string_or(v, "");
}

Status unsupported(std::string_view component, const std::string& type, std::string_view supported) {
  return Status::unsupported(std::string(component) + " '" + type + "' is not supported (supported: " +
                             std::string(supported) + ")");
}

// A pattern: {"String": "..."} or {"Regex": "..."}.
Status read_pattern(const json::value& v, std::string_view where, std::string* pattern, bool* regex) {
  const json::value* p = member(v, "pattern");
  const json::value* str = p != nullptr ? member(*p, "String") : nullptr;
  const json::value* re = p != nullptr ? member(*p, "Regex") : nullptr;
  if (str != nullptr && str->is_string()) {
    *pattern = std::string(str->as_string());
    *regex = false;
  } else if (re != nullptr && re->is_string()) {
    *pattern = std::string(re->as_string());
    *regex = true;
  } else {
    return Status::invalid_argument(std::string(where) + " has no \"pattern\" {\"String\"} or {\"Regex\"}");
  }
  return ok_status();
}

// The members of a Sequence, or the one component.
Result<std::vector<const json::value*>> flatten(const json::value& v, std::string_view list_key,
                                                std::string_view component) {
  std::vector<const json::value*> out;
  if (string_or(member(v, "type"), "") != "Sequence") {
    out.push_back(&v);
    return out;
  }
  const json::value* list = member(v, list_key);
  if (list == nullptr || !list->is_array()) {
    return Status::invalid_argument(std::string(component) + " Sequence has no \"" + std::string(list_key) + "\" list");
  }
  for (const json::value& item : list->as_array()) {
    KOI_ASSIGN_OR_RETURN(std::vector<const json::value*> inner, flatten(item, list_key, component));
    out.insert(out.end(), inner.begin(), inner.end());
  }
  return out;
}

Result<PrependScheme> read_prepend_scheme(const json::value& v, std::string_view component) {
  const json::value* scheme = member(v, "prepend_scheme");
  if (scheme == nullptr) {  // the older form: add_prefix_space
    return bool_or(member(v, "add_prefix_space"), true) ? PrependScheme::kAlways : PrependScheme::kNever;
  }
  std::string s = string_or(scheme, "");
  if (s == "always") return PrependScheme::kAlways;
  if (s == "first") return PrependScheme::kFirst;
  if (s == "never") return PrependScheme::kNever;
  return Status::invalid_argument(std::string(component) + " Metaspace prepend_scheme '" + s +
                                  "' is not one of always, first, never");
}

Status read_normalizers(const json::value& root, std::vector<NormalizerStep>* out) {
  const json::value* n = member(root, "normalizer");
  if (n == nullptr) return ok_status();
  KOI_ASSIGN_OR_RETURN(std::vector<const json::value*> items, flatten(*n, "normalizers", "normalizer"));
  for (const json::value* item : items) {
    std::string type = string_or(member(*item, "type"), "");
    NormalizerStep step;
    using K = NormalizerStep::Kind;
    if (type == "NFC") {
      step.kind = K::kNfc;
    } else if (type == "NFD") {
      step.kind = K::kNfd;
    } else if (type == "NFKC") {
      step.kind = K::kNfkc;
    } else if (type == "NFKD") {
      step.kind = K::kNfkd;
    } else if (type == "Lowercase") {
      step.kind = K::kLowercase;
    } else if (type == "Strip") {
      step.kind = K::kStrip;
      step.left = bool_or(member(*item, "strip_left"), false);
      step.right = bool_or(member(*item, "strip_right"), false);
    } else if (type == "Replace") {
      step.kind = K::kReplace;
      KOI_RETURN_IF_ERROR(read_pattern(*item, "normalizer Replace", &step.pattern, &step.regex));
      step.content = string_or(member(*item, "content"), "");
    } else if (type == "Prepend") {
      step.kind = K::kPrepend;
      step.content = string_or(member(*item, "prepend"), "");
    } else {
      return unsupported("normalizer", type, "NFC, NFD, NFKC, NFKD, Lowercase, Strip, Replace, Prepend, Sequence");
    }
    out->push_back(step);
  }
  return ok_status();
}

Result<SplitBehavior> read_behavior(const json::value& v, std::string_view component) {
  std::string b = string_or(member(v, "behavior"), "Isolated");
  if (b == "Removed") return SplitBehavior::kRemoved;
  if (b == "Isolated") return SplitBehavior::kIsolated;
  if (b == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (b == "Contiguous") return SplitBehavior::kContiguous;
  return Status::invalid_argument(std::string(component) + " behavior '" + b +
                                  "' is not one of Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous");
}

Status read_pre_tokenizers(const json::value& root, std::vector<PreTokenizerStep>* out) {
  const json::value* pt = member(root, "pre_tokenizer");
  if (pt == nullptr) return ok_status();
  KOI_ASSIGN_OR_RETURN(std::vector<const json::value*> items, flatten(*pt, "pretokenizers", "pre_tokenizer"));
  for (const json::value* item : items) {
    std::string type = string_or(member(*item, "type"), "");
    PreTokenizerStep step;
    using K = PreTokenizerStep::Kind;
    if (type == "Split") {
      step.kind = K::kSplit;
      KOI_RETURN_IF_ERROR(read_pattern(*item, "pre_tokenizer Split", &step.pattern, &step.regex));
      KOI_ASSIGN_OR_RETURN(step.behavior, read_behavior(*item, "pre_tokenizer Split"));
      step.invert = bool_or(member(*item, "invert"), false);
    } else if (type == "ByteLevel") {
      step.kind = K::kByteLevel;
      step.add_prefix_space = bool_or(member(*item, "add_prefix_space"), false);
      step.use_regex = bool_or(member(*item, "use_regex"), true);
    } else if (type == "Digits") {
      step.kind = K::kDigits;
      step.individual_digits = bool_or(member(*item, "individual_digits"), false);
    } else if (type == "Punctuation") {
      step.kind = K::kPunctuation;
      KOI_ASSIGN_OR_RETURN(step.behavior, read_behavior(*item, "pre_tokenizer Punctuation"));
    } else if (type == "Whitespace") {
      step.kind = K::kWhitespace;
    } else if (type == "WhitespaceSplit") {
      step.kind = K::kWhitespaceSplit;
    } else if (type == "Metaspace") {
      step.kind = K::kMetaspace;
      step.replacement = string_or(member(*item, "replacement"), std::string(kSpaceMark));
      KOI_ASSIGN_OR_RETURN(step.prepend_scheme, read_prepend_scheme(*item, "pre_tokenizer"));
      step.split = bool_or(member(*item, "split"), true);
    } else {
      return unsupported("pre_tokenizer", type,
                         "Split, ByteLevel, Digits, Punctuation, Whitespace, WhitespaceSplit, Metaspace, Sequence");
    }
    out->push_back(step);
  }
  return ok_status();
}

Status read_decoders(const json::value& root, std::vector<DecoderStep>* out) {
  const json::value* d = member(root, "decoder");
  if (d == nullptr) return ok_status();
  KOI_ASSIGN_OR_RETURN(std::vector<const json::value*> items, flatten(*d, "decoders", "decoder"));
  for (const json::value* item : items) {
    std::string type = string_or(member(*item, "type"), "");
    DecoderStep step;
    using K = DecoderStep::Kind;
    if (type == "ByteLevel") {
      step.kind = K::kByteLevel;
    } else if (type == "Metaspace") {
      step.kind = K::kMetaspace;
      step.replacement = string_or(member(*item, "replacement"), std::string(kSpaceMark));
      KOI_ASSIGN_OR_RETURN(step.prepend_scheme, read_prepend_scheme(*item, "decoder"));
    } else if (type == "Replace") {
      step.kind = K::kReplace;
      KOI_RETURN_IF_ERROR(read_pattern(*item, "decoder Replace", &step.pattern, &step.regex));
      step.content = string_or(member(*item, "content"), "");
    } else if (type == "Strip") {
      step.kind = K::kStrip;
      step.content = string_or(member(*item, "content"), " ");
      const json::value* start = member(*item, "start");
      const json::value* stop = member(*item, "stop");
      step.start = start != nullptr && start->is_int64() ? int32_t(start->as_int64()) : 0;
      step.stop = stop != nullptr && stop->is_int64() ? int32_t(stop->as_int64()) : 0;
    } else if (type == "Fuse") {
      step.kind = K::kFuse;
    } else if (type == "ByteFallback") {
      step.kind = K::kByteFallback;
    } else {
      return unsupported("decoder", type, "ByteLevel, Metaspace, Replace, Strip, Fuse, ByteFallback, Sequence");
    }
    out->push_back(step);
  }
  return ok_status();
}

// The TemplateProcessing of the post-processor, or nullptr; refuses other post-processors.
Result<const json::value*> read_template(const json::value& root) {
  const json::value* pp = member(root, "post_processor");
  if (pp == nullptr) return static_cast<const json::value*>(nullptr);
  KOI_ASSIGN_OR_RETURN(std::vector<const json::value*> items, flatten(*pp, "processors", "post_processor"));
  const json::value* found = nullptr;
  for (const json::value* item : items) {
    std::string type = string_or(member(*item, "type"), "");
    if (type == "TemplateProcessing") {
      found = item;
    } else if (type != "ByteLevel") {
      return unsupported("post_processor", type, "TemplateProcessing, ByteLevel, Sequence");
    }
  }
  return found;
}

// The special tokens of the single-sequence template before and after the text ("A").
Status read_single_template(const json::value& tp, std::vector<std::string>* prefix, std::vector<std::string>* suffix) {
  const json::value* single = member(tp, "single");
  if (single == nullptr || !single->is_array()) {
    return Status::invalid_argument("post_processor TemplateProcessing has no \"single\" template");
  }
  bool seen_text = false;
  for (const json::value& item : single->as_array()) {
    if (const json::value* special = member(item, "SpecialToken")) {
      std::string id = string_or(member(*special, "id"), "");
      (seen_text ? suffix : prefix)->push_back(id);
    } else if (const json::value* seq = member(item, "Sequence")) {
      if (string_or(member(*seq, "id"), "") != "A" || seen_text) {
        return Status::invalid_argument("post_processor TemplateProcessing \"single\" holds a sequence other than one A");
      }
      seen_text = true;
    }
  }
  if (!seen_text) return Status::invalid_argument("post_processor TemplateProcessing \"single\" has no sequence A");
  return ok_status();
}

// The legacy fields the writers use: byte-level (a ByteLevel pre-tokenizer, its regexes), or
// metaspace text (a Replace(" ", "▁"), with the space prefix when a Prepend("▁") goes first).
void describe_legacy(TokenizerSpec* spec) {
  spec->byte_level = false;
  spec->pre_regexes.clear();
  for (const PreTokenizerStep& step : spec->pre_tokenizers) {
    if (step.kind == PreTokenizerStep::Kind::kByteLevel) {
      spec->byte_level = true;
      if (step.use_regex) spec->pre_regexes.push_back(gpt2_regex());
    } else if (step.kind == PreTokenizerStep::Kind::kSplit && step.regex) {
      spec->pre_regexes.push_back(step.pattern);
    }
  }
  spec->add_space_prefix = false;
  for (const NormalizerStep& step : spec->normalizers) {
    if (step.kind == NormalizerStep::Kind::kPrepend && step.content == kSpaceMark) spec->add_space_prefix = true;
  }
  spec->pre = pre_tokenizer_name(spec->pre_regexes).value_or("");
}

// Model "BPE": vocab {text: id} and merges.
Status read_bpe(const json::value& model, std::map<int64_t, std::string>* vocab_by_id, TokenizerSpec* spec) {
  const json::value* vocab = member(model, "vocab");
  const json::value* merges = member(model, "merges");
  if (vocab == nullptr || !vocab->is_object() || merges == nullptr || !merges->is_array()) {
    return Status::invalid_argument("model has no \"vocab\" object or \"merges\" array");
  }
  for (std::string_view key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (!string_or(member(model, key), "").empty()) {
      return Status::unsupported("model BPE with a " + std::string(key) + " is not supported");
    }
  }
  if (const json::value* dropout = member(model, "dropout"); dropout != nullptr && dropout->to_number<double>() != 0) {
    return Status::unsupported("model BPE with dropout is not supported (it makes encoding random)");
  }
  for (const auto& [text, id] : vocab->as_object()) {
    if (!id.is_int64() || id.as_int64() < 0) return Status::invalid_argument("vocab entry '" + std::string(text) + "' has no valid id");
    (*vocab_by_id)[id.as_int64()] = std::string(text);
  }
  spec->kind = TokenizerKind::kBpeMerges;
  spec->ignore_merges = bool_or(member(model, "ignore_merges"), false);
  for (const json::value& m : merges->as_array()) {
    if (m.is_string()) {
      spec->merges.emplace_back(m.as_string());
    } else if (m.is_array() && m.as_array().size() == 2 && m.as_array()[0].is_string() &&
               m.as_array()[1].is_string()) {
      spec->merges.push_back(std::string(m.as_array()[0].as_string()) + " " +
                             std::string(m.as_array()[1].as_string()));
    } else {
      return Status::invalid_argument("merges holds an entry that is neither \"a b\" nor [\"a\", \"b\"]");
    }
  }
  return ok_status();
}

// Model "Unigram": vocab [[text, score], ...] (the index is the id), unk_id.
Status read_unigram(const json::value& model, std::map<int64_t, std::string>* vocab_by_id,
                    std::map<int64_t, float>* scores, std::string* unk, TokenizerSpec* spec) {
  const json::value* vocab = member(model, "vocab");
  if (vocab == nullptr || !vocab->is_array()) return Status::invalid_argument("model Unigram has no \"vocab\" array");
  const json::array& entries = vocab->as_array();
  for (size_t i = 0; i < entries.size(); ++i) {
    const json::value& e = entries[i];
    if (!e.is_array() || e.as_array().size() != 2 || !e.as_array()[0].is_string() || !e.as_array()[1].is_number()) {
      return Status::invalid_argument("model Unigram vocab entry " + std::to_string(i) + " is not [text, score]");
    }
    (*vocab_by_id)[int64_t(i)] = std::string(e.as_array()[0].as_string());
    (*scores)[int64_t(i)] = float(e.as_array()[1].to_number<double>());
  }
  if (const json::value* unk_id = member(model, "unk_id")) {
    if (!unk_id->is_int64() || unk_id->as_int64() < 0 || size_t(unk_id->as_int64()) >= entries.size()) {
      return Status::invalid_argument("model Unigram unk_id is not the index of a vocab entry");
    }
    *unk = (*vocab_by_id)[unk_id->as_int64()];
  }
  spec->kind = TokenizerKind::kUnigram;
  return ok_status();
}

// The "pair" template: special tokens (by the ids special_tokens gives them, else by their
// text) and the sequences A and B, each with its type id.
Status read_pair_template(const json::value& tp, const std::function<std::optional<int32_t>(const std::string&)>& id_of,
                          std::vector<TemplateItem>* out) {
  const json::value* pair = member(tp, "pair");
  // None, or the empty list (which Hugging Face's template builder refuses): pair_template()
  // derives one from the single template.
  if (pair == nullptr || !pair->is_array()) return ok_status();
  const json::value* specials = member(tp, "special_tokens");
  for (const json::value& item : pair->as_array()) {
    TemplateItem piece;
    if (const json::value* special = member(item, "SpecialToken")) {
      const std::string name = string_or(member(*special, "id"), "");
      const json::value* entry = specials != nullptr ? member(*specials, name) : nullptr;
      const json::value* ids = entry != nullptr ? member(*entry, "ids") : nullptr;
      if (ids != nullptr && ids->is_array() && !ids->as_array().empty()) {
        for (const json::value& id : ids->as_array()) piece.tokens.push_back(int32_t(id.to_number<int64_t>()));
      } else if (std::optional<int32_t> id = id_of(name)) {
        piece.tokens.push_back(*id);
      } else {
        return Status::invalid_argument("post_processor TemplateProcessing \"pair\" names '" + name +
                                        "', which is not a token");
      }
      piece.type_id = uint32_t(member(*special, "type_id") ? member(*special, "type_id")->to_number<int64_t>() : 0);
    } else if (const json::value* seq = member(item, "Sequence")) {
      const std::string id = string_or(member(*seq, "id"), "");
      if (id != "A" && id != "B") {
        return Status::invalid_argument("post_processor TemplateProcessing \"pair\" holds sequence '" + id +
                                        "'; a template names sequences A and B");
      }
      piece.sequence = id[0];
      piece.type_id = uint32_t(member(*seq, "type_id") ? member(*seq, "type_id")->to_number<int64_t>() : 0);
    } else {
      return Status::invalid_argument("post_processor TemplateProcessing \"pair\" holds an item that is neither "
                                      "SpecialToken nor Sequence");
    }
    out->push_back(std::move(piece));
  }
  return ok_status();
}

// The tokens add_special puts around the text: the TemplateProcessing when the file has a
// post-processor (none when it has no template), else add_bos_token / add_eos_token.
Status read_special_tokens(const json::value& root, const json::value& config,
                           const std::function<std::optional<int32_t>(const std::string&)>& id_of, TokenizerSpec* spec) {
  KOI_ASSIGN_OR_RETURN(const json::value* tp, read_template(root));
  std::vector<std::string> prefix, suffix;
  if (tp != nullptr) KOI_RETURN_IF_ERROR(read_single_template(*tp, &prefix, &suffix));
  std::string bos = config_token(config, "bos_token");
  if (bos.empty() && !prefix.empty()) bos = prefix.front();
  spec->bos_id = id_of(bos);
  spec->eos_id = id_of(config_token(config, "eos_token"));
  if (member(root, "post_processor") == nullptr) {
    spec->add_bos = bool_or(member(config, "add_bos_token"), false);
    spec->add_eos = bool_or(member(config, "add_eos_token"), false);
    return ok_status();
  }
  auto ids = [&](const std::vector<std::string>& texts, std::vector<int32_t>* out) -> Status {
    for (const std::string& text : texts) {
      std::optional<int32_t> id = id_of(text);
      if (!id) return Status::invalid_argument("post_processor TemplateProcessing names '" + text + "', which is not a token");
      out->push_back(*id);
    }
    return ok_status();
  };
  if (tp != nullptr) KOI_RETURN_IF_ERROR(read_pair_template(*tp, id_of, &spec->pair_template));
  KOI_RETURN_IF_ERROR(ids(prefix, &spec->special_prefix));
  KOI_RETURN_IF_ERROR(ids(suffix, &spec->special_suffix));
  // As add_bos / add_eos where they say the same (what GGUF can hold).
  spec->add_bos = spec->special_prefix.size() == 1 && spec->special_prefix[0] == spec->bos_id;
  spec->add_eos = spec->special_suffix.size() == 1 && spec->special_suffix[0] == spec->eos_id;
  if (spec->add_bos) spec->special_prefix.clear();
  if (spec->add_eos) spec->special_suffix.clear();
  return ok_status();
}

Status read_spec(const json::value& root, const json::value& config, TokenizerSpec* spec) {
  const json::value* model = member(root, "model");
  if (model == nullptr) return Status::invalid_argument("has no \"model\"");
  std::string type = string_or(member(*model, "type"), "");
  std::map<int64_t, std::string> vocab_by_id;
  std::map<int64_t, float> scores;
  std::string unk = string_or(member(*model, "unk_token"), "");
  if (type == "BPE") {
    KOI_RETURN_IF_ERROR(read_bpe(*model, &vocab_by_id, spec));
  } else if (type == "Unigram") {
    KOI_RETURN_IF_ERROR(read_unigram(*model, &vocab_by_id, &scores, &unk, spec));
  } else {
    return unsupported("model type", type, "BPE, Unigram");
  }
  bool byte_fallback = bool_or(member(*model, "byte_fallback"), false);

  // The model's unk token is an added token (matched in raw text, type unknown) only when
  // added_tokens lists it, as in Hugging Face; otherwise it is text like any other token.
  std::map<int64_t, TokenType> types;
  for (const auto& [id, text] : vocab_by_id) {
    types[id] = byte_fallback && parse_byte_token(text) >= 0 ? TokenType::kByte : TokenType::kNormal;
  }
  if (const json::value* added = member(root, "added_tokens"); added != nullptr && added->is_array()) {
    for (const json::value& t : added->as_array()) {
      const json::value* id = member(t, "id");
      std::string content = string_or(member(t, "content"), "");
      if (id == nullptr || !id->is_int64() || id->as_int64() < 0 || content.empty()) {
        return Status::invalid_argument("added_tokens has an entry without an id or content");
      }
      int64_t i = id->as_int64();
      vocab_by_id[i] = content;
      bool special = bool_or(member(t, "special"), false);
      types[i] = content == unk ? TokenType::kUnknown : special ? TokenType::kControl : TokenType::kUserDefined;
      if (bool_or(member(t, "lstrip"), false)) spec->lstrip_ids.insert(int32_t(i));
      if (bool_or(member(t, "rstrip"), false)) spec->rstrip_ids.insert(int32_t(i));
    }
  }
  int64_t n = vocab_by_id.empty() ? 0 : vocab_by_id.rbegin()->first + 1;
  if (n > (int64_t(1) << 24)) return Status::invalid_argument("token ids go up to " + std::to_string(n));
  for (int64_t i = 0; i < n; ++i) {
    auto it = vocab_by_id.find(i);
    spec->tokens.push_back(it != vocab_by_id.end() ? it->second : "[PAD" + std::to_string(i) + "]");
    spec->types.push_back(it != vocab_by_id.end() ? types[i] : TokenType::kUnused);
    if (spec->kind == TokenizerKind::kUnigram) spec->scores.push_back(scores.count(i) > 0 ? scores[i] : 0.0f);
  }

  spec->pipeline = true;
  KOI_RETURN_IF_ERROR(read_normalizers(root, &spec->normalizers));
  KOI_RETURN_IF_ERROR(read_pre_tokenizers(root, &spec->pre_tokenizers));
  KOI_RETURN_IF_ERROR(read_decoders(root, &spec->decoders));
  describe_legacy(spec);

  std::unordered_map<std::string_view, int32_t> ids;
  for (int64_t i = n - 1; i >= 0; --i) ids[spec->tokens[i]] = int32_t(i);  // the first id wins
  auto id_of = [&](const std::string& text) -> std::optional<int32_t> {
    auto it = ids.find(text);
    if (text.empty() || it == ids.end()) return std::nullopt;
    return it->second;
  };
  KOI_RETURN_IF_ERROR(read_special_tokens(root, config, id_of, spec));
  spec->unk_id = id_of(unk.empty() ? config_token(config, "unk_token") : unk);
  spec->pad_id = id_of(config_token(config, "pad_token"));
  if (const json::value* ct = member(config, "chat_template")) {
    if (ct->is_string()) {
      spec->chat_template = std::string(ct->as_string());
    } else if (ct->is_array()) {
      for (const json::value& t : ct->as_array()) {
        if (string_or(member(t, "name"), "") == "default") spec->chat_template = string_or(member(t, "template"), "");
      }
    }
  }
  return ok_status();
}

}  // namespace

namespace {

Result<TokenizerSpec> spec_from_json(const json::value& root, const json::value& config, const std::string& where) {
  TokenizerSpec spec;
  Status status;
  try {
    status = read_spec(root, config, &spec);
  } catch (const std::exception& e) {  // Boost.JSON accessors throw on a wrong type
    status = Status::invalid_argument(std::string("unexpected value: ") + e.what());
  }
  if (!status.ok()) return status.with_prefix(where);
  return spec;
}

}  // namespace

Result<TokenizerSpec> load_hf_tokenizer(const std::string& dir) {
  const std::string tokenizer_path = path_join(dir, "tokenizer.json");
  const std::string config_path = path_join(dir, "tokenizer_config.json");
  KOI_ASSIGN_OR_RETURN(json::value root, parse_json_file(tokenizer_path));
  json::value config = json::object();
  if (file_exists(config_path)) {
    KOI_ASSIGN_OR_RETURN(config, parse_json_file(config_path));
  }
  return spec_from_json(root, config, tokenizer_path);
}

Result<TokenizerSpec> hf_tokenizer_from_text(std::string_view tokenizer_json, std::string_view config_json,
                                             const std::string& where) {
  KOI_ASSIGN_OR_RETURN(json::value root, parse_json_object(tokenizer_json, where));
  KOI_ASSIGN_OR_RETURN(json::value config, parse_json_object(config_json, where));
  return spec_from_json(root, config, where);
}

}  // namespace koi::tokenizer
