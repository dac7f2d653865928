// Regex: a compiled PCRE2 pattern (UTF-8, Unicode properties) for the tokenizer pipeline's
// Split pre-tokenizers and Replace normalizers and decoders, or a literal string matched the
// same way. Immutable and cheap to copy (it shares the compiled code); find_all and
// replace_all are safe to call from many threads at once. create() fails with a Status
// quoting a pattern that does not compile; matching never fails (a match error ends the
// search at that point).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace koi::tokenizer {

class Regex {
 public:
  // literal: match `pattern` as a plain string.
  static Result<Regex> create(std::string_view pattern, bool literal = false);

  // Appends [start, end) byte offsets of the non-empty, non-overlapping matches in text, in
  // order (leftmost first; an empty match is stepped over by one character).
  void find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>* out) const;
  // text with every match replaced by `content` (taken literally).
  std::string replace_all(std::string_view text, std::string_view content) const;

 private:
  struct Impl;
  explicit Regex(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

}  // namespace koi::tokenizer
