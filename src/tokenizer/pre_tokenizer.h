// PreTokenizer: the regex pre-tokenizer of byte-level BPE tokenizers (GPT-2, Llama 3,
// Qwen2). Each regex splits every piece of the one before it into its matches and the text
// between them (Hugging Face Split with behavior "Isolated"); the pieces are then merged
// independently. Shared by the Tokenizer's encoder and the BPE trainer.
//
// Immutable after create() and cheap to copy (it shares the compiled regexes); split() is
// safe to call from many threads at once. create() fails with a Status quoting a regex that
// does not compile; split() never fails (a match error ends the splitting of that piece).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace koi::tokenizer {

class PreTokenizer {
 public:
  // No regexes: split() returns the text whole.
  static Result<PreTokenizer> create(const std::vector<std::string>& regexes);

  // Appends the pieces of `text` (views into it, in order, covering it exactly) to out.
  void split(std::string_view text, std::vector<std::string_view>* out) const;

 private:
  struct Impl;
  explicit PreTokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

// The first position at or after `from` (from >= 1) where text can be cut so that every
// pre-tokenizer Koi knows splits the two parts exactly as it splits the whole: just after a
// '\n' that printable ASCII other than a space follows. No match of those regexes holds a
// newline followed by a non-space character (the alternatives that can hold a newline
// continue only with whitespace, Unicode spaces included, hence ASCII only), and their one
// lookahead, (?!\S), is tried only after the newline alternative failed. text.size() when
// there is no such position. Used to encode or count long texts in independent chunks.
size_t next_safe_cut(std::string_view text, size_t from);

}  // namespace koi::tokenizer
