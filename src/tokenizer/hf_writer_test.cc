// tokenizer.json written by hf_writer and read back by load_hf_tokenizer must encode every
// text as the original spec does: a trained byte-level BPE, the llama2.c tokenizer of
// stories260K (SentencePiece, converted to merges), a character vocabulary without space
// prefix, and the metaspace BPE that conversion makes; then tokenizer.json pipelines with every
// component Koi reads (BPE and Unigram), which must come back step for step. Then the specs
// it must refuse.
#include "tokenizer/hf_writer.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "base/file.h"
#include "tokenizer/bpe_trainer.h"
#include "tokenizer/load.h"
#include "tokenizer/synthetic_vocab.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace koi::tokenizer {
namespace {

const std::string kTok512 = std::string(KOI_SHARED_DIR) + "/models/stories260K/tok512.bin";

const std::vector<std::string> kCorpus = {
    "Once upon a time, there was a little girl named Lily.",
    "",
    " ",
    "  leading and trailing spaces  ",
    "tabs\tand\nnewlines\n\n\r\nand CRLF\r\n",
    "Unicode: café naïve Straße, 中文测试，日本語のテキスト, Ελληνικά, русский",
    "Emoji 🙂👍🏽 family 👨‍👩‍👧‍👦 and math ∑∫√∞",
    std::string("invalid bytes \xff\xfe and a cut \xe4\xb8 char and x\x80 alone"),
    std::string("a NUL \0 byte", 12),
    "numbers 1234567890 3.14159 -42",
    "I'm sure they'll see it's JOHN'S",
    "<s>specials</s> and <unk> and <|begin_of_text|>x<|end_of_text|>",
    "One day, she saw a big, red ball. She was so happy!\nThe end.",
};

std::string temp_dir() {
  auto dir = make_temp_dir("koi-hf-writer-");
  EXPECT_TRUE(dir.ok());
  return *dir;
}

// Writes `spec`, loads it back, and compares encode (all flag combinations) and decode.
void expect_round_trip(const TokenizerSpec& spec, const std::string& name) {
  SCOPED_TRACE(name);
  const std::string dir = temp_dir();
  Status written = write_hf_tokenizer(spec, dir);
  ASSERT_TRUE(written.ok()) << written.message();
  auto loaded = load_hf_tokenizer(dir);
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  auto original = Tokenizer::create(spec);
  auto reread = Tokenizer::create(*loaded);
  ASSERT_TRUE(original.ok() && reread.ok()) << reread.status().message();
  EXPECT_EQ(reread->n_vocab(), original->n_vocab());
  EXPECT_EQ(reread->bos_id(), original->bos_id());
  EXPECT_EQ(reread->eos_id(), original->eos_id());
  for (const std::string& text : kCorpus) {
    for (bool add_special : {false, true}) {
      for (bool parse_special : {false, true}) {
        std::vector<int32_t> want = original->encode(text, add_special, parse_special);
        EXPECT_EQ(reread->encode(text, add_special, parse_special), want)
            << "text " << ::testing::PrintToString(text) << " add_special " << add_special << " parse_special "
            << parse_special;
        EXPECT_EQ(reread->decode(want), original->decode(want));
      }
    }
  }
  remove_all(dir);
}

TokenizerSpec char_vocab_spec(std::string_view chars) {
  TokenizerSpec spec;
  spec.kind = TokenizerKind::kSentencePiece;
  spec.add_space_prefix = false;
  for (size_t pos = 0; pos < chars.size();) {
    const size_t len = utf8_piece_len(chars, pos);
    std::string ch(chars.substr(pos, len));
    spec.tokens.push_back(ch == " " ? "\u2581" : ch);
    pos += len;
  }
  spec.types.assign(spec.tokens.size(), TokenType::kNormal);
  for (int b = 0; b < 256; ++b) {
    spec.tokens.push_back(byte_token_text(uint8_t(b)));
    spec.types.push_back(TokenType::kByte);
  }
  spec.scores.assign(spec.tokens.size(), 0.0f);
  return spec;
}

TEST(HfWriter, TrainedByteLevelRoundTrips) {
  std::string corpus;
  for (int i = 0; i < 40; ++i) corpus += kCorpus[size_t(i) % kCorpus.size()] + "\n";
  std::vector<std::string_view> texts{corpus};
  BpeTrainOptions o;
  o.vocab_size = 400;
  TokenizerSpec spec = train_bpe(texts, o).value();
  expect_round_trip(spec, "trained");
  spec.add_bos = true;
  spec.ignore_merges = true;
  expect_round_trip(spec, "trained, add_bos, ignore_merges");
  spec.pre = "gpt2";
  expect_round_trip(spec, "trained, gpt2 regex");
}

TEST(HfWriter, SentencePieceRoundTrips) {
  TokenizerSpec spec = load_llama2c_tokenizer(kTok512).value();
  expect_round_trip(spec, "tok512");
  TokenizerSpec metaspace = sentencepiece_to_bpe(spec).value();
  EXPECT_EQ(metaspace.kind, TokenizerKind::kBpeMerges);
  EXPECT_FALSE(metaspace.byte_level);
  expect_round_trip(metaspace, "tok512 as metaspace BPE");
  // The merged tokens rank by score: " t" (-0) first, then "he" (-1).
  ASSERT_GE(metaspace.merges.size(), 2u);
  EXPECT_EQ(metaspace.merges[0], "\u2581 t");
  EXPECT_EQ(metaspace.merges[1], "h e");
}

TEST(HfWriter, CharacterVocabularyRoundTrips) {
  TokenizerSpec spec = char_vocab_spec("\n !',.?ELOSTabcdefghilmnoprstuvwyé中");
  expect_round_trip(spec, "char vocab");
  const std::string json = to_hf_tokenizer_json(spec).value();
  boost::json::value root = boost::json::parse(json);
  EXPECT_EQ(root.at("normalizer").at("type"), "Replace");
  EXPECT_EQ(root.at("model").at("byte_fallback"), true);
  EXPECT_TRUE(root.at("model").at("merges").as_array().empty());
  EXPECT_TRUE(root.at("post_processor").is_null());
}

TEST(HfWriter, ConfigNamesTheSpecialTokens) {
  TokenizerSpec spec = load_llama2c_tokenizer(kTok512).value();
  boost::json::value config = boost::json::parse(to_hf_tokenizer_config_json(spec));
  EXPECT_EQ(config.at("bos_token"), "<s>");
  EXPECT_EQ(config.at("eos_token"), "</s>");
  EXPECT_EQ(config.at("unk_token"), "<unk>");
  EXPECT_EQ(config.at("add_bos_token"), true);
  boost::json::value root = boost::json::parse(to_hf_tokenizer_json(spec).value());
  EXPECT_EQ(root.at("post_processor").at("single").as_array().size(), 2u);
  EXPECT_EQ(root.at("added_tokens").as_array().size(), 3u);
}

// A tokenizer.json with every pipeline component Koi reads, loaded as Koi loads it.
TokenizerSpec load_json(const std::string& json) {
  const std::string dir = temp_dir();
  EXPECT_TRUE(write_file_atomic(path_join(dir, "tokenizer.json"), json).ok());
  EXPECT_TRUE(write_file_atomic(path_join(dir, "tokenizer_config.json"), R"({"bos_token": "<s>", "eos_token": "</s>"})").ok());
  Result<TokenizerSpec> spec = load_hf_tokenizer(dir);
  remove_all(dir);
  EXPECT_TRUE(spec.ok()) << spec.status().message();
  return spec.ok() ? *spec : TokenizerSpec{};
}

// Writes `spec` and reads it back: the same pipeline, step for step, and the same encoding.
void expect_pipeline_round_trip(const TokenizerSpec& spec, const std::string& name) {
  expect_round_trip(spec, name);
  const std::string dir = temp_dir();
  ASSERT_TRUE(write_hf_tokenizer(spec, dir).ok());
  TokenizerSpec back = load_hf_tokenizer(dir).value();
  remove_all(dir);
  EXPECT_EQ(back.kind, spec.kind);
  EXPECT_EQ(back.normalizers, spec.normalizers);
  EXPECT_EQ(back.pre_tokenizers, spec.pre_tokenizers);
  EXPECT_EQ(back.decoders, spec.decoders);
  EXPECT_EQ(back.special_prefix, spec.special_prefix);
  EXPECT_EQ(back.special_suffix, spec.special_suffix);
  EXPECT_EQ(back.pair_template, spec.pair_template);
  EXPECT_EQ(back.scores, spec.scores);
  EXPECT_EQ(back.types, spec.types);
}

std::string json_quoted(std::string_view text) { return boost::json::serialize(boost::json::value(boost::json::string(text))); }

constexpr std::string_view kAddedTokens = R"("added_tokens": [{"id": 0, "content": "<s>", "special": true},
    {"id": 1, "content": "</s>", "special": true}, {"id": 2, "content": "<sep>", "special": true, "lstrip": true}])";

TEST(HfWriter, BytePipelineWithEveryComponentRoundTrips) {
  // Byte-level BPE behind normalizers and pre-tokenizers of every kind Koi reads (before this,
  // the writer kept only the Split regexes and the ByteLevel step: a Lowercase was lost).
  std::string vocab = R"("<s>": 0, "</s>": 1, "<sep>": 2)";
  for (int b = 0; b < 256; ++b) vocab += ", " + json_quoted(byte_to_unicode(uint8_t(b))) + ": " + std::to_string(3 + b);
  vocab += R"(, "ab": 259, "Ġa": 260)";
  const std::string json = "{" + std::string(kAddedTokens) + R"(,
    "normalizer": {"type": "Sequence", "normalizers": [{"type": "NFKC"}, {"type": "Lowercase"},
      {"type": "Strip", "strip_left": true, "strip_right": false},
      {"type": "Replace", "pattern": {"Regex": "\\s+"}, "content": " "}]},
    "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
      {"type": "Split", "pattern": {"String": "--"}, "behavior": "Removed", "invert": false},
      {"type": "Split", "pattern": {"Regex": "[a-z]+"}, "behavior": "MergedWithNext", "invert": true},
      {"type": "Digits", "individual_digits": true}, {"type": "Punctuation", "behavior": "Contiguous"},
      {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true}]},
    "post_processor": {"type": "TemplateProcessing",
      "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                 {"SpecialToken": {"id": "<sep>", "type_id": 0}}, {"SpecialToken": {"id": "</s>", "type_id": 0}}],
      "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
               {"SpecialToken": {"id": "<sep>", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}},
               {"SpecialToken": {"id": "</s>", "type_id": 1}}],
      "special_tokens": {}},
    "decoder": {"type": "ByteLevel"},
    "model": {"type": "BPE", "vocab": {)" + vocab + R"(}, "merges": [["a", "b"], ["Ġ", "a"]], "ignore_merges": true}})";
  TokenizerSpec spec = load_json(json);
  ASSERT_EQ(spec.normalizers.size(), 4u);
  ASSERT_EQ(spec.pre_tokenizers.size(), 5u);
  ASSERT_EQ(spec.pair_template.size(), 5u);
  EXPECT_EQ(spec.special_suffix, (std::vector<int32_t>{2, 1}));
  expect_pipeline_round_trip(spec, "byte-level pipeline");
}

TEST(HfWriter, UnigramPipelineRoundTrips) {
  // SentencePiece unigram with Metaspace, byte fallback and the decoders of a Llama-style file.
  std::string vocab = R"(["<s>", 0.0], ["</s>", 0.0], ["<sep>", 0.0], ["<unk>", 0.0])";
  for (int b = 0; b < 256; ++b) vocab += ", [" + json_quoted(byte_token_text(uint8_t(b))) + ", 0.0]";
  const char* pieces[] = {"▁", "▁a", "a", "b", "ab", "▁ab", "c", "▁the", "t", "h", "e", "n"};
  float score = -1.0f;
  for (const char* piece : pieces) {
    vocab += ", [" + json_quoted(piece) + ", " + std::to_string(score) + "]";
    score -= 0.5f;
  }
  const std::string json = "{" + std::string(kAddedTokens) + R"(,
    "normalizer": {"type": "Sequence", "normalizers": [{"type": "NFD"}, {"type": "Prepend", "prepend": "x"},
                                                       {"type": "Replace", "pattern": {"String": "x"}, "content": ""}]},
    "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "WhitespaceSplit"},
      {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": false}]},
    "post_processor": null,
    "decoder": {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
      {"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
    "model": {"type": "Unigram", "unk_id": 3, "byte_fallback": true, "vocab": [)" + vocab + "]}}";
  TokenizerSpec spec = load_json(json);
  ASSERT_EQ(spec.kind, TokenizerKind::kUnigram);
  ASSERT_EQ(spec.pre_tokenizers.size(), 2u);
  expect_pipeline_round_trip(spec, "unigram pipeline");
  // A Whitespace pre-tokenizer and a Metaspace decoder instead.
  spec.pre_tokenizers.front().kind = PreTokenizerStep::Kind::kWhitespace;
  DecoderStep metaspace;
  metaspace.kind = DecoderStep::Kind::kMetaspace;
  metaspace.prepend_scheme = PrependScheme::kNever;
  spec.decoders = {metaspace};
  expect_pipeline_round_trip(spec, "unigram, whitespace, metaspace decoder");
}

TEST(HfWriter, RefusesWhatTokenizerJsonCannotExpress) {
  EXPECT_EQ(to_hf_tokenizer_json(synthetic_spm_spec(400)).status().message(),
            "token 312 '\u2581aa' has the score of token 311 (-311.000000): SentencePiece merges the leftmost of "
            "tied pairs, which a BPE merges list cannot express");
  TokenizerSpec spec = char_vocab_spec("ab");
  spec.tokens.pop_back();
  spec.types.pop_back();
  spec.scores.pop_back();
  EXPECT_EQ(to_hf_tokenizer_json(spec).status().message(),
            "the SentencePiece spec has 255 of the 256 byte tokens; without all of them SentencePiece and a BPE "
            "with byte fallback encode unknown characters differently");
  spec = char_vocab_spec("aba");
  EXPECT_EQ(to_hf_tokenizer_json(spec).status().message(),
            "token 2 'a' has the text of token 0; tokenizer.json maps each text to one id");
  spec = char_vocab_spec("ab");
  spec.tokens[0] = "\xff";
  EXPECT_EQ(to_hf_tokenizer_json(spec).status().message(),
            "token 0 '\xff' is not valid UTF-8; tokenizer.json holds UTF-8 text only");
  spec = char_vocab_spec("ab");
  spec.types[0] = TokenType::kControl;
  EXPECT_EQ(to_hf_tokenizer_json(spec).status().message(),
            "token 0 'a' is one character but not a normal token; a BPE would start from it where SentencePiece "
            "does not");
}

}  // namespace
}  // namespace koi::tokenizer
