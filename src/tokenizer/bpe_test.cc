// Rank-ordered BPE on a hand-made byte-level vocabulary, special tokens, errors, and the
// GGUF round trip.
#include <gtest/gtest.h>

#include "base/file.h"
#include "model/gguf.h"
#include "tokenizer/load.h"
#include "tokenizer/tokenizer.h"

namespace koi::tokenizer {
namespace {

// Byte-level tokens for "a", "b", "c", " " ("Ġ"), "\n" ("Ċ"), then merges in rank order.
TokenizerSpec toy_spec() {
  TokenizerSpec spec;
  spec.kind = TokenizerKind::kBpeMerges;
  spec.byte_level = true;
  spec.pre = "gpt2";
  spec.tokens = {"a", "b", "c", "Ġ", "Ċ", "ab", "bc", "abc", "Ġa", "Ġab", "<|eot|>", "<x>"};
  spec.types.assign(spec.tokens.size(), TokenType::kNormal);
  spec.types[10] = TokenType::kControl;
  spec.types[11] = TokenType::kUserDefined;
  spec.merges = {"b c", "a b", "Ġ a", "Ġa b", "a bc"};
  spec.eos_id = 10;
  spec.eog_ids = {10};
  return spec;
}

TEST(BpeTest, MergesByRankLeftmostFirst) {
  Tokenizer tok = Tokenizer::create(toy_spec()).value();
  // "abc": "b c" (rank 0) beats "a b" (rank 1), then "a bc" makes "abc".
  EXPECT_EQ(tok.encode("abc", false, false), (std::vector<int32_t>{7}));
  // "abab": both "a b" pairs have rank 1; left first, then the right one.
  EXPECT_EQ(tok.encode("abab", false, false), (std::vector<int32_t>{5, 5}));
  // GPT-2 regex: "ab", " ab", " c". In " ab", "a b" (rank 1) beats "Ġ a" (rank 2), and
  // no merge joins "Ġ" to "ab"; a lone " a" does merge.
  EXPECT_EQ(tok.encode("ab ab c", false, false), (std::vector<int32_t>{5, 3, 5, 3, 2}));
  EXPECT_EQ(tok.encode("b a", false, false), (std::vector<int32_t>{1, 8}));
  EXPECT_EQ(tok.encode("a\n\nb", false, false), (std::vector<int32_t>{0, 4, 4, 1}));
  EXPECT_EQ(tok.decode(tok.encode("ab ab c", false, false)), "ab ab c");
}

TEST(BpeTest, SpecialTokensInsideText) {
  Tokenizer tok = Tokenizer::create(toy_spec()).value();
  EXPECT_EQ(tok.encode("ab<|eot|>c", false, true), (std::vector<int32_t>{5, 10, 2}));
  // Not parsed: the text is tokenized ('<', '|' have no token and no <unk>: dropped).
  std::vector<int32_t> plain = tok.encode("ab<|eot|>c", false, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 10), 0);
  // User-defined tokens are always matched.
  EXPECT_EQ(tok.encode("a<x>b", false, false), (std::vector<int32_t>{0, 11, 1}));
  EXPECT_TRUE(tok.is_eog(10));
  EXPECT_EQ(tok.decode(std::vector<int32_t>{5, 10, 2}), "ab<|eot|>c");
  EXPECT_EQ(tok.decode(std::vector<int32_t>{5, 10, 2}, true), "abc");
}

TEST(BpeTest, LstripAndRstripSwallowWhitespace) {
  TokenizerSpec spec = toy_spec();
  spec.lstrip_ids = {11};
  spec.rstrip_ids = {11};
  Tokenizer tok = Tokenizer::create(spec).value();
  EXPECT_EQ(tok.encode("a  <x>  b", false, false), (std::vector<int32_t>{0, 11, 1}));
}

TEST(BpeTest, IgnoreMergesTakesWholeWords) {
  TokenizerSpec spec = toy_spec();
  spec.tokens.push_back("ca");  // reachable by no merge
  spec.types.push_back(TokenType::kNormal);
  EXPECT_EQ(Tokenizer::create(spec).value().encode("ca", false, false), (std::vector<int32_t>{2, 0}));
  spec.ignore_merges = true;
  EXPECT_EQ(Tokenizer::create(spec).value().encode("ca", false, false), (std::vector<int32_t>{12}));
}

TEST(BpeTest, LongWordIsFast) {
  Tokenizer tok = Tokenizer::create(toy_spec()).value();
  std::string word(200000, 'a');
  for (size_t i = 1; i < word.size(); i += 2) word[i] = 'b';
  std::vector<int32_t> ids = tok.encode(word, false, false);  // O(n log n); O(n^2) would take minutes
  EXPECT_EQ(ids, std::vector<int32_t>(100000, 5));
}

TEST(BpeTest, InvalidSpecsAreRejected) {
  TokenizerSpec spec = toy_spec();
  spec.merges.push_back("a z");
  EXPECT_EQ(Tokenizer::create(spec).status().message(),
            "merge 5 'a z' names a token that is not in the vocabulary");
  spec = toy_spec();
  spec.pre = "falcon";
  EXPECT_EQ(Tokenizer::create(spec).status().message(),
            "pre-tokenizer 'falcon' is not known to Koi (known: llama-bpe, qwen2, gpt2, default)");
  spec = toy_spec();
  spec.bos_id = 99;
  EXPECT_EQ(Tokenizer::create(spec).status().message(), "bos_id 99 is outside the vocabulary of 12 tokens");
  spec = toy_spec();
  spec.pre_regexes = {"(unclosed"};
  EXPECT_NE(Tokenizer::create(spec).status().message().find("pre-tokenizer regex '(unclosed' does not compile"),
            std::string::npos);
}

TEST(BpeTest, HfErrorsNameTheFile) {
  std::string dir = make_temp_dir("koi-hf").value();
  std::string path = path_join(dir, "tokenizer.json");
  EXPECT_EQ(load_hf_tokenizer(dir).status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(write_file_atomic(path, "{\"model\": ").ok());
  auto bad = load_hf_tokenizer(dir);
  EXPECT_EQ(bad.status().message().rfind(path + ": invalid JSON (", 0), 0u) << bad.status().message();
  ASSERT_TRUE(write_file_atomic(path, R"({"model": {"type": "WordPiece", "vocab": {}}})").ok());
  EXPECT_EQ(load_hf_tokenizer(dir).status().message(),
            path + ": model type 'WordPiece' is not supported (supported: BPE, Unigram)");
  ASSERT_TRUE(write_file_atomic(path, R"({"model": {"type": "BPE", "vocab": {"a": "x"}, "merges": []}})").ok());
  EXPECT_EQ(load_hf_tokenizer(dir).status().message(), path + ": vocab entry 'a' has no valid id");
  remove_all(dir);
}

TEST(BpeTest, HfByteLevelFolder) {
  std::string dir = make_temp_dir("koi-hf").value();
  ASSERT_TRUE(write_file_atomic(path_join(dir, "tokenizer.json"), R"({
    "added_tokens": [{"id": 5, "content": "<|im_end|>", "special": true}],
    "normalizer": {"type": "NFC"},
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
    "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "Ġ": 2, "ab": 3, "Ġab": 4},
              "merges": [["a", "b"], "Ġ ab"]}})").ok());
  ASSERT_TRUE(write_file_atomic(path_join(dir, "tokenizer_config.json"),
                                R"({"eos_token": {"content": "<|im_end|>"}, "chat_template": "{{ x }}"})").ok());
  auto tok = load_tokenizer(dir);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  EXPECT_EQ(tok->spec().pre, "gpt2");
  EXPECT_EQ(tok->eos_id(), 5);
  EXPECT_EQ(tok->spec().chat_template, "{{ x }}");
  EXPECT_EQ(tok->encode("ab ab<|im_end|>", true, true), (std::vector<int32_t>{3, 4, 5}));
  remove_all(dir);
}

TEST(BpeTest, GgufRoundTrip) {
  for (bool byte_level : {true, false}) {
    TokenizerSpec spec;
    if (byte_level) {
      spec = toy_spec();
    } else {
      spec = load_llama2c_tokenizer(std::string(KOI_SHARED_DIR) + "/models/stories260K/tok512.bin").value();
    }
    spec.chat_template = "{{ messages }}";
    model::GgufWriter writer;
    spec_to_gguf(spec, writer);
    std::string dir = make_temp_dir("koi-gguf").value();
    std::string path = path_join(dir, "tok.gguf");
    ASSERT_TRUE(writer.write(path).ok());
    if (byte_level) {  // the GPT-2 regex under llama.cpp's name for it
      auto file = model::GgufFile::open(path);
      ASSERT_TRUE(file.ok());
      EXPECT_EQ(*file->get_string("tokenizer.ggml.pre"), "gpt-2");
    }
    auto back = load_tokenizer(path);
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    const TokenizerSpec& got = back->spec();
    EXPECT_EQ(got.kind, spec.kind);
    EXPECT_EQ(got.tokens, spec.tokens);
    EXPECT_EQ(got.scores, spec.scores);
    EXPECT_EQ(got.types, spec.types);
    EXPECT_EQ(got.merges, spec.merges);
    EXPECT_EQ(got.bos_id, spec.bos_id);
    EXPECT_EQ(got.eos_id, spec.eos_id);
    EXPECT_EQ(got.add_bos, spec.add_bos);
    EXPECT_EQ(got.chat_template, spec.chat_template);
    Tokenizer original = Tokenizer::create(spec).value();
    EXPECT_EQ(back->encode("ab abc\n<s>", true, true), original.encode("ab abc\n<s>", true, true));
    remove_all(dir);
  }
}

TEST(BpeTest, GgufUnknownModelIsUnsupported) {
  model::GgufWriter writer;
  writer.set_string("tokenizer.ggml.model", "bert");
  std::string dir = make_temp_dir("koi-gguf").value();
  std::string path = path_join(dir, "t.gguf");
  ASSERT_TRUE(writer.write(path).ok());
  EXPECT_EQ(load_tokenizer(path).status().message(),
            path + ": tokenizer.ggml.model is 'bert'; Koi reads the 'llama' (SentencePiece) and 'gpt2' "
                   "(byte-level BPE) tokenizers");
  remove_all(dir);
}

}  // namespace
}  // namespace koi::tokenizer
