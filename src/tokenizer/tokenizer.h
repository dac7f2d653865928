// Tokenizer: text <-> token ids, built from a TokenizerSpec.
//
// Three models: SentencePiece-style BPE by scores with byte fallback (llama2.c, GGUF
// "llama"; reproduces llama2.c's encode() exactly), BPE by merge rank (GGUF "gpt2", HF model
// type "BPE"), and SentencePiece unigram (HF "Unigram": the best-scoring segmentation). Text
// reaches the merge-rank and unigram models through a Hugging Face pipeline: normalizer,
// pre-tokenizer and, on the way back, decoder (normalizer.h, pre_tokenizer.h, decoder.h);
// specs without one (GGUF, llama2.c) get the pipeline their fields describe: byte-level BPE
// behind a regex pre-tokenizer (GPT-2, Llama 3, Qwen2/3), or metaspace text with byte
// fallback (HF Llama 2 tokenizer.json). Added tokens are cut out of the raw text first,
// longest match first: user-defined ones always, special ones (control, unknown) only when
// encode() is asked to parse specials.
//
// A Tokenizer is immutable after create() and cheap to copy (it shares its tables); encode
// and decode are safe to call from many threads at once. create() fails with a Status
// naming the problem when the spec is inconsistent; encode and decode never fail: bytes
// without a token fall back to byte tokens (or <unk>), ids out of range decode to nothing.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "tokenizer/spec.h"

namespace koi::tokenizer {

// A Hugging Face pipeline: the steps text goes through (spec.h).
struct Pipeline {
  std::vector<NormalizerStep> normalizers;
  std::vector<PreTokenizerStep> pre_tokenizers;
  std::vector<DecoderStep> decoders;
};
// The pipeline a spec without one implies (GGUF, llama2.c, Koi's trainer): byte-level BPE is
// its regex Splits and the ByteLevel mapping; metaspace text is Prepend("▁") (with
// space_prefix) and Replace(" ", "▁"), decoded by Replace("▁", " "), ByteFallback, Fuse and
// the Strip of that prefix. Appends to `out`; fails for an unknown pre-tokenizer name.
Status derive_pipeline(const TokenizerSpec& spec, bool space_prefix, Pipeline* out);

// The ids of two texts encoded as one input (sentence pairs: a query and a passage for a
// cross-encoder, a question and its context), and the type id of each.
struct PairEncoding {
  std::vector<int32_t> ids;
  std::vector<uint32_t> type_ids;
};

class Tokenizer {
 public:
  static Result<Tokenizer> create(TokenizerSpec spec);

  // add_special: add the special tokens the spec puts around a text (BOS/EOS, or a
  // TemplateProcessing's). parse_special: turn the text of special
  // tokens ("<|begin_of_text|>", "<s>") into their ids instead of tokenizing it as text.
  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special) const;
  // Two texts as Hugging Face's encode(a, b) gives them: each encoded on its own, then with
  // add_special placed by the pair template (spec.h pair_template: "$A", "$B" and special
  // tokens, each with its type id); without, a's ids (type 0) then b's (type 1).
  PairEncoding encode_pair(std::string_view a, std::string_view b, bool add_special, bool parse_special) const;
  // The bytes the tokens stand for (possibly invalid UTF-8 when the ids cut a character).
  // skip_special drops control tokens (BOS, EOS, <|eot_id|>, ...).
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;
  // Appends the bytes of token `id` as decode() renders it after token `prev` (-1: at the
  // start). This is the one place where the SentencePiece leading-space rule lives.
  void append_piece(int32_t id, int32_t prev, bool skip_special, std::string* out) const;

  // The stored text of a token ("▁the", "Ġthe", "<0x0A>"); empty for an id out of range.
  const std::string& token_text(int32_t id) const;
  TokenType token_type(int32_t id) const;
  int32_t n_vocab() const;
  std::optional<int32_t> bos_id() const;
  std::optional<int32_t> eos_id() const;
  // End of generation: eos and the end-of-turn tokens of chat models.
  bool is_eog(int32_t id) const;
  const TokenizerSpec& spec() const;

 private:
  struct Impl;
  explicit Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

// Incremental detokenizer for streaming: push() returns the text that the tokens so far
// complete, never a partial UTF-8 character (its bytes wait for the rest); bytes that can
// never form a character come out as U+FFFD. flush() returns what is left, an incomplete
// character as U+FFFD. For valid UTF-8 output the concatenation of all results equals
// decode() of the same ids. Holds a pointer to the Tokenizer, which must outlive it. Not
// thread-safe (one per stream).
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer* tokenizer, bool skip_special = false)
      : tokenizer_(tokenizer), skip_special_(skip_special) {}

  std::string push(int32_t token);
  std::string flush();

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_;
  int32_t prev_ = -1;
  std::string pending_;
};

}  // namespace koi::tokenizer
