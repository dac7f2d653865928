// tokenizer.json written by hf_writer and read back by load_hf_tokenizer must encode every
// text as the original spec does: a trained byte-level BPE, the llama2.c tokenizer of
// stories260K (SentencePiece, converted to merges), a character vocabulary without space
// prefix, and the metaspace BPE that conversion makes. Then the specs it must refuse.
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
