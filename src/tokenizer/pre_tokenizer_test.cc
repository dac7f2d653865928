// The Hugging Face pre-tokenizers on exact small cases: every Split behaviour and invert
// (the examples of the Hugging Face documentation), ByteLevel with its options, Digits,
// Punctuation, Whitespace, WhitespaceSplit, Metaspace with each prepend scheme, and a
// Sequence.
#include "tokenizer/pre_tokenizer.h"

#include <gtest/gtest.h>

namespace koi::tokenizer {
namespace {

using Kind = PreTokenizerStep::Kind;
using Pieces = std::vector<std::string>;

const std::string kMark = "\xE2\x96\x81";  // "▁"

PreTokenizerStep split(std::string pattern, SplitBehavior behavior, bool regex = false, bool invert = false) {
  PreTokenizerStep s;
  s.kind = Kind::kSplit;
  s.pattern = std::move(pattern);
  s.regex = regex;
  s.behavior = behavior;
  s.invert = invert;
  return s;
}

PreTokenizerStep of(Kind kind) {
  PreTokenizerStep s;
  s.kind = kind;
  return s;
}

Pieces run(const std::vector<PreTokenizerStep>& steps, std::string_view text, bool first = true) {
  Pieces out;
  PreTokenizer::create(steps).value().pre_tokenize(text, first, &out);
  return out;
}

TEST(PreTokenizerTest, SplitBehaviours) {
  const std::string text = "the-final--countdown";
  EXPECT_EQ(run({split("-", SplitBehavior::kRemoved)}, text), (Pieces{"the", "final", "countdown"}));
  EXPECT_EQ(run({split("-", SplitBehavior::kIsolated)}, text), (Pieces{"the", "-", "final", "-", "-", "countdown"}));
  EXPECT_EQ(run({split("-", SplitBehavior::kMergedWithPrevious)}, text),
            (Pieces{"the-", "final-", "-", "countdown"}));
  EXPECT_EQ(run({split("-", SplitBehavior::kMergedWithNext)}, text), (Pieces{"the", "-final", "-", "-countdown"}));
  EXPECT_EQ(run({split("-", SplitBehavior::kContiguous)}, text), (Pieces{"the", "-", "final", "--", "countdown"}));
}

TEST(PreTokenizerTest, SplitRegexAndInvert) {
  // invert: the matches are the pieces kept, the text between them is the delimiter.
  EXPECT_EQ(run({split(R"(\w+)", SplitBehavior::kRemoved, true, true)}, "the-final--countdown"),
            (Pieces{"the", "final", "countdown"}));
  EXPECT_EQ(run({split(R"(\w+)", SplitBehavior::kIsolated, true, true)}, "ab, cd"), (Pieces{"ab", ", ", "cd"}));
  // A string pattern is literal.
  EXPECT_EQ(run({split(".", SplitBehavior::kRemoved)}, "a.b"), (Pieces{"a", "b"}));
}

TEST(PreTokenizerTest, ByteLevelOptions) {
  PreTokenizerStep byte_level = of(Kind::kByteLevel);
  EXPECT_EQ(run({byte_level}, "Hello world"), (Pieces{"Hello", "\xC4\xA0world"}));
  byte_level.add_prefix_space = true;
  EXPECT_EQ(run({byte_level}, "Hello world"), (Pieces{"\xC4\xA0Hello", "\xC4\xA0world"}));
  EXPECT_EQ(run({byte_level}, " x"), (Pieces{"\xC4\xA0x"}));  // already starts with a space
  byte_level.add_prefix_space = false;
  byte_level.use_regex = false;
  EXPECT_EQ(run({byte_level}, "a b\n"), (Pieces{"a\xC4\xA0" "b\xC4\x8A"}));
  // Bytes of a multi-byte character each map to one character: "é" is C3 A9.
  EXPECT_EQ(run({byte_level}, "\xC3\xA9"), (Pieces{"\xC3\x83\xC2\xA9"}));
}

TEST(PreTokenizerTest, DigitsPunctuationWhitespace) {
  PreTokenizerStep digits = of(Kind::kDigits);
  EXPECT_EQ(run({digits}, "abc123def4"), (Pieces{"abc", "123", "def", "4"}));
  digits.individual_digits = true;
  EXPECT_EQ(run({digits}, "abc123def4"), (Pieces{"abc", "1", "2", "3", "def", "4"}));
  const std::string text = "Hey friend!     How are you?!?";
  EXPECT_EQ(run({of(Kind::kPunctuation)}, text), (Pieces{"Hey friend", "!", "     How are you", "?", "!", "?"}));
  EXPECT_EQ(run({of(Kind::kWhitespace)}, text), (Pieces{"Hey", "friend", "!", "How", "are", "you", "?!?"}));
  EXPECT_EQ(run({of(Kind::kWhitespaceSplit)}, text), (Pieces{"Hey", "friend!", "How", "are", "you?!?"}));
  // Unicode letters are word characters; U+3000 is whitespace.
  EXPECT_EQ(run({of(Kind::kWhitespace)}, "caf\xC3\xA9\xE3\x80\x80ok."), (Pieces{"caf\xC3\xA9", "ok", "."}));
}

TEST(PreTokenizerTest, MetaspaceSchemes) {
  PreTokenizerStep meta = of(Kind::kMetaspace);
  EXPECT_EQ(run({meta}, "Hey friend!"), (Pieces{kMark + "Hey", kMark + "friend!"}));
  EXPECT_EQ(run({meta}, "Hey friend!", false), (Pieces{kMark + "Hey", kMark + "friend!"}));
  meta.prepend_scheme = PrependScheme::kFirst;
  EXPECT_EQ(run({meta}, "Hey friend", true), (Pieces{kMark + "Hey", kMark + "friend"}));
  EXPECT_EQ(run({meta}, "Hey friend", false), (Pieces{"Hey", kMark + "friend"}));
  meta.prepend_scheme = PrependScheme::kNever;
  EXPECT_EQ(run({meta}, "Hey  friend"), (Pieces{"Hey", kMark, kMark + "friend"}));
  meta.prepend_scheme = PrependScheme::kAlways;
  meta.split = false;
  EXPECT_EQ(run({meta}, "Hey friend"), (Pieces{kMark + "Hey" + kMark + "friend"}));
}

TEST(PreTokenizerTest, SequenceAppliesEachStepToEveryPiece) {
  PreTokenizerStep digits = of(Kind::kDigits);
  digits.individual_digits = true;
  EXPECT_EQ(run({digits, of(Kind::kByteLevel)}, "ab 12"), (Pieces{"ab", "\xC4\xA0", "1", "2"}));
  // split() only cuts: no byte mapping.
  std::vector<std::string_view> views;
  PreTokenizer::create(std::vector<PreTokenizerStep>{digits, of(Kind::kByteLevel)}).value().split("ab 12", &views);
  EXPECT_EQ(views, (std::vector<std::string_view>{"ab", " ", "1", "2"}));
}

TEST(PreTokenizerTest, BadRegexNamesIt) {
  auto bad = PreTokenizer::create({split("(x", SplitBehavior::kIsolated, true)});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("pre-tokenizer regex '(x' does not compile"), std::string::npos);
}

}  // namespace
}  // namespace koi::tokenizer
