// SentencePiece-style tokenizer on the real llama2.c tokenizer of stories260K, checked
// against a line-by-line port of llama2.c's encode() (run.c) as the oracle.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <cstring>
#include <map>

#include "base/file.h"
#include "base/random.h"
#include "tokenizer/load.h"
#include "tokenizer/tokenizer.h"

namespace koi::tokenizer {
namespace {

const std::string kTok512 = std::string(KOI_SHARED_DIR) + "/models/stories260K/tok512.bin";

// llama2.c run.c encode(), kept as close to the C as C++ allows: vocab strings exactly as
// stored (plain spaces, "\n<s>\n"), the O(n^2) best-pair scan, byte fallback as byte + 3.
class Llama2cOracle {
 public:
  explicit Llama2cOracle(const std::string& path) {
    std::string bytes = read_file(path).value();
    size_t pos = 4;
    while (pos < bytes.size()) {
      float score;
      int32_t len;
      std::memcpy(&score, bytes.data() + pos, 4);
      std::memcpy(&len, bytes.data() + pos + 4, 4);
      pos += 8;
      vocab_.push_back(bytes.substr(pos, len));
      scores_.push_back(score);
      pos += len;
    }
    for (size_t i = 0; i < vocab_.size(); ++i) sorted_.emplace(vocab_[i], int(i));
  }

  std::vector<int32_t> encode(const std::string& text, bool bos) const {
    std::vector<int32_t> tokens;
    if (bos) tokens.push_back(1);
    if (!text.empty()) tokens.push_back(lookup(" "));
    std::string buf;
    for (size_t c = 0; c < text.size(); ++c) {
      if ((text[c] & 0xC0) != 0x80) buf.clear();
      buf += text[c];
      if (c + 1 < text.size() && (text[c + 1] & 0xC0) == 0x80 && buf.size() < 4) continue;
      int id = lookup(buf);
      if (id != -1) {
        tokens.push_back(id);
      } else {
        for (unsigned char b : buf) tokens.push_back(b + 3);
      }
      buf.clear();
    }
    while (true) {
      float best_score = -1e10;
      int best_id = -1;
      int best_idx = -1;
      for (size_t i = 0; i + 1 < tokens.size(); ++i) {
        int id = lookup(vocab_[tokens[i]] + vocab_[tokens[i + 1]]);
        if (id != -1 && scores_[id] > best_score) {
          best_score = scores_[id];
          best_id = id;
          best_idx = int(i);
        }
      }
      if (best_idx == -1) break;
      tokens[best_idx] = best_id;
      tokens.erase(tokens.begin() + best_idx + 1);
    }
    return tokens;
  }

 private:
  int lookup(const std::string& s) const {
    auto it = sorted_.find(s);
    return it == sorted_.end() ? -1 : it->second;
  }
  std::vector<std::string> vocab_;
  std::vector<float> scores_;
  std::map<std::string, int> sorted_;
};

Tokenizer load_tok512() {
  auto tok = load_tokenizer(kTok512);
  EXPECT_TRUE(tok.ok()) << tok.status().to_string();
  return std::move(tok).value();
}

TEST(SpmTest, LoadsTok512) {
  Tokenizer tok = load_tok512();
  EXPECT_EQ(tok.n_vocab(), 512);
  EXPECT_EQ(tok.bos_id(), 1);
  EXPECT_EQ(tok.eos_id(), 2);
  EXPECT_TRUE(tok.is_eog(2));
  EXPECT_FALSE(tok.is_eog(1));
  EXPECT_EQ(tok.token_text(1), "<s>");
  EXPECT_EQ(tok.token_text(13), "<0x0A>");
  EXPECT_EQ(tok.token_type(13), TokenType::kByte);
  EXPECT_EQ(tok.token_text(259), "\xE2\x96\x81t");  // "▁t": spaces are stored as U+2581
}

TEST(SpmTest, OnceUponATimeExactIds) {
  Tokenizer tok = load_tok512();
  std::vector<int32_t> ids = tok.encode("Once upon a time", true, false);
  EXPECT_EQ(ids, Llama2cOracle(kTok512).encode("Once upon a time", true));
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 403, 407, 261, 378}));
  EXPECT_EQ(tok.decode(ids), "<s>Once upon a time");
  EXPECT_EQ(tok.decode(ids, /*skip_special=*/true), "Once upon a time");
  EXPECT_EQ(tok.decode(tok.encode("Once upon a time", false, false)), "Once upon a time");
}

TEST(SpmTest, ByteFallbackForCharactersNotInVocab) {
  Tokenizer tok = load_tok512();
  // "é" (C3 A9) is token 485; "🙂" (F0 9F 99 82) and "ü" (C3 BC) are not in the vocabulary.
  std::vector<int32_t> ids = tok.encode("é🙂ü", false, false);
  EXPECT_EQ(ids, (std::vector<int32_t>{410, 485, 0xF0 + 3, 0x9F + 3, 0x99 + 3, 0x82 + 3, 0xC3 + 3, 0xBC + 3}));
  EXPECT_EQ(tok.token_text(410), "\xE2\x96\x81");  // the dummy prefix "▁"
  EXPECT_EQ(tok.decode(ids), "é🙂ü");
}

TEST(SpmTest, MatchesLlama2cOnShakespeareAndRandomText) {
  Tokenizer tok = load_tok512();
  Llama2cOracle oracle(kTok512);
  std::string corpus = read_file(std::string(KOI_SHARED_DIR) + "/data/tinyshakespeare.txt").value();
  size_t lines = 0;
  for (size_t pos = 0; pos < corpus.size() && lines < 2000; ++lines) {
    size_t end = std::min(corpus.find('\n', pos), corpus.size());
    std::string line = corpus.substr(pos, end - pos);
    ASSERT_EQ(tok.encode(line, true, false), oracle.encode(line, true)) << line;
    ASSERT_EQ(tok.decode(tok.encode(line, true, false), true), line);
    pos = end + 1;
  }
  std::string chunk = corpus.substr(0, 3000);  // newlines, long text: the O(n^2) oracle's limit
  EXPECT_EQ(tok.encode(chunk, false, false), oracle.encode(chunk, false));

  Rng rng(7);
  const std::string alphabet[] = {"a", "b", " ", "  ", "\n", "é", "🙂", "\x80", "\xC3", "\xF0\x9F", "the", "<s>", "\t"};
  for (int round = 0; round < 300; ++round) {
    std::string text;
    int n = int(rng.next_u64() % 12);
    for (int i = 0; i < n; ++i) text += alphabet[rng.next_u64() % std::size(alphabet)];
    ASSERT_EQ(tok.encode(text, false, false), oracle.encode(text, false)) << text;
    ASSERT_EQ(tok.decode(tok.encode(text, false, false)), text);
  }
}

TEST(SpmTest, SpecialTokenTextIsParsedOnlyWhenAsked) {
  Tokenizer tok = load_tok512();
  std::vector<int32_t> parsed = tok.encode("a<s>b", false, true);
  // "▁a", <s>, "▁b": the text after a special token gets its own "▁" prefix.
  EXPECT_EQ(parsed, (std::vector<int32_t>{tok.encode("a", false, false)[0], 1, 268}));
  EXPECT_EQ(tok.decode(parsed), "a<s>b");
  std::vector<int32_t> plain = tok.encode("a<s>b", false, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 1), 0);
  EXPECT_EQ(tok.decode(plain), "a<s>b");
}

TEST(SpmTest, StreamDecoderMatchesDecode) {
  Tokenizer tok = load_tok512();
  std::string text = "Lily saw a 🙂 and said \"héllo\".\nThe end";
  std::vector<int32_t> ids = tok.encode(text, true, false);
  StreamDecoder stream(&tok, /*skip_special=*/true);
  std::string out;
  for (int32_t id : ids) {
    std::string piece = stream.push(id);
    // Every piece is whole characters: the emoji's four byte tokens come out at once.
    EXPECT_NE(piece, "\xF0");
    out += piece;
  }
  out += stream.flush();
  EXPECT_EQ(out, text);
}

TEST(SpmTest, StreamDecoderHoldsAnEmojiUntilItsLastByte) {
  Tokenizer tok = load_tok512();
  StreamDecoder stream(&tok);
  EXPECT_EQ(stream.push(0xF0 + 3), "");
  EXPECT_EQ(stream.push(0x9F + 3), "");
  EXPECT_EQ(stream.push(0x99 + 3), "");
  EXPECT_EQ(stream.push(0x82 + 3), "🙂");
  EXPECT_EQ(stream.push(0xF0 + 3), "");
  EXPECT_EQ(stream.push(0x9F + 3), "");
  EXPECT_EQ(stream.flush(), "\xEF\xBF\xBD");  // the incomplete character is one U+FFFD
  EXPECT_EQ(stream.push(0x80 + 3), "\xEF\xBF\xBD");  // a stray continuation byte never completes
  EXPECT_EQ(stream.push(0xC3 + 3), "");
  EXPECT_EQ(stream.push('A' + 3), "\xEF\xBF\xBD" "A");  // broken by an ASCII byte
}

TEST(SpmTest, LeadingSpaceIsDroppedAfterBosLikeLlama2c) {
  Tokenizer tok = load_tok512();
  StreamDecoder stream(&tok, true);
  EXPECT_EQ(stream.push(1), "");
  EXPECT_EQ(stream.push(403), "Once");   // "▁Once" after BOS
  EXPECT_EQ(stream.push(407), " upon");  // later tokens keep their space
}

TEST(SpmTest, ConcurrentEncodeDecodeAgree) {
  Tokenizer tok = load_tok512();
  std::string text = read_file(std::string(KOI_SHARED_DIR) + "/data/tinyshakespeare.txt").value().substr(0, 20000);
  std::vector<int32_t> want = tok.encode(text, true, false);
  std::vector<std::thread> threads;
  std::atomic<int> same{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      std::vector<int32_t> ids = tok.encode(text, true, false);
      if (ids == want && tok.decode(ids, true) == text) ++same;
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(same.load(), 4);
}

TEST(SpmTest, TruncatedFileIsCorrupt) {
  std::string bytes = read_file(kTok512).value();
  auto dir = make_temp_dir("koi-tok").value();
  std::string path = path_join(dir, "tok.bin");
  ASSERT_TRUE(write_file_atomic(path, bytes.substr(0, 1000)).ok());
  auto spec = load_llama2c_tokenizer(path, 512);
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(spec.status().message().find(path + ": token 71 of 512 is cut off"), std::string::npos)
      << spec.status().message();
  ASSERT_TRUE(write_file_atomic(path, bytes.substr(0, 2)).ok());
  EXPECT_EQ(load_llama2c_tokenizer(path).status().message(),
            path + ": no valid max_token_length header; the file is truncated or not a llama2.c "
                   "tokenizer, export it again");
  remove_all(dir);
}

}  // namespace
}  // namespace koi::tokenizer
