// The Unigram model (SentencePiece unigram, Hugging Face "Unigram") on a hand-made
// vocabulary: the best-scoring segmentation, ties, unknown characters (fused, scored below
// every token), byte fallback, and a tokenizer.json with a Metaspace pipeline.
#include <gtest/gtest.h>

#include "base/file.h"
#include "tokenizer/load.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace koi::tokenizer {
namespace {

const std::string kMark = "\xE2\x96\x81";  // "▁"

// Ids: 0 <unk>, 1 a, 2 b, 3 c, 4 ab, 5 bc, 6 abc, 7 ▁, 8 ▁a.
TokenizerSpec toy_spec() {
  TokenizerSpec spec;
  spec.kind = TokenizerKind::kUnigram;
  spec.pipeline = true;
  spec.tokens = {"<unk>", "a", "b", "c", "ab", "bc", "abc", kMark, kMark + "a"};
  spec.scores = {0, -1, -2, -3, -3, -4.5f, -6.5f, -1, -1.5f};
  spec.types.assign(spec.tokens.size(), TokenType::kNormal);
  spec.types[0] = TokenType::kUnknown;
  spec.unk_id = 0;
  return spec;
}

std::vector<int32_t> encode(const TokenizerSpec& spec, std::string_view text) {
  return Tokenizer::create(spec).value().encode(text, false, false);
}

TEST(UnigramTest, BestScoringSegmentation) {
  TokenizerSpec spec = toy_spec();
  // "abc": a+b+c = -6, ab+c = -6, a+bc = -5.5, abc = -6.5: a+bc wins.
  EXPECT_EQ(encode(spec, "abc"), (std::vector<int32_t>{1, 5}));
  spec.scores[6] = -5;  // now abc alone is best
  EXPECT_EQ(encode(spec, "abc"), (std::vector<int32_t>{6}));
  // A tie: "ab" (-3) against a+b (-3): the path found first, the longer piece from the
  // earlier start, stays (Hugging Face updates on a strictly better score).
  EXPECT_EQ(encode(toy_spec(), "ab"), (std::vector<int32_t>{4}));
  EXPECT_EQ(encode(toy_spec(), "ba"), (std::vector<int32_t>{2, 1}));
}

TEST(UnigramTest, UnknownCharactersFuseIntoOneUnk) {
  // "x" and "yz" have no token: each run is one <unk>.
  EXPECT_EQ(encode(toy_spec(), "axbyzc"), (std::vector<int32_t>{1, 0, 2, 0, 3}));
  // An unknown piece scores below every token (min - 10), so a known split always wins.
  TokenizerSpec spec = toy_spec();
  spec.scores[1] = -100;
  EXPECT_EQ(encode(spec, "a"), (std::vector<int32_t>{1}));
}

TEST(UnigramTest, ByteFallbackSpellsUnknownBytes) {
  TokenizerSpec spec = toy_spec();
  for (int byte : {0xC3, 0xA9, 0x78}) {
    spec.tokens.push_back(byte_token_text(uint8_t(byte)));
    spec.scores.push_back(0);
    spec.types.push_back(TokenType::kByte);
  }
  // "é" (C3 A9) and "x" fuse into one unknown piece, then come out as their bytes.
  EXPECT_EQ(encode(spec, "a\xC3\xA9xb"), (std::vector<int32_t>{1, 9, 10, 11, 2}));
  Tokenizer tok = Tokenizer::create(spec).value();
  EXPECT_EQ(tok.decode(tok.encode("a\xC3\xA9xb", false, false)), "a\xC3\xA9xb");
}

TEST(UnigramTest, TokenizerJsonWithMetaspace) {
  std::string dir = make_temp_dir("koi-unigram").value();
  ASSERT_TRUE(write_file_atomic(path_join(dir, "tokenizer.json"), R"({
    "added_tokens": [{"id": 1, "content": "</s>", "special": true}],
    "normalizer": {"type": "Lowercase"},
    "pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": true},
    "post_processor": {"type": "TemplateProcessing", "single": [{"Sequence": {"id": "A", "type_id": 0}},
                       {"SpecialToken": {"id": "</s>", "type_id": 0}}], "pair": [], "special_tokens": {}},
    "decoder": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": true},
    "model": {"type": "Unigram", "unk_id": 0, "byte_fallback": false,
              "vocab": [["<unk>", 0], ["</s>", 0], ["▁", -2], ["▁a", -1], ["b", -2], ["▁ab", -2.5], ["a", -3]]}})")
                  .ok());
  auto tok = load_tokenizer(dir);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  EXPECT_EQ(tok->spec().kind, TokenizerKind::kUnigram);
  // "AB a": lowercase, then "▁ab" "▁a"; the template adds </s>.
  EXPECT_EQ(tok->encode("AB a", true, true), (std::vector<int32_t>{5, 3, 1}));
  EXPECT_EQ(tok->encode("ab b", false, true), (std::vector<int32_t>{5, 2, 4}));
  EXPECT_EQ(tok->decode(tok->encode("ab b", false, true)), "ab b");
  remove_all(dir);
}

}  // namespace
}  // namespace koi::tokenizer
