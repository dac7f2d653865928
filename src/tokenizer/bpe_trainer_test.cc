// train_bpe on corpora small enough to check the merges by hand, then its invariants on
// larger synthetic text: exact vocabulary size, determinism (also across threads), special
// tokens, and lossless encoding of bytes it never saw.
#include "tokenizer/bpe_trainer.h"

#include <gtest/gtest.h>

#include "base/file.h"
#include "base/random.h"
#include "tokenizer/load.h"
#include "tokenizer/tokenizer.h"

namespace koi::tokenizer {
namespace {

using namespace std::string_literals;

BpeTrainOptions plain(int vocab_size, int min_frequency = 1) {
  BpeTrainOptions o;
  o.vocab_size = vocab_size;
  o.min_frequency = min_frequency;
  o.bos = o.eos = "";
  return o;
}

TokenizerSpec train(std::string_view text, const BpeTrainOptions& o) {
  std::vector<std::string_view> texts{text};
  auto spec = train_bpe(texts, o);
  EXPECT_TRUE(spec.ok()) << spec.status().message();
  return spec.ok() ? *spec : TokenizerSpec{};
}

// 300 random words drawn with a skewed distribution, sentences, numbers, newlines.
std::string synthetic_corpus(size_t bytes, uint64_t seed) {
  Rng rng(seed);
  std::vector<std::string> words(300);
  for (std::string& w : words) {
    for (uint64_t len = 2 + rng.below(8); w.size() < len;) w += char('a' + rng.below(26));
  }
  std::string text;
  while (text.size() < bytes) {
    const uint64_t pick = rng.below(rng.below(words.size()) + 1);
    text += pick % 50 == 7 ? std::to_string(rng.below(100000)) : words[pick];
    const uint64_t sep = rng.below(20);
    text += sep == 0 ? ".\n" : sep == 1 ? ",  " : sep == 2 ? "\n\n" : " ";
  }
  return text;
}

TEST(BpeTrainer, MergesTheMostFrequentPairFirst) {
  // Pieces "abab" and " abab": (a,b) occurs 4 times, then (ab,ab) twice, then (Ġ,abab).
  TokenizerSpec spec = train("abab abab", plain(259));
  EXPECT_EQ(spec.merges, (std::vector<std::string>{"a b", "ab ab", "Ġ abab"}));
  ASSERT_EQ(spec.tokens.size(), 259u);
  EXPECT_EQ(spec.tokens[256], "ab");
  EXPECT_EQ(spec.tokens[257], "abab");
  EXPECT_EQ(spec.tokens[258], "Ġabab");
  EXPECT_EQ(spec.tokens[uint8_t('a')], "a");
  EXPECT_EQ(spec.tokens[uint8_t(' ')], "Ġ");
  EXPECT_EQ(spec.pre, "llama-bpe");
  EXPECT_TRUE(spec.byte_level);
}

TEST(BpeTrainer, TiesGoToTheSmallestPairOfIds) {
  // Pieces "ab" and " cd": three pairs once each. (' ', c) = (32, 99) is the smallest, then
  // (a, b) = (97, 98) before (Ġc, d) = (256, 100).
  TokenizerSpec spec = train("ab cd", plain(259));
  EXPECT_EQ(spec.merges, (std::vector<std::string>{"Ġ c", "a b", "Ġc d"}));
}

TEST(BpeTrainer, CountsOverlappingPairsOnce) {
  // "aaaa": (a,a) merges left to right into [aa][aa], never [a][aa][a].
  TokenizerSpec spec = train("aaaa", plain(258));
  EXPECT_EQ(spec.merges, (std::vector<std::string>{"a a", "aa aa"}));
  // "aaa aaa" holds (a,a) four times; after the merge [aa][a] twice.
  spec = train("aaa aaa", plain(258));
  EXPECT_EQ(spec.merges, (std::vector<std::string>{"a a", "aa a"}));
}

TEST(BpeTrainer, StopsWhenNoPairReachesMinFrequency) {
  TokenizerSpec spec = train("abab abab", plain(300, 2));
  EXPECT_EQ(spec.merges, (std::vector<std::string>{"a b", "ab ab"}));
  EXPECT_EQ(spec.tokens.size(), 258u);
}

TEST(BpeTrainer, VocabularySizeIsExact) {
  const std::string corpus = synthetic_corpus(20000, 1);
  for (int vocab : {256 + 2 + 1, 300, 333}) {
    BpeTrainOptions o;
    o.vocab_size = vocab;
    TokenizerSpec spec = train(corpus, o);
    EXPECT_EQ(int(spec.tokens.size()), vocab);
    EXPECT_EQ(spec.types.size(), spec.tokens.size());
  }
}

TEST(BpeTrainer, DeterministicAcrossRunsAndThreads) {
  // 300 KB: cut into several chunks for the counting threads.
  const std::string corpus = synthetic_corpus(300000, 2);
  BpeTrainOptions o;
  o.vocab_size = 400;
  TokenizerSpec one = train(corpus, o);
  EXPECT_EQ(train(corpus, o).merges, one.merges);
  o.threads = 3;
  TokenizerSpec three = train(corpus, o);
  EXPECT_EQ(three.merges, one.merges);
  EXPECT_EQ(three.tokens, one.tokens);
  EXPECT_GT(one.merges.size(), 100u);
}

TEST(BpeTrainer, SpecialTokensComeLastAndAreNotLearned) {
  BpeTrainOptions o;
  o.vocab_size = 262;
  o.specials = {"<|eot_id|>"};
  TokenizerSpec spec = train("<|end_of_text|>xy<|end_of_text|>xy<|eot_id|>", o);
  ASSERT_EQ(spec.tokens.size(), 260u);  // one merge only: (x,y) occurs twice, nothing else does
  EXPECT_EQ(spec.merges, (std::vector<std::string>{"x y"}));
  EXPECT_EQ(spec.bos_id, 257);
  EXPECT_EQ(spec.eos_id, 258);
  EXPECT_EQ(spec.tokens[257], "<|begin_of_text|>");
  EXPECT_EQ(spec.tokens[258], "<|end_of_text|>");
  EXPECT_EQ(spec.tokens[259], "<|eot_id|>");
  EXPECT_EQ(spec.types[259], TokenType::kControl);
  EXPECT_EQ(spec.types[256], TokenType::kNormal);

  auto tok = Tokenizer::create(spec);
  ASSERT_TRUE(tok.ok());
  EXPECT_EQ(tok->encode("xy<|eot_id|>", false, true), (std::vector<int32_t>{256, 259}));
  EXPECT_TRUE(tok->is_eog(258));
}

TEST(BpeTrainer, EncodesUnseenBytesLosslessly) {
  const std::string corpus = synthetic_corpus(50000, 3);
  BpeTrainOptions o;
  o.vocab_size = 500;
  auto tok = Tokenizer::create(train(corpus, o));
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  for (std::string text : {std::string("the king and thee"), std::string("日本語 🙂 café\t\r\n  x"),
                           "\xff\xfe invalid \x80 bytes \0 nul"s, corpus.substr(0, 3000)}) {
    std::vector<int32_t> ids = tok->encode(text, false, false);
    EXPECT_EQ(tok->decode(ids), text);
  }
  // 244 merges over 300 words halve the tokens (bytes: 50001).
  EXPECT_LT(double(tok->encode(corpus, false, false).size()), 0.55 * double(corpus.size()));
}

// Checkpoints of runs on a trained tokenizer keep it as GGUF metadata (tokenizer.gguf).
TEST(BpeTrainer, SurvivesGgufMetadata) {
  const std::string corpus = synthetic_corpus(20000, 4);
  BpeTrainOptions o;
  o.vocab_size = 350;
  TokenizerSpec spec = train(corpus, o);
  const std::string dir = make_temp_dir("koi-bpe-gguf-").value();
  const std::string path = path_join(dir, "tokenizer.gguf");
  model::GgufWriter writer;
  spec_to_gguf(spec, writer);
  ASSERT_TRUE(writer.write(path).ok());
  auto reread = Tokenizer::create(spec_from_gguf(model::GgufFile::open(path).value()).value());
  auto original = Tokenizer::create(spec);
  ASSERT_TRUE(reread.ok() && original.ok());
  for (std::string_view text : {std::string_view(corpus).substr(0, 2000), std::string_view("日本<|end_of_text|>")}) {
    EXPECT_EQ(reread->encode(text, true, true), original->encode(text, true, true));
  }
  EXPECT_EQ(reread->eos_id(), original->eos_id());
  remove_all(dir);
}

TEST(BpeTrainer, RejectsBadOptions) {
  std::vector<std::string_view> texts{"abc"};
  BpeTrainOptions o;
  o.vocab_size = 257;
  EXPECT_EQ(train_bpe(texts, o).status().message(),
            "vocab size 257 leaves no room for merges: the 256 byte tokens and 2 special tokens need 258; use a "
            "larger vocab size");
  o.vocab_size = 300;
  o.specials = {"<|end_of_text|>"};
  EXPECT_EQ(train_bpe(texts, o).status().message(), "special token '<|end_of_text|>' is given twice");
  o.specials = {"Ġ"};
  EXPECT_EQ(train_bpe(texts, o).status().message(),
            "special token 'Ġ' is the text of a byte token; choose a longer one");
  o.specials.clear();
  o.min_frequency = 0;
  EXPECT_EQ(train_bpe(texts, o).status().message(), "min frequency 0 must be at least 1");
}

}  // namespace
}  // namespace koi::tokenizer
