// Reading tokenizer.json pipelines: each component that Koi does not run is refused with
// its name, TemplateProcessing becomes the tokens around the text, and a Cohere-style
// pipeline (NFC, Digits + ByteLevel) encodes as its components say.
#include <gtest/gtest.h>

#include "base/file.h"
#include "tokenizer/load.h"
#include "tokenizer/tokenizer.h"

namespace koi::tokenizer {
namespace {

// A byte-level BPE tokenizer.json with `extra` members (normalizer, pre_tokenizer, ...).
std::string byte_level_json(const std::string& extra) {
  return R"({"added_tokens": [{"id": 6, "content": "<s>", "special": true},
                              {"id": 7, "content": "</s>", "special": true},
                              {"id": 8, "content": "<eot>", "special": true}],
    "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "Ġ": 2, "ab": 3, "1": 4, "2": 5},
              "merges": [["a", "b"]]})" +
         extra + "}";
}

Result<TokenizerSpec> load_json(const std::string& json, const std::string& config = "{}") {
  std::string dir = make_temp_dir("koi-hf-pipeline").value();
  EXPECT_TRUE(write_file_atomic(path_join(dir, "tokenizer.json"), json).ok());
  EXPECT_TRUE(write_file_atomic(path_join(dir, "tokenizer_config.json"), config).ok());
  Result<TokenizerSpec> spec = load_hf_tokenizer(dir);
  remove_all(dir);
  return spec;
}

std::string error_of(const std::string& extra) {
  Result<TokenizerSpec> spec = load_json(byte_level_json(extra));
  if (spec.ok()) return "ok";
  std::string message = spec.status().message();
  return message.substr(message.find(": ") + 2);  // without the path
}

TEST(HfPipelineTest, UnsupportedComponentsAreNamed) {
  EXPECT_EQ(error_of(R"(, "normalizer": {"type": "BertNormalizer"})"),
            "normalizer 'BertNormalizer' is not supported (supported: NFC, NFD, NFKC, NFKD, Lowercase, Strip, "
            "Replace, Prepend, Sequence)");
  EXPECT_EQ(error_of(R"(, "normalizer": {"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "Precompiled"}]})"),
            "normalizer 'Precompiled' is not supported (supported: NFC, NFD, NFKC, NFKD, Lowercase, Strip, "
            "Replace, Prepend, Sequence)");
  EXPECT_EQ(error_of(R"(, "pre_tokenizer": {"type": "BertPreTokenizer"})"),
            "pre_tokenizer 'BertPreTokenizer' is not supported (supported: Split, ByteLevel, Digits, Punctuation, "
            "Whitespace, WhitespaceSplit, Metaspace, Sequence)");
  EXPECT_EQ(error_of(R"(, "decoder": {"type": "WordPiece"})"),
            "decoder 'WordPiece' is not supported (supported: ByteLevel, Metaspace, Replace, Strip, Fuse, "
            "ByteFallback, Sequence)");
  EXPECT_EQ(error_of(R"(, "post_processor": {"type": "RobertaProcessing"})"),
            "post_processor 'RobertaProcessing' is not supported (supported: TemplateProcessing, ByteLevel, Sequence)");
  EXPECT_EQ(error_of(R"(, "pre_tokenizer": {"type": "Split", "pattern": {"String": " "}, "behavior": "Sideways"})"),
            "pre_tokenizer Split behavior 'Sideways' is not one of Removed, Isolated, MergedWithPrevious, "
            "MergedWithNext, Contiguous");
  EXPECT_EQ(error_of(R"(, "pre_tokenizer": {"type": "Split", "behavior": "Isolated"})"),
            "pre_tokenizer Split has no \"pattern\" {\"String\"} or {\"Regex\"}");
  EXPECT_EQ(error_of(R"(, "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<x>"}},
                        {"Sequence": {"id": "A"}}]})"),
            "post_processor TemplateProcessing names '<x>', which is not a token");
  Result<TokenizerSpec> wordpiece = load_json(R"({"model": {"type": "WordPiece", "vocab": {}}})");
  EXPECT_NE(wordpiece.status().message().find("model type 'WordPiece' is not supported (supported: BPE, Unigram)"),
            std::string::npos);
}

TEST(HfPipelineTest, TemplateProcessingAddsItsTokens) {
  // Command R: BOS before the text, two tokens after it.
  const std::string pipeline = R"(, "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false},
    "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
      {"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "<eot>", "type_id": 0}},
      {"SpecialToken": {"id": "</s>", "type_id": 0}}], "pair": []})";
  Result<TokenizerSpec> spec = load_json(byte_level_json(pipeline), R"({"bos_token": "<s>", "eos_token": "<eot>"})");
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  EXPECT_TRUE(spec->add_bos);
  EXPECT_EQ(spec->special_suffix, (std::vector<int32_t>{8, 7}));
  Tokenizer tok = Tokenizer::create(*spec).value();
  EXPECT_EQ(tok.encode("ab", true, true), (std::vector<int32_t>{6, 3, 8, 7}));
  EXPECT_EQ(tok.encode("ab", false, true), (std::vector<int32_t>{3}));
  // A post-processor without a template adds nothing, whatever the config says.
  spec = load_json(byte_level_json(R"(, "pre_tokenizer": {"type": "ByteLevel"}, "post_processor": {"type": "ByteLevel"})"),
                   R"({"bos_token": "<s>", "add_bos_token": true})");
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  EXPECT_EQ(Tokenizer::create(*spec).value().encode("ab", true, true), (std::vector<int32_t>{3}));
  // No post-processor: the config's add_bos_token.
  spec = load_json(byte_level_json(R"(, "pre_tokenizer": {"type": "ByteLevel"})"),
                   R"({"bos_token": "<s>", "add_bos_token": true})");
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  EXPECT_EQ(Tokenizer::create(*spec).value().encode("ab", true, true), (std::vector<int32_t>{6, 3}));
}

TEST(HfPipelineTest, PairTemplatePlacesBothSequences) {
  // BERT-style: [CLS] A [SEP] B [SEP], B and its [SEP] of type 1; "<eot>" stands for two ids.
  const std::string pipeline = R"(, "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false},
    "post_processor": {"type": "TemplateProcessing",
      "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                 {"SpecialToken": {"id": "</s>", "type_id": 0}}],
      "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
               {"SpecialToken": {"id": "</s>", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}},
               {"SpecialToken": {"id": "<eot>", "type_id": 1}}],
      "special_tokens": {"<eot>": {"id": "<eot>", "ids": [8, 7], "tokens": ["<eot>", "</s>"]}}}, "decoder": null)";
  Result<TokenizerSpec> spec = load_json(byte_level_json(pipeline), R"({"bos_token": "<s>", "eos_token": "</s>"})");
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  Tokenizer tok = Tokenizer::create(*spec).value();
  PairEncoding pair = tok.encode_pair("ab", "b 1", true, true);
  EXPECT_EQ(pair.ids, (std::vector<int32_t>{6, 3, 7, 1, 2, 4, 8, 7}));
  EXPECT_EQ(pair.type_ids, (std::vector<uint32_t>{0, 0, 0, 1, 1, 1, 1, 1}));
  // Without special tokens: A then B, types 0 and 1.
  pair = tok.encode_pair("ab", "b", false, true);
  EXPECT_EQ(pair.ids, (std::vector<int32_t>{3, 1}));
  EXPECT_EQ(pair.type_ids, (std::vector<uint32_t>{0, 1}));
  // Each sequence is encoded on its own: B is not merged with the end of A.
  EXPECT_EQ(tok.encode_pair("a", "b", false, true).ids, (std::vector<int32_t>{0, 1}));
  // No pair template: the single template around each sequence, B's of type 1.
  spec = load_json(byte_level_json(R"(, "pre_tokenizer": {"type": "ByteLevel"})"),
                   R"({"bos_token": "<s>", "add_bos_token": true})");
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  pair = Tokenizer::create(*spec).value().encode_pair("ab", "a", true, true);
  EXPECT_EQ(pair.ids, (std::vector<int32_t>{6, 3, 6, 0}));
  EXPECT_EQ(pair.type_ids, (std::vector<uint32_t>{0, 0, 1, 1}));
  // A template naming a third sequence is refused.
  EXPECT_EQ(error_of(R"(, "post_processor": {"type": "TemplateProcessing",
      "single": [{"Sequence": {"id": "A"}}], "pair": [{"Sequence": {"id": "C"}}]})"),
            "post_processor TemplateProcessing \"pair\" holds sequence 'C'; a template names sequences A and B");
}

TEST(HfPipelineTest, DigitsThenByteLevel) {
  const std::string pipeline = R"(, "normalizer": {"type": "NFC"},
    "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": true},
      {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true}]},
    "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true})";
  Result<TokenizerSpec> spec = load_json(byte_level_json(pipeline));
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  EXPECT_TRUE(spec->byte_level);
  Tokenizer tok = Tokenizer::create(*spec).value();
  // "ab 12ab": Digits cuts "ab ", "1", "2", "ab"; the GPT-2 regex cuts "ab", " ".
  std::vector<int32_t> ids = tok.encode("ab 12ab", false, false);
  EXPECT_EQ(ids, (std::vector<int32_t>{3, 2, 4, 5, 3}));
  EXPECT_EQ(tok.decode(ids), "ab 12ab");
  // Streaming gives the same text, token by token.
  StreamDecoder stream(&tok);
  std::string streamed;
  for (int32_t id : ids) streamed += stream.push(id);
  EXPECT_EQ(streamed + stream.flush(), "ab 12ab");
}

TEST(HfPipelineTest, ContinuationSpecDropsTheSpacePrefix) {
  const std::string mark = "\xE2\x96\x81";  // "▁"
  TokenizerSpec spec;
  spec.kind = TokenizerKind::kBpeMerges;
  spec.pipeline = true;
  spec.tokens = {mark, "a", "b", mark + "a", mark + "b"};
  spec.types.assign(spec.tokens.size(), TokenType::kNormal);
  spec.merges = {mark + " a", mark + " b"};
  NormalizerStep prepend;
  prepend.kind = NormalizerStep::Kind::kPrepend;
  prepend.content = mark;
  NormalizerStep replace;
  replace.kind = NormalizerStep::Kind::kReplace;
  replace.pattern = " ";
  replace.content = mark;
  spec.normalizers = {prepend, replace};
  EXPECT_EQ(Tokenizer::create(spec).value().encode("a b", false, false), (std::vector<int32_t>{3, 4}));
  EXPECT_EQ(Tokenizer::create(continuation_spec(spec)).value().encode("a b", false, false),
            (std::vector<int32_t>{1, 4}));
  // A Metaspace pre-tokenizer instead: prepend_scheme first, and never for a continuation.
  PreTokenizerStep meta;
  meta.kind = PreTokenizerStep::Kind::kMetaspace;
  meta.prepend_scheme = PrependScheme::kFirst;
  spec.normalizers.clear();
  spec.pre_tokenizers = {meta};
  EXPECT_EQ(Tokenizer::create(spec).value().encode("a b", false, false), (std::vector<int32_t>{3, 4}));
  EXPECT_EQ(Tokenizer::create(continuation_spec(spec)).value().encode("a b", false, false),
            (std::vector<int32_t>{1, 4}));
}

}  // namespace
}  // namespace koi::tokenizer
