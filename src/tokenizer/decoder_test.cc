// The Hugging Face decoder steps on exact small cases, token by token: ByteLevel, Metaspace,
// Replace, ByteFallback, Fuse and Strip (before and after a Fuse), and the error for a step
// a streaming decoder cannot run.
#include "tokenizer/decoder.h"

#include <gtest/gtest.h>

namespace koi::tokenizer {
namespace {

using Kind = DecoderStep::Kind;
const std::string kMark = "\xE2\x96\x81";  // "▁"

DecoderStep of(Kind kind, std::string pattern = "", std::string content = "") {
  DecoderStep s;
  s.kind = kind;
  s.pattern = std::move(pattern);
  s.content = std::move(content);
  return s;
}

DecoderStep strip(std::string content, int32_t start, int32_t stop) {
  DecoderStep s = of(Kind::kStrip, "", std::move(content));
  s.start = start;
  s.stop = stop;
  return s;
}

// Decodes tokens as a sequence: the first one starts the text.
std::string run(const std::vector<DecoderStep>& steps, const std::vector<std::string>& tokens) {
  Decoder decoder = Decoder::create(steps).value();
  std::string out;
  for (size_t i = 0; i < tokens.size(); ++i) decoder.decode_piece(tokens[i], i == 0, &out);
  return out;
}

TEST(DecoderTest, ByteLevelMapsBack) {
  EXPECT_EQ(run({of(Kind::kByteLevel)}, {"Hello", "\xC4\xA0world", "\xC4\x8A"}), "Hello world\n");
  // "é" as two byte-level characters, split over two tokens: the bytes come out in order.
  EXPECT_EQ(run({of(Kind::kByteLevel)}, {"\xC3\x83", "\xC2\xA9"}), "\xC3\xA9");
}

TEST(DecoderTest, MetaspaceDropsTheFirstSpace) {
  DecoderStep meta = of(Kind::kMetaspace);
  EXPECT_EQ(run({meta}, {kMark + "Hey", kMark + "friend"}), "Hey friend");
  meta.prepend_scheme = PrependScheme::kNever;
  EXPECT_EQ(run({meta}, {kMark + "Hey", kMark + "friend"}), " Hey friend");
}

TEST(DecoderTest, Llama2Chain) {
  // Replace("▁", " "), ByteFallback, Fuse, Strip(" ", 1, 0).
  std::vector<DecoderStep> chain = {of(Kind::kReplace, kMark, " "), of(Kind::kByteFallback), of(Kind::kFuse),
                                    strip(" ", 1, 0)};
  EXPECT_EQ(run(chain, {kMark + "Hello", kMark + "world", "<0x21>", "<0x0A>"}), "Hello world!\n");
  // After a Fuse the Strip applies where the text starts only.
  EXPECT_EQ(run(chain, {kMark + kMark + "x", kMark + "y"}), " x y");
  // Gemma: no Strip; the space prefix stays.
  EXPECT_EQ(run({of(Kind::kReplace, kMark, " "), of(Kind::kByteFallback), of(Kind::kFuse)}, {kMark + "a"}), " a");
}

TEST(DecoderTest, StripWithoutFuseIsPerToken) {
  EXPECT_EQ(run({strip(" ", 1, 1)}, {" a ", "  b  "}), "a b ");
  EXPECT_EQ(run({strip("_", 2, 0)}, {"___a", "_b"}), "_ab");
}

TEST(DecoderTest, ReplaceRegex) {
  DecoderStep re = of(Kind::kReplace, "[0-9]+", "#");
  re.regex = true;
  EXPECT_EQ(run({re}, {"a12", "3b"}), "a##b");
}

TEST(DecoderTest, StripStopAfterFuseIsRefused) {
  auto bad = Decoder::create({of(Kind::kFuse), strip(" ", 0, 1)});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "decoder Strip with stop > 0 after a Fuse is not supported (it strips the end of the whole text, "
            "which a streaming decoder cannot know)");
}

}  // namespace
}  // namespace koi::tokenizer
