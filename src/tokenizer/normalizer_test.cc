// The Hugging Face normalizer steps on exact small cases: Unicode forms (ICU), per
// character lowercase, Strip, Replace with a string and a regex, Prepend, their order, and
// bytes that are not UTF-8.
#include "tokenizer/normalizer.h"

#include <gtest/gtest.h>

namespace koi::tokenizer {
namespace {

using Kind = NormalizerStep::Kind;

NormalizerStep step(Kind kind, std::string pattern = "", std::string content = "", bool regex = false) {
  NormalizerStep s;
  s.kind = kind;
  s.pattern = std::move(pattern);
  s.content = std::move(content);
  s.regex = regex;
  return s;
}

std::string run(const std::vector<NormalizerStep>& steps, std::string_view text) {
  return Normalizer::create(steps).value().normalize(text);
}

TEST(NormalizerTest, UnicodeForms) {
  const std::string decomposed = "e\xCC\x81";  // e + U+0301
  const std::string composed = "\xC3\xA9";     // U+00E9
  EXPECT_EQ(run({step(Kind::kNfc)}, decomposed), composed);
  EXPECT_EQ(run({step(Kind::kNfd)}, composed), decomposed);
  // Compatibility forms: the ligature U+FB01 and U+0133 become plain letters, U+2460 "1".
  EXPECT_EQ(run({step(Kind::kNfkc)}, "\xEF\xAC\x81 \xC4\xB3 \xE2\x91\xA0"), "fi ij 1");
  EXPECT_EQ(run({step(Kind::kNfkd)}, "\xEF\xAC\x81" + composed), "fi" + decomposed);
  // NFC keeps the ligature.
  EXPECT_EQ(run({step(Kind::kNfc)}, "\xEF\xAC\x81"), "\xEF\xAC\x81");
  // Invalid bytes pass through; the valid runs around them are normalized.
  EXPECT_EQ(run({step(Kind::kNfc)}, decomposed + "\xFF" + decomposed), composed + "\xFF" + composed);
}

TEST(NormalizerTest, LowercaseIsPerCharacter) {
  EXPECT_EQ(run({step(Kind::kLowercase)}, "HeLLo \xC3\x80\xC3\x89"), "hello \xC3\xA0\xC3\xA9");
  // U+0130 has a two-character lowercase (i + U+0307); a final capital sigma stays sigma
  // (no word context, as Rust's char::to_lowercase).
  EXPECT_EQ(run({step(Kind::kLowercase)}, "\xC4\xB0"), "i\xCC\x87");
  EXPECT_EQ(run({step(Kind::kLowercase)}, "\xCE\xA3\xCE\x91\xCE\xA3"), "\xCF\x83\xCE\xB1\xCF\x83");
}

TEST(NormalizerTest, StripBothSidesOrOne) {
  NormalizerStep left = step(Kind::kStrip);
  left.left = true;
  NormalizerStep right = step(Kind::kStrip);
  right.right = true;
  NormalizerStep both = left;
  both.right = true;
  const std::string text = " \xE3\x80\x80hi there \t\n";  // U+3000 is White_Space
  EXPECT_EQ(run({left}, text), "hi there \t\n");
  EXPECT_EQ(run({right}, text), " \xE3\x80\x80hi there");
  EXPECT_EQ(run({both}, text), "hi there");
  EXPECT_EQ(run({both}, "  \t "), "");
}

TEST(NormalizerTest, ReplaceAndPrepend) {
  EXPECT_EQ(run({step(Kind::kReplace, " ", "\xE2\x96\x81")}, "a  b"), "a\xE2\x96\x81\xE2\x96\x81" "b");
  // A string pattern is literal: "." is a dot.
  EXPECT_EQ(run({step(Kind::kReplace, ".", "!")}, "a.b..c"), "a!b!!c");
  EXPECT_EQ(run({step(Kind::kReplace, R"(\s+)", " ", true)}, "a \t\n b  c"), "a b c");
  EXPECT_EQ(run({step(Kind::kPrepend, "", "\xE2\x96\x81")}, "x"), "\xE2\x96\x81x");
  EXPECT_EQ(run({step(Kind::kPrepend, "", "\xE2\x96\x81")}, ""), "");  // nothing to prefix
}

TEST(NormalizerTest, StepsRunInOrder) {
  EXPECT_EQ(run({step(Kind::kReplace, "A", "B"), step(Kind::kLowercase)}, "A"), "b");
  EXPECT_EQ(run({step(Kind::kLowercase), step(Kind::kReplace, "A", "B")}, "A"), "a");
  // The Llama 2 pair.
  EXPECT_EQ(run({step(Kind::kPrepend, "", "_"), step(Kind::kReplace, " ", "_")}, "a b"), "_a_b");
  EXPECT_EQ(run({}, "As is"), "As is");
}

TEST(NormalizerTest, BadRegexIsAnError) {
  auto bad = Normalizer::create({step(Kind::kReplace, "(open", "", true)});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("regex '(open' does not compile"), std::string::npos);
}

}  // namespace
}  // namespace koi::tokenizer
