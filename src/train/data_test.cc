#include "train/data.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <numeric>

#include "base/file.h"
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

TEST(CharVocab, SeveralTextsGiveTheVocabularyOfTheirConcatenation) {
  EXPECT_EQ(CharVocab::from_texts({"b\xC3\xA9" "a", "zc a"}).chars(), CharVocab::from_text("b\xC3\xA9" "azc a").chars());
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

class TokenShardsTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = *make_temp_dir("koi-shards"); }
  void TearDown() override { remove_all(dir_); }

  // A text file; returned mapped.
  MappedFile text_file(const std::string& name, const std::string& text) {
    const std::string path = path_join(dir_, name);
    EXPECT_TRUE(write_file_atomic(path, text).ok());
    Result<MappedFile> file = MappedFile::open(path);
    EXPECT_TRUE(file.ok());
    return std::move(*file);
  }
  // Shards in dir_/name holding the tokens 0, 1, ..., n - 1 (one per byte of a text).
  TokenShards counting_shards(const std::string& name, int n, int64_t shard_tokens, int n_vocab = 1000) {
    std::vector<MappedFile> texts;
    texts.push_back(text_file(name + ".txt", std::string(static_cast<size_t>(n), 'a')));
    int32_t next = 0;
    EncodeFn count = [&](std::string_view chunk, bool) -> Result<std::vector<int32_t>> {
      std::vector<int32_t> ids(chunk.size());
      std::iota(ids.begin(), ids.end(), next);
      next += static_cast<int32_t>(chunk.size());
      return ids;
    };
    ShardOptions options;
    options.shard_tokens = shard_tokens;
    const std::string dir = path_join(dir_, name);
    EXPECT_TRUE(write_token_shards(dir, 7, texts, count, n_vocab, options).ok());
    auto shards = TokenShards::open(dir, 7);
    EXPECT_TRUE(shards.ok()) << shards.status().message();
    return std::move(*shards);
  }
  std::string dir_;
};

TEST_F(TokenShardsTest, ReadsTheSequenceAcrossShardBoundaries) {
  testing::internal::CaptureStderr();
  TokenShards shards = counting_shards("cut", 1000, 64);
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_EQ(log.substr(0, log.find(" (")),
            "tokenized 0.0 MB into 1000 tokens: 16 shards of uint16 in " + path_join(dir_, "cut"));
  EXPECT_EQ(shards.size(), 1000u);
  EXPECT_EQ(shards.num_shards(), 16);  // 15 of 64 tokens, the last of 40
  EXPECT_EQ(shards.max_token(), 999);
  EXPECT_EQ(std::filesystem::file_size(path_join(dir_, "cut/tokens-00000.bin")), 48u + 64 * 2);
  EXPECT_EQ(std::filesystem::file_size(path_join(dir_, "cut/tokens-00015.bin")), 48u + 40 * 2);
  std::vector<int32_t> out(140);
  shards.read(60, 140, out.data());  // spans shards 0 to 3
  for (int i = 0; i < 140; ++i) EXPECT_EQ(out[i], 60 + i);
  shards.read(990, 10, out.data());
  EXPECT_EQ(out[9], 999);
  // A vocabulary over 65536 ids stores uint32 tokens.
  TokenShards wide = counting_shards("wide", 100, 1000, 70000);
  EXPECT_EQ(std::filesystem::file_size(path_join(dir_, "wide/tokens-00000.bin")), 48u + 100 * 4);
  wide.read(0, 100, out.data());
  EXPECT_EQ(out[99], 99);
}

TEST_F(TokenShardsTest, BatchesDependOnlyOnSeedAndPositionNotOnTheShards) {
  TokenShards one = counting_shards("one", 1000, 1000), cut = counting_shards("cut", 1000, 37);
  ASSERT_EQ(one.num_shards(), 1);
  BatchLoader a(TokenRange{&one, 0, 1000}, 3, 5, 42), b(TokenRange{&cut, 0, 1000}, 3, 5, 42);
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
      if (t > 0) {
        EXPECT_EQ(in1[r * 5 + t], in1[r * 5 + t - 1] + 1);
      }
    }
    EXPECT_LT(tg1[r * 5 + 4], 1000);
  }
  BatchLoader c(TokenRange{&one, 0, 1000}, 3, 5, 43);
  c.set_position(3);
  c.next(in2.data(), tg2.data());
  EXPECT_NE(in1, in2);
  // A range draws only from its tokens: the validation part of a 90/10 split.
  BatchLoader val(TokenRange{&cut, 900, 1000}, 3, 5, 42);
  for (int i = 0; i < 20; ++i) {
    val.next(in1.data(), tg1.data());
    for (int32_t id : in1) EXPECT_GE(id, 900);
  }
}

// Chunks end at a line end followed by printable ASCII other than a space; encoding chunk by chunk gives
// the tokens of one encode() of the whole text, and a corpus of several chunks prints progress.
TEST_F(TokenShardsTest, ChunkedTokenizationEqualsOneEncodeAndPrintsProgress) {
  std::string text;
  for (int i = 0; i < 40; ++i) text += "line " + std::to_string(i) + (i % 3 == 0 ? "\n\n  indented\n" : "\n");
  std::vector<MappedFile> texts;
  texts.push_back(text_file("a.txt", text));
  texts.push_back(text_file("b.txt", "second file\n"));
  const CharVocab vocab = CharVocab::from_texts({texts[0].view(), texts[1].view()});
  std::vector<std::string> chunks;
  EncodeFn encode = [&](std::string_view chunk, bool file_start) {
    chunks.push_back((file_start ? "^" : "") + std::string(chunk));
    return vocab.encode(chunk);
  };
  ShardOptions options;
  options.chunk_bytes = 7;
  testing::internal::CaptureStderr();
  ASSERT_TRUE(write_token_shards(path_join(dir_, "s"), 1, texts, encode, vocab.n_vocab(), options).ok());
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_GE(std::count(log.begin(), log.end(), '%'), 8) << log;  // a line at every tenth or so
  EXPECT_NE(log.find("tokenizing: 100% of 0.0 MB"), std::string::npos) << log;
  EXPECT_EQ(chunks[0], "^line 0\n\n  indented\n");  // not cut before a blank or an indented line
  EXPECT_EQ(chunks[1], "line 1\n");
  EXPECT_EQ(chunks.back(), "^second file\n");
  auto shards = TokenShards::open(path_join(dir_, "s"), 1);
  ASSERT_TRUE(shards.ok());
  std::vector<int32_t> expected = *vocab.encode(text + "second file\n"), got(shards->size());
  shards->read(0, static_cast<int64_t>(got.size()), got.data());
  EXPECT_EQ(got, expected);
}

TEST_F(TokenShardsTest, KeyNamesCorpusAndTokenizer) {
  const std::string id_a = tokenizer_identity(CharVocab::from_text("ab"));
  const uint64_t key = shard_key({"ab", "c"}, id_a);
  EXPECT_EQ(shard_key({"ab", "c"}, id_a), key);
  EXPECT_NE(shard_key({"a", "bc"}, id_a), key);  // the same bytes cut into other files
  EXPECT_NE(shard_key({"ab", "d"}, id_a), key);
  EXPECT_NE(shard_key({"ab", "c"}, tokenizer_identity(CharVocab::from_text("abc"))), key);
  tokenizer::TokenizerSpec spec = CharVocab::from_text("ab").to_spec();
  const std::string id_spec = tokenizer_identity(spec);
  spec.scores[0] = 1.0f;
  EXPECT_NE(tokenizer_identity(spec), id_spec);
  EXPECT_NE(id_spec, id_a);
}

TEST_F(TokenShardsTest, StaleOrIncompleteShardsAreNotFound) {
  EXPECT_EQ(TokenShards::open(path_join(dir_, "none"), 7).status().message(),
            path_join(dir_, "none") + ": no token shards");
  counting_shards("s", 1000, 400);
  Result<TokenShards> other = TokenShards::open(path_join(dir_, "s"), 8);
  EXPECT_EQ(other.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(other.status().message(),
            path_join(dir_, "s/tokens-00000.bin") + ": tokens of another corpus or tokenizer");
  // Rebuilding replaces every shard: 3 shards of 400 become 1 of 1000.
  counting_shards("s", 1000, 1000);
  EXPECT_FALSE(file_exists(path_join(dir_, "s/tokens-00001.bin")));
  counting_shards("s", 1000, 400);
  remove_all(path_join(dir_, "s/tokens-00002.bin"));  // a crash before the last shard
  EXPECT_EQ(TokenShards::open(path_join(dir_, "s"), 7).status().message(),
            path_join(dir_, "s/tokens-00002.bin") + ": missing; the shards of an interrupted tokenization");
}

TEST_F(TokenShardsTest, DamagedShardIsAnErrorNamingTheFile) {
  counting_shards("s", 1000, 400);
  const std::string path = path_join(dir_, "s/tokens-00001.bin");
  std::string bytes = *read_file(path);
  ASSERT_TRUE(write_file_atomic(path, bytes.substr(0, 100)).ok());
  Result<TokenShards> truncated = TokenShards::open(path_join(dir_, "s"), 7);
  EXPECT_EQ(truncated.status().code(), StatusCode::kCorrupt);
  EXPECT_EQ(truncated.status().message(),
            path + ": truncated or damaged token shard: the header says 400 tokens (848 bytes) but the file has 100 "
                   "bytes; delete it (or its directory) to tokenize the corpus again");
  ASSERT_TRUE(write_file_atomic(path, bytes.substr(0, 20)).ok());
  EXPECT_EQ(TokenShards::open(path_join(dir_, "s"), 7).status().message(),
            path + ": truncated token shard: 20 bytes, less than the 48-byte header; delete it (or its directory) to "
                   "tokenize the corpus again");
  bytes[0] = 'X';
  ASSERT_TRUE(write_file_atomic(path, bytes).ok());
  EXPECT_EQ(TokenShards::open(path_join(dir_, "s"), 7).status().message(),
            path + ": not a Koi token shard (no KOITOK01 magic); delete it (or its directory) to tokenize the corpus "
                   "again");
}

}  // namespace
}  // namespace koi::train
