// TokenizerSpec: the neutral description of a Llama-family tokenizer. Every source
// (llama2.c tokenizer.bin, Hugging Face tokenizer.json, GGUF metadata) is turned into one,
// and a Tokenizer is built from one. A plain value: no invariants are checked here;
// Tokenizer::create validates it.
//
// Conventions: for kSentencePiece and for metaspace kBpeMerges, token texts use "▁"
// (U+2581) for a space, as SentencePiece and GGUF do; for byte-level kBpeMerges they use
// the GPT-2 byte-to-unicode alphabet ("Ġ" is a space). Added tokens (special or not)
// are the tokens whose type is kControl, kUnknown or kUserDefined: they are matched in
// raw text before any normalization, longest first.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace koi::tokenizer {

enum class TokenizerKind {
  kSentencePiece,  // merge the best-scoring adjacent pair repeatedly, byte fallback (GGUF "llama")
  kBpeMerges,      // merge by rank from a merges list (GGUF "gpt2", HF model type "BPE")
  kUnigram,        // SentencePiece unigram: the best-scoring segmentation (HF model type "Unigram")
};

// The GGUF tokenizer.ggml.token_type values.
enum class TokenType : int32_t {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,        // special tokens: matched in text only when asked to parse specials
  kUserDefined = 4,    // added tokens that are always matched in text
  kUnused = 5,
  kByte = 6,           // "<0xXX>": one raw byte, for byte fallback
};

// The Hugging Face tokenizers pipeline components Koi runs (tokenizer.json "normalizer",
// "pre_tokenizer", "decoder"; a Sequence is flattened into its steps). Patterns are a literal
// string or, with `regex`, a PCRE2 regex (Hugging Face's Oniguruma syntax for the patterns
// real tokenizers use).
struct NormalizerStep {
  enum class Kind { kNfc, kNfd, kNfkc, kNfkd, kLowercase, kStrip, kReplace, kPrepend };
  Kind kind = Kind::kNfc;
  std::string pattern;       // kReplace
  bool regex = false;        // kReplace: pattern is a regex
  std::string content;       // kReplace: the replacement; kPrepend: the prefix
  bool left = false, right = false;  // kStrip: strip whitespace on that side
  bool operator==(const NormalizerStep&) const = default;
};

// How a Split keeps the pieces its pattern matches (HF SplitDelimiterBehavior).
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };
// When Metaspace puts the replacement before a piece of text.
enum class PrependScheme { kAlways, kFirst, kNever };

struct PreTokenizerStep {
  enum class Kind { kSplit, kByteLevel, kDigits, kPunctuation, kWhitespace, kWhitespaceSplit, kMetaspace };
  Kind kind = Kind::kSplit;
  std::string pattern;                                 // kSplit
  bool regex = false;                                  // kSplit
  SplitBehavior behavior = SplitBehavior::kIsolated;   // kSplit, kPunctuation
  bool invert = false;                                 // kSplit: the matches are the text kept
  bool add_prefix_space = false;                       // kByteLevel
  bool use_regex = true;                               // kByteLevel: split by the GPT-2 regex first
  bool individual_digits = false;                      // kDigits
  std::string replacement = "\xE2\x96\x81";             // kMetaspace ("▁")
  PrependScheme prepend_scheme = PrependScheme::kAlways;  // kMetaspace
  bool split = true;                                   // kMetaspace: cut before each replacement
  bool operator==(const PreTokenizerStep&) const = default;
};

struct DecoderStep {
  enum class Kind { kByteLevel, kMetaspace, kReplace, kStrip, kFuse, kByteFallback };
  Kind kind = Kind::kFuse;
  std::string pattern;   // kReplace
  bool regex = false;    // kReplace
  std::string content;   // kReplace: the replacement; kStrip: the character stripped
  std::string replacement = "\xE2\x96\x81";             // kMetaspace
  PrependScheme prepend_scheme = PrependScheme::kAlways;  // kMetaspace
  int32_t start = 0, stop = 0;  // kStrip: how many `content` characters to strip at each end
  bool operator==(const DecoderStep&) const = default;
};

// One item of a TemplateProcessing template (HF tokenizers): special tokens, or one of the
// two sequences ("$A", "$B"), each with the type id its tokens get.
struct TemplateItem {
  std::vector<int32_t> tokens;  // a special token's ids (usually one); empty: the sequence
  char sequence = 'A';          // 'A' or 'B' where tokens is empty
  uint32_t type_id = 0;
  bool operator==(const TemplateItem&) const = default;
};

struct TokenizerSpec {
  TokenizerKind kind = TokenizerKind::kSentencePiece;
  std::vector<std::string> tokens;   // id -> text
  std::vector<float> scores;         // kSentencePiece: merge priority (higher first); kUnigram: each
                                     // token's log-probability; may be empty for kBpeMerges
  std::vector<TokenType> types;      // id -> type
  std::vector<std::string> merges;   // kBpeMerges: "left right", highest priority first

  // kBpeMerges only. byte_level: GPT-2 byte mapping; otherwise metaspace ("▁") text with
  // byte fallback, like the Hugging Face Llama 2 tokenizer.json.
  bool byte_level = true;
  // Use a whole pre-token that is in the vocabulary as is (HF "ignore_merges", Llama 3).
  bool ignore_merges = false;
  // The pre-tokenizer, by GGUF tokenizer.ggml.pre name: "llama-bpe", "qwen2", "gpt2",
  // "default" (kBpeMerges, byte-level), or "" (none). pre_regexes, when not empty, are used
  // instead of the table (read from a tokenizer.json); each splits every piece of the one
  // before, keeping matches and the text between them.
  std::string pre;
  std::vector<std::string> pre_regexes;

  // SentencePiece and metaspace: prepend "▁" to every piece of raw text (at the start and
  // after each added token) and replace " " by "▁"; decoding drops the matching space.
  bool add_space_prefix = true;

  // A Hugging Face pipeline (tokenizer.json): with `pipeline` set, kBpeMerges and kUnigram
  // text goes through these steps instead of the byte_level / add_space_prefix / pre rules
  // above (which then only say how the tokenizer is written to GGUF). Special tokens are
  // split out of the raw text first; each piece between them is normalized, pre-tokenized
  // and merged on its own.
  bool pipeline = false;
  std::vector<NormalizerStep> normalizers;
  std::vector<PreTokenizerStep> pre_tokenizers;
  std::vector<DecoderStep> decoders;

  std::optional<int32_t> bos_id, eos_id, unk_id, pad_id;
  bool add_bos = false;
  bool add_eos = false;
  // The tokens add_special puts before and after the text (HF TemplateProcessing), when that
  // is more than add_bos / add_eos say; when not empty they replace add_bos / add_eos.
  std::vector<int32_t> special_prefix, special_suffix;
  // The TemplateProcessing "pair" template (Tokenizer::encode_pair with add_special); empty:
  // the single template's tokens around each sequence, A's with type id 0 and B's with 1.
  std::vector<TemplateItem> pair_template;
  // End-of-generation tokens besides eos (e.g. <|eot_id|>, <|im_end|>).
  std::vector<int32_t> eog_ids;
  // Added tokens that swallow the whitespace before (lstrip) or after (rstrip) them.
  std::set<int32_t> lstrip_ids, rstrip_ids;

  std::optional<std::string> chat_template;
};

// The pre-tokenizer regexes for a GGUF tokenizer.ggml.pre name, or nullopt when Koi does
// not know the name.
std::optional<std::vector<std::string>> pre_tokenizer_regexes(std::string_view pre);
// The table name whose regexes are exactly `regexes`, or nullopt.
std::optional<std::string> pre_tokenizer_name(const std::vector<std::string>& regexes);

// The spec that encodes a chunk continuing a text (cut at next_safe_cut) as one encode() of
// the whole text does: without the space prefix (add_space_prefix, a Prepend("▁")
// normalizer, Metaspace prepending, ByteLevel add_prefix_space).
TokenizerSpec continuation_spec(TokenizerSpec spec);

// The single-sequence template: the tokens add_special puts before and after the text
// (special_prefix/suffix, else bos/eos by add_bos/add_eos) around `sequence`, all of type_id.
std::vector<TemplateItem> single_template(const TokenizerSpec& spec, char sequence = 'A', uint32_t type_id = 0);
// spec.pair_template, or where it is empty the single template around A (type 0) followed by
// the single template around B (type 1), as transformers' Llama tokenizers build it.
std::vector<TemplateItem> pair_template(const TokenizerSpec& spec);

// A text that differs between specs whose pipelines (pipeline, normalizers, pre_tokenizers,
// decoders, special_prefix/suffix) differ; part of a tokenizer's identity.
std::string pipeline_identity(const TokenizerSpec& spec);

}  // namespace koi::tokenizer
