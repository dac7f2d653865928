// check_gguf_tokenizer: a tokenizer whose pipeline GGUF's llama.cpp keys hold is accepted (and
// reads back encoding the same), one with a component they cannot hold is refused with the
// component's name, so that `koi convert` never writes a file that tokenizes differently.
#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <fmt/format.h>

#include "base/file.h"
#include "tokenizer/load.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace koi::tokenizer {
namespace {

std::string boost_quote(std::string_view text) {
  return boost::json::serialize(boost::json::value(boost::json::string(text)));
}

// The spec load_hf_tokenizer reads from a folder holding `json` as its tokenizer.json.
TokenizerSpec read_tokenizer_json(const std::string& json) {
  const std::string dir = make_temp_dir("koi-gguf-tok").value();
  EXPECT_TRUE(write_file_atomic(path_join(dir, "tokenizer.json"), json).ok());
  Result<TokenizerSpec> spec = load_hf_tokenizer(dir);
  remove_all(dir);
  EXPECT_TRUE(spec.ok()) << spec.status().message();
  return spec.ok() ? *spec : TokenizerSpec{};
}

// A byte-level BPE tokenizer.json whose pipeline is `pipeline` (normalizer, pre_tokenizer, ...).
TokenizerSpec byte_level(const std::string& pipeline, bool ignore_merges = false) {
  std::string vocab = R"("<s>": 0)";
  for (int b = 0; b < 256; ++b) {
    vocab += ", " + boost_quote(byte_to_unicode(uint8_t(b))) + ": " + std::to_string(1 + b);
  }
  vocab += R"(, "ab": 257, "Ġab": 258, "12": 259)";
  const std::string json = R"({"added_tokens": [{"id": 0, "content": "<s>", "special": true}],)" + pipeline +
                           R"(, "model": {"type": "BPE", "vocab": {)" + vocab +
                           R"(}, "merges": [["a", "b"], ["Ġ", "ab"], ["1", "2"]], "ignore_merges": )" +
                           (ignore_merges ? "true" : "false") + "}}";
  return read_tokenizer_json(json);
}

constexpr std::string_view kGpt2 = R"("pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false,
    "use_regex": true}, "decoder": {"type": "ByteLevel"})";

std::string refusal(const TokenizerSpec& spec) {
  Status s = check_gguf_tokenizer(spec);
  return s.ok() ? "ok" : s.message();
}

// Writes the GGUF keys and reads them back.
TokenizerSpec via_gguf(const TokenizerSpec& spec) {
  model::GgufWriter writer;
  EXPECT_TRUE(spec_to_gguf(spec, writer).ok());
  const std::string dir = make_temp_dir("koi-gguf-tok").value();
  const std::string path = path_join(dir, "tok.gguf");
  EXPECT_TRUE(writer.write(path).ok());
  Result<Tokenizer> back = load_tokenizer(path);
  remove_all(dir);
  EXPECT_TRUE(back.ok()) << back.status().message();
  return back.ok() ? back->spec() : TokenizerSpec{};
}

TEST(GgufTokenizer, AcceptsWhatItsKeysHoldAndEncodesTheSame) {
  for (bool ignore_merges : {false, true}) {
    TokenizerSpec spec = byte_level(std::string(kGpt2), ignore_merges);
    ASSERT_EQ(refusal(spec), "ok");
    TokenizerSpec back = via_gguf(spec);
    EXPECT_EQ(back.ignore_merges, ignore_merges);  // Koi's own key carries it
    Tokenizer a = Tokenizer::create(spec).value(), b = Tokenizer::create(back).value();
    for (const char* text : {"ab ab 12 x", " ab<s>ab", "Ünïcode ab12ab"}) {
      EXPECT_EQ(a.encode(text, true, true), b.encode(text, true, true)) << text;
    }
  }
}

TEST(GgufTokenizer, RefusesComponentsItsKeysCannotHold) {
  const std::string tail = " cannot be written to GGUF's llama.cpp keys ('llama' or 'gpt2' with a known "
                           "pre-tokenizer), so llama.cpp would encode differently";
  const std::string held = ", which GGUF's llama.cpp keys cannot hold, so llama.cpp would encode differently";
  EXPECT_EQ(refusal(byte_level(R"("normalizer": {"type": "NFKC"}, )" + std::string(kGpt2))),
            "the tokenizer's normalizer 'NFKC' (step 1)" + tail);
  EXPECT_EQ(refusal(byte_level(R"("pre_tokenizer": {"type": "Sequence", "pretokenizers": [
      {"type": "Split", "pattern": {"Regex": " ?\\p{L}+"}, "behavior": "Isolated"},
      {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true}]}, "decoder": {"type": "ByteLevel"})")),
            "the tokenizer's pre_tokenizer regexes are not one of llama.cpp's pre-tokenizers (llama-bpe, qwen2, gpt2)" +
                held);
  EXPECT_EQ(refusal(byte_level(R"("pre_tokenizer": {"type": "Sequence", "pretokenizers": [
      {"type": "Digits", "individual_digits": true},
      {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true}]}, "decoder": {"type": "ByteLevel"})")),
            "the tokenizer's pre_tokenizer 'Digits' (step 1)" + tail);
  EXPECT_EQ(refusal(byte_level(R"("pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": true},
      "decoder": {"type": "ByteLevel"})")),
            "the tokenizer's pre_tokenizer 'ByteLevel' (step 2)" + tail);
  EXPECT_EQ(refusal(byte_level(R"("pre_tokenizer": {"type": "ByteLevel"}, "decoder": null)")),
            "the tokenizer's decoder without 'ByteLevel' (step 1)" + tail);
  TokenizerSpec spec = byte_level(std::string(kGpt2));
  spec.special_suffix = {0, 0};
  EXPECT_EQ(refusal(spec),
            "the post_processor 'TemplateProcessing' adds more around the text than one BOS and one EOS" + held);
  spec.special_suffix.clear();
  spec.lstrip_ids = {0};
  EXPECT_EQ(refusal(spec), "added token '<s>' strips the spaces beside it (lstrip/rstrip)" + held);
  spec.lstrip_ids.clear();
  spec.kind = TokenizerKind::kUnigram;
  EXPECT_EQ(refusal(spec), "the tokenizer's model is 'Unigram'" + held);
}

// A Gemma-style metaspace tokenizer.json: spaces replaced by "▁" in the normalizer, then the
// pre-tokenizer `split` (Gemma's Split on ' '), byte fallback.
TokenizerSpec gemma_style(const std::string& split) {
  std::string vocab = R"("<unk>": 0, "<s>": 1)";
  for (int b = 0; b < 256; ++b) vocab += fmt::format(R"(, "<0x{:02X}>": {})", b, 2 + b);
  vocab += R"(, "▁": 258, "a": 259, "b": 260, "▁a": 261, "ab": 262, "▁ab": 263)";
  const std::string json = R"({"added_tokens": [{"id": 0, "content": "<unk>", "special": true},
      {"id": 1, "content": "<s>", "special": true}],
    "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "▁"},
    "pre_tokenizer": )" + split + R"(,
    "decoder": {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
      {"type": "ByteFallback"}, {"type": "Fuse"}]},
    "model": {"type": "BPE", "byte_fallback": true, "unk_token": "<unk>", "vocab": {)" + vocab +
                           R"(}, "merges": [["▁", "a"], ["a", "b"], ["▁a", "b"]]}})";
  return read_tokenizer_json(json);
}

// Gemma's Split(' ') after its Replace(' ', '▁') normalizer cannot match, so llama.cpp's keys
// hold the tokenizer whole (no warning), and the file read back encodes the same. An inverted
// Split keeps only the matches, so it is not a no-op and is named.
TEST(GgufTokenizer, SpaceSplitAfterTheSpaceReplacementIsNoStep) {
  const TokenizerSpec spec =
      gemma_style(R"({"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithPrevious", "invert": false})");
  ASSERT_EQ(refusal(spec), "ok");
  Tokenizer a = Tokenizer::create(spec).value(), b = Tokenizer::create(via_gguf(spec)).value();
  for (const char* text : {"ab ab  a b", " ab", "ab\xC3\xA9 ab"}) {
    EXPECT_EQ(a.encode(text, false, false), b.encode(text, false, false)) << text;
  }
  EXPECT_EQ(refusal(gemma_style(R"({"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithPrevious",
      "invert": true})")).substr(0, 45), "the tokenizer's pre_tokenizer 'Split' (step 1");
}

// What the llama.cpp keys cannot hold travels whole in Koi's koi.tokenizer.json keys: Koi reads
// back the same pipeline and encodes the same, where the llama.cpp keys alone would not.
TEST(GgufTokenizer, KoiKeysCarryWhatTheLlamaCppKeysCannotHold) {
  const TokenizerSpec spec = byte_level(R"("normalizer": {"type": "NFKC"}, )" + std::string(kGpt2));
  ASSERT_NE(refusal(spec), "ok");
  const TokenizerSpec back = via_gguf(spec);
  ASSERT_TRUE(back.pipeline);
  EXPECT_EQ(back.normalizers, spec.normalizers);
  Tokenizer a = Tokenizer::create(spec).value(), b = Tokenizer::create(back).value();
  // "\xEF\xAC\x81" is the ligature "fi", which NFKC spells "fi"; "\xE2\x91\xA0" is a circled 1.
  for (const char* text : {"ab \xEF\xAC\x81ab 12", "\xE2\x91\xA0\xE2\x91\xA1 ab", "ab"}) {
    EXPECT_EQ(a.encode(text, true, true), b.encode(text, true, true)) << text;
  }
  // The texts exercise the normalizer: without it the ligature encodes differently.
  TokenizerSpec plain = spec;
  plain.normalizers.clear();
  EXPECT_NE(Tokenizer::create(plain).value().encode("\xEF\xAC\x81", false, false), a.encode("\xEF\xAC\x81", false, false));
}

}  // namespace
}  // namespace koi::tokenizer
