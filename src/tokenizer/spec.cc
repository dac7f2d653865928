#include "tokenizer/spec.h"

#include <array>
#include <utility>

namespace koi::tokenizer {
namespace {

// The regexes as Hugging Face tokenizer.json files spell them. "default" is the GPT-2
// regex (what an HF ByteLevel pre-tokenizer uses with use_regex); llama.cpp's own
// "default" chain of four regexes is not reproduced.
constexpr std::string_view kGpt2 =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr std::string_view kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

constexpr std::array<std::pair<std::string_view, std::string_view>, 5> kTable = {{
    {"llama-bpe", kLlama3},
    {"qwen2", kQwen2},
    {"gpt2", kGpt2},
    {"gpt-2", kGpt2},  // llama.cpp's name for it, which Koi writes in GGUF (spec_to_gguf)
    {"default", kGpt2},
}};

}  // namespace

std::optional<std::vector<std::string>> pre_tokenizer_regexes(std::string_view pre) {
  if (pre.empty()) return std::vector<std::string>{};
  for (const auto& [name, regex] : kTable) {
    if (name == pre) return std::vector<std::string>{std::string(regex)};
  }
  return std::nullopt;
}

TokenizerSpec continuation_spec(TokenizerSpec spec) {
  spec.add_space_prefix = false;
  std::erase_if(spec.normalizers, [](const NormalizerStep& n) {
    return n.kind == NormalizerStep::Kind::kPrepend && n.content == "\xE2\x96\x81";
  });
  for (PreTokenizerStep& p : spec.pre_tokenizers) {
    p.prepend_scheme = PrependScheme::kNever;
    p.add_prefix_space = false;
  }
  return spec;
}

std::vector<TemplateItem> single_template(const TokenizerSpec& spec, char sequence, uint32_t type_id) {
  std::vector<TemplateItem> out;
  auto add = [&](const std::vector<int32_t>& specials, bool flag, std::optional<int32_t> id) {
    for (int32_t t : specials) out.push_back({{t}, sequence, type_id});
    if (specials.empty() && flag && id) out.push_back({{*id}, sequence, type_id});
  };
  add(spec.special_prefix, spec.add_bos, spec.bos_id);
  out.push_back({{}, sequence, type_id});
  add(spec.special_suffix, spec.add_eos, spec.eos_id);
  return out;
}

std::vector<TemplateItem> pair_template(const TokenizerSpec& spec) {
  if (!spec.pair_template.empty()) return spec.pair_template;
  std::vector<TemplateItem> out = single_template(spec, 'A', 0);
  std::vector<TemplateItem> b = single_template(spec, 'B', 1);
  out.insert(out.end(), b.begin(), b.end());
  return out;
}

std::string pipeline_identity(const TokenizerSpec& spec) {
  std::string id = spec.pipeline ? "pipeline\n" : "legacy\n";
  auto add = [&](std::string_view field) {
    id += field;
    id += '\0';
  };
  auto flag = [](bool b) { return b ? "1" : "0"; };
  for (const NormalizerStep& n : spec.normalizers) {
    add("n" + std::to_string(int(n.kind)) + flag(n.regex) + flag(n.left) + flag(n.right));
    add(n.pattern);
    add(n.content);
  }
  for (const PreTokenizerStep& p : spec.pre_tokenizers) {
    add("p" + std::to_string(int(p.kind)) + flag(p.regex) + std::to_string(int(p.behavior)) + flag(p.invert) +
        flag(p.add_prefix_space) + flag(p.use_regex) + flag(p.individual_digits) +
        std::to_string(int(p.prepend_scheme)) + flag(p.split));
    add(p.pattern);
    add(p.replacement);
  }
  for (const DecoderStep& d : spec.decoders) {
    add("d" + std::to_string(int(d.kind)) + flag(d.regex) + std::to_string(int(d.prepend_scheme)) + " " +
        std::to_string(d.start) + " " + std::to_string(d.stop));
    add(d.pattern);
    add(d.content);
    add(d.replacement);
  }
  for (int32_t t : spec.special_prefix) add("<" + std::to_string(t));
  for (int32_t t : spec.special_suffix) add(">" + std::to_string(t));
  return id;
}

std::optional<std::string> pre_tokenizer_name(const std::vector<std::string>& regexes) {
  if (regexes.empty()) return std::string();
  if (regexes.size() != 1) return std::nullopt;
  for (const auto& [name, regex] : kTable) {
    if (regex == regexes[0]) return std::string(name);
  }
  return std::nullopt;
}

}  // namespace koi::tokenizer
