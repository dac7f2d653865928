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

struct TokenizerSpec {
  TokenizerKind kind = TokenizerKind::kSentencePiece;
  std::vector<std::string> tokens;   // id -> text
  std::vector<float> scores;         // kSentencePiece: merge priority (higher first); may be empty otherwise
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

  std::optional<int32_t> bos_id, eos_id, unk_id, pad_id;
  bool add_bos = false;
  bool add_eos = false;
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

}  // namespace koi::tokenizer
