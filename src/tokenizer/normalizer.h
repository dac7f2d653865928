// Normalizer: the Hugging Face normalizer steps of a tokenizer.json (NFC, NFD, NFKC, NFKD,
// Lowercase, Strip, Replace, Prepend; a Sequence is its steps in order), run on each piece
// of raw text between added tokens before pre-tokenization. Unicode forms and case come
// from ICU. Bytes that are not valid UTF-8 pass through unchanged (the Unicode steps work
// on the valid runs between them).
//
// Immutable after create() and cheap to copy; normalize() is safe to call from many threads
// at once. create() fails with a Status naming a Replace regex that does not compile.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "tokenizer/spec.h"

namespace koi::tokenizer {

class Normalizer {
 public:
  // No steps: normalize() returns the text unchanged.
  static Result<Normalizer> create(const std::vector<NormalizerStep>& steps);

  std::string normalize(std::string_view text) const;

 private:
  struct Impl;
  explicit Normalizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

// Unicode normalization of valid UTF-8 runs (invalid bytes copied through). Used by the
// normalizer; exposed for tests.
std::string unicode_normalize(std::string_view text, NormalizerStep::Kind form);
// Per character full lowercase mapping (Rust char::to_lowercase, as Hugging Face applies it).
std::string unicode_lowercase(std::string_view text);
// Unicode White_Space.
bool is_unicode_space(uint32_t cp);

}  // namespace koi::tokenizer
