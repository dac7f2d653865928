// PreTokenizer: cuts normalized text into the pieces a tokenizer model merges on its own,
// as the Hugging Face pre-tokenizers do (spec.h PreTokenizerStep: Split with a string or a
// regex, every SplitBehavior and invert; ByteLevel; Digits; Punctuation; Whitespace;
// WhitespaceSplit; Metaspace). Each step works on every piece the step before it made.
// ByteLevel maps each piece's bytes to GPT-2's byte alphabet and Metaspace replaces spaces,
// so pre_tokenize() returns strings. The byte-level BPE tokenizers Koi knows by name (GPT-2,
// Llama 3, Qwen2) are regex Splits (behavior Isolated) followed by a ByteLevel mapping;
// split() runs only the cutting steps, for the BPE trainer.
//
// Immutable after create() and cheap to copy (it shares the compiled regexes); split() and
// pre_tokenize() are safe to call from many threads at once. create() fails with a Status
// quoting a regex that does not compile; splitting never fails.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "tokenizer/spec.h"

namespace koi::tokenizer {

class PreTokenizer {
 public:
  // Each regex a Split with behavior Isolated; no regexes: the text stays whole.
  static Result<PreTokenizer> create(const std::vector<std::string>& regexes);
  static Result<PreTokenizer> create(const std::vector<PreTokenizerStep>& steps);

  // Appends the pieces the cutting steps make of `text` (views into it, in order; they cover
  // it exactly unless a step removes what it matches). ByteLevel and Metaspace steps only
  // cut here (ByteLevel by its regex when use_regex), they do not map.
  void split(std::string_view text, std::vector<std::string_view>* out) const;
  // Appends the pieces of `text` as the model sees them. first: `text` starts the input
  // (Metaspace prepend_scheme kFirst prepends only there).
  void pre_tokenize(std::string_view text, bool first, std::vector<std::string>* out) const;

 private:
  struct Impl;
  explicit PreTokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

// Cuts `text` into pieces by the [start, end) matches of a pattern, as Hugging Face's Split
// does with `behavior` and `invert`. Exposed for tests.
void split_by_matches(std::string_view text, const std::vector<std::pair<size_t, size_t>>& matches,
                      SplitBehavior behavior, bool invert, std::vector<std::string_view>* out);

// The first position at or after `from` (from >= 1) where text can be cut so that every
// pre-tokenizer Koi knows splits the two parts exactly as it splits the whole: just after a
// '\n' that printable ASCII other than a space follows. No match of those regexes holds a
// newline followed by a non-space character (the alternatives that can hold a newline
// continue only with whitespace, Unicode spaces included, hence ASCII only), and their one
// lookahead, (?!\S), is tried only after the newline alternative failed. text.size() when
// there is no such position. Used to encode or count long texts in independent chunks.
// This holds for the byte-level regex pre-tokenizers and metaspace text; other Hugging Face
// components (a Punctuation or Strip step, a Split on another pattern) may treat the text
// around such a cut differently from the whole.
size_t next_safe_cut(std::string_view text, size_t from);

}  // namespace koi::tokenizer
