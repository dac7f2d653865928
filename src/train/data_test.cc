#include "train/data.h"

#include <gtest/gtest.h>

#include "tokenizer/tokenizer.h"

namespace koi::train {
namespace {

TEST(CharVocab, SortedDistinctCharactersThenBytes) {
  CharVocab v = CharVocab::from_text("hello world\nhé");
  EXPECT_EQ(v.chars(), (std::vector<std::string>{"\n", " ", "d", "e", "h", "l", "o", "r", "w", "\xC3\xA9"}));
  EXPECT_EQ(v.n_vocab(), 10 + 256);
  auto ids = v.encode("hé lo");
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<int32_t>{4, 9, 1, 5, 6}));
}

TEST(CharVocab, UnknownCharacterIsAnErrorNamingIt) {
  CharVocab v = CharVocab::from_text("abc");
  auto ids = v.encode("abxc");
  ASSERT_FALSE(ids.ok());
  EXPECT_EQ(ids.status().message(),
            "character 'x' at byte 2 is not in the character vocabulary of 3 characters; build the vocabulary from a "
            "corpus that contains it");
}

// The exported SentencePiece-style tokenizer encodes exactly like the vocabulary, decodes
// back to the text, and falls back to byte tokens for characters it never saw.
TEST(CharVocab, SpecTokenizerRoundTrips) {
  const std::string text = "First Citizen:\nBefore we proceed, hear me speak.";
  CharVocab v = CharVocab::from_text(text);
  auto tok = tokenizer::Tokenizer::create(v.to_spec());
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  EXPECT_EQ(tok->n_vocab(), v.n_vocab());
  const std::vector<int32_t> ids = tok->encode(text, /*add_special=*/true, /*parse_special=*/false);
  EXPECT_EQ(ids, *v.encode(text));
  EXPECT_EQ(tok->decode(ids), text);
  const int n_chars = static_cast<int>(v.chars().size());
  EXPECT_EQ(tok->encode("Z", false, false), (std::vector<int32_t>{n_chars + 'Z'}));
}

TEST(BatchLoader, BatchesDependOnlyOnSeedAndPosition) {
  std::vector<int32_t> tokens(1000);
  for (int i = 0; i < 1000; ++i) tokens[i] = i;
  BatchLoader a(&tokens, 3, 5, 42), b(&tokens, 3, 5, 42);
  std::vector<int32_t> in1(15), tg1(15), in2(15), tg2(15);
  for (int i = 0; i < 4; ++i) a.next(in1.data(), tg1.data());
  EXPECT_EQ(a.position(), 4u);
  b.set_position(3);
  b.next(in2.data(), tg2.data());
  EXPECT_EQ(in1, in2);
  EXPECT_EQ(tg1, tg2);
  for (int r = 0; r < 3; ++r) {
    for (int t = 0; t < 5; ++t) {
      EXPECT_EQ(tg1[r * 5 + t], in1[r * 5 + t] + 1);  // targets are the inputs shifted by one
      if (t > 0) EXPECT_EQ(in1[r * 5 + t], in1[r * 5 + t - 1] + 1);
    }
    EXPECT_LT(tg1[r * 5 + 4], 1000);
  }
  BatchLoader c(&tokens, 3, 5, 43);
  c.set_position(3);
  c.next(in2.data(), tg2.data());
  EXPECT_NE(in1, in2);
}

}  // namespace
}  // namespace koi::train
