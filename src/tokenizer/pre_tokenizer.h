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

}  // namespace koi::tokenizer
