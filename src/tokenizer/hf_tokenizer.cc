// Hugging Face tokenizer.json + tokenizer_config.json -> TokenizerSpec.
//
// Supported: model type "BPE"; normalizer none, NFC (treated as identity: Koi does not
// normalize Unicode, so text that is not already NFC may tokenize differently from HF),
// or the Llama 2 metaspace pair Prepend("▁") + Replace(" ", "▁") (or the Replace alone: no
// space prefix); pre-tokenizer none, ByteLevel, Split(Regex, Isolated), or a Sequence of
// those.
#include <boost/json.hpp>

#include <algorithm>
#include <map>

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

Result<json::value> parse_json_file(const std::string& path) {
  KOI_ASSIGN_OR_RETURN(std::string text, read_file(path));
  boost::system::error_code ec;
  json::value v = json::parse(text, ec);
  if (ec) {
    return Status::invalid_argument(path + ": invalid JSON (" + ec.message() +
                                    "); the file is damaged, download it again");
  }
  if (!v.is_object()) return Status::invalid_argument(path + ": expected a JSON object at the top");
  return v;
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

struct PreTokenizer {
  bool byte_level = false;
  std::vector<std::string> regexes;
};

Status read_pre_tokenizer(const json::value& pt, PreTokenizer* out) {
  std::string type = string_or(member(pt, "type"), "");
  if (type == "Sequence") {
    const json::value* list = member(pt, "pretokenizers");
    if (list == nullptr || !list->is_array()) return Status::invalid_argument("pre_tokenizer Sequence has no list");
    for (const json::value& item : list->as_array()) KOI_RETURN_IF_ERROR(read_pre_tokenizer(item, out));
    return ok_status();
  }
  if (type == "ByteLevel") {
    if (bool_or(member(pt, "add_prefix_space"), false)) {
      return Status::unsupported("pre_tokenizer ByteLevel with add_prefix_space is not supported");
    }
    out->byte_level = true;
    if (bool_or(member(pt, "use_regex"), true)) out->regexes.push_back(gpt2_regex());
    return ok_status();
  }
  if (type == "Split") {
    const json::value* pattern = member(pt, "pattern");
    const json::value* regex = pattern != nullptr ? member(*pattern, "Regex") : nullptr;
    if (regex == nullptr || !regex->is_string() || string_or(member(pt, "behavior"), "") != "Isolated" ||
        bool_or(member(pt, "invert"), false)) {
      return Status::unsupported("pre_tokenizer Split is supported only with a Regex pattern, "
                                 "behavior Isolated and invert false");
    }
    out->regexes.emplace_back(regex->as_string());
    return ok_status();
  }
  return Status::unsupported("pre_tokenizer type '" + type + "' is not supported");
}

// Replace(" ", "▁").
bool is_space_replace(const json::value& n) {
  const json::value* pattern = member(n, "pattern");
  return string_or(member(n, "type"), "") == "Replace" && pattern != nullptr &&
         string_or(member(*pattern, "String"), "") == " " && string_or(member(n, "content"), "") == kSpaceMark;
}

// Llama 2: Sequence[Prepend("▁"), Replace(" ", "▁")].
bool is_metaspace_normalizer(const json::value& n) {
  const json::value* list = member(n, "normalizers");
  if (string_or(member(n, "type"), "") != "Sequence" || list == nullptr || !list->is_array() ||
      list->as_array().size() != 2) {
    return false;
  }
  const json::value& prepend = list->as_array()[0];
  return string_or(member(prepend, "type"), "") == "Prepend" &&
         string_or(member(prepend, "prepend"), "") == kSpaceMark && is_space_replace(list->as_array()[1]);
}

// Whether the post-processor is a TemplateProcessing whose single-sequence template starts
// (at_end: ends) with a special token; returns its text.
std::string template_special(const json::value& root, bool at_end) {
  const json::value* pp = member(root, "post_processor");
  if (pp == nullptr || string_or(member(*pp, "type"), "") != "TemplateProcessing") return "";
  const json::value* single = member(*pp, "single");
  if (single == nullptr || !single->is_array() || single->as_array().empty()) return "";
  const json::value& item = at_end ? single->as_array().back() : single->as_array().front();
  const json::value* special = member(item, "SpecialToken");
  return special != nullptr ? string_or(member(*special, "id"), "") : "";
}

Status read_spec(const json::value& root, const json::value& config, TokenizerSpec* spec) {
  const json::value* model = member(root, "model");
  if (model == nullptr) return Status::invalid_argument("has no \"model\"");
  std::string type = string_or(member(*model, "type"), "");
  if (type != "BPE") {
    return Status::unsupported("model type '" + type +
                               "' is not supported; Koi reads BPE tokenizers (Llama, Qwen, GPT-2 families)");
  }
  const json::value* vocab = member(*model, "vocab");
  const json::value* merges = member(*model, "merges");
  if (vocab == nullptr || !vocab->is_object() || merges == nullptr || !merges->is_array()) {
    return Status::invalid_argument("model has no \"vocab\" object or \"merges\" array");
  }
  bool byte_fallback = bool_or(member(*model, "byte_fallback"), false);
  std::string unk = string_or(member(*model, "unk_token"), "");

  std::map<int64_t, std::string> vocab_by_id;
  std::map<int64_t, TokenType> types;
  for (const auto& [text, id] : vocab->as_object()) {
    if (!id.is_int64() || id.as_int64() < 0) return Status::invalid_argument("vocab entry '" + std::string(text) + "' has no valid id");
    vocab_by_id[id.as_int64()] = std::string(text);
    TokenType t = TokenType::kNormal;
    if (byte_fallback && parse_byte_token(text) >= 0) t = TokenType::kByte;
    if (text == unk) t = TokenType::kUnknown;
    types[id.as_int64()] = t;
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
  }
  spec->kind = TokenizerKind::kBpeMerges;
  spec->ignore_merges = bool_or(member(*model, "ignore_merges"), false);
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

  // Metaspace text: the Llama 2 normalizer, or its Replace alone (no space prefix).
  const json::value* normalizer = member(root, "normalizer");
  bool space_prefix = normalizer != nullptr && is_metaspace_normalizer(*normalizer);
  bool metaspace = space_prefix || (normalizer != nullptr && is_space_replace(*normalizer));
  if (normalizer != nullptr && !metaspace && string_or(member(*normalizer, "type"), "") != "NFC") {
    return Status::unsupported("normalizer '" + string_or(member(*normalizer, "type"), "") +
                               "' is not supported (supported: NFC, Llama 2 Prepend+Replace, Replace(\" \", \"" +
                               std::string(kSpaceMark) + "\"))");
  }
  PreTokenizer pre;
  if (const json::value* pt = member(root, "pre_tokenizer")) KOI_RETURN_IF_ERROR(read_pre_tokenizer(*pt, &pre));
  if (metaspace == pre.byte_level) {
    return Status::unsupported(metaspace ? "a metaspace normalizer with a ByteLevel pre-tokenizer is not supported"
                                         : "neither a ByteLevel pre-tokenizer nor the Llama 2 metaspace "
                                           "normalizer; Koi does not know how this tokenizer treats bytes");
  }
  spec->byte_level = pre.byte_level;
  spec->add_space_prefix = space_prefix;
  spec->pre = pre_tokenizer_name(pre.regexes).value_or("");
  spec->pre_regexes = pre.regexes;

  auto id_of = [&](const std::string& text) -> std::optional<int32_t> {
    if (text.empty()) return std::nullopt;
    for (int64_t i = 0; i < n; ++i) {
      if (spec->tokens[i] == text) return int32_t(i);
    }
    return std::nullopt;
  };
  std::string bos = config_token(config, "bos_token");
  std::string template_bos = template_special(root, false);
  std::string template_eos = template_special(root, true);
  if (bos.empty()) bos = template_bos;
  spec->bos_id = id_of(bos);
  spec->eos_id = id_of(config_token(config, "eos_token"));
  spec->unk_id = id_of(unk.empty() ? config_token(config, "unk_token") : unk);
  spec->pad_id = id_of(config_token(config, "pad_token"));
  spec->add_bos = bool_or(member(config, "add_bos_token"), !template_bos.empty() && template_bos == bos);
  spec->add_eos = bool_or(member(config, "add_eos_token"), !template_eos.empty());
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

Result<TokenizerSpec> load_hf_tokenizer(const std::string& dir) {
  const std::string tokenizer_path = path_join(dir, "tokenizer.json");
  const std::string config_path = path_join(dir, "tokenizer_config.json");
  KOI_ASSIGN_OR_RETURN(json::value root, parse_json_file(tokenizer_path));
  json::value config = json::object();
  if (file_exists(config_path)) {
    KOI_ASSIGN_OR_RETURN(config, parse_json_file(config_path));
  }
  TokenizerSpec spec;
  Status status;
  try {
    status = read_spec(root, config, &spec);
  } catch (const std::exception& e) {  // Boost.JSON accessors throw on a wrong type
    status = Status::invalid_argument(std::string("unexpected value: ") + e.what());
  }
  if (!status.ok()) return status.with_prefix(tokenizer_path);
  return spec;
}

}  // namespace koi::tokenizer
