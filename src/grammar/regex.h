// Regular expressions to grammar rules: the patterns of JSON schema strings and vLLM's
// guided_regex. The supported syntax (docs/structured_output.md): literals, escapes (\d \w
// \s and their negations, \n \t \r \f \v \0 \xHH \uHHHH \u{H..}, escaped punctuation), '.',
// classes [a-z] [^...] with ranges, groups (...) and (?:...), alternation |, quantifiers
// * + ? {n} {n,} {n,m} (lazy forms are the same language), and ^ / $ at the very start and
// end. Anything else (backreferences, lookaround, word boundaries, flags) is an error that
// names it. Pure functions.
#pragma once

#include <string_view>

#include "base/status.h"
#include "grammar/grammar.h"

namespace koi::grammar {

struct RegexOptions {
  // Match the decoded value of a JSON string: the element matches its escaped text.
  bool json_string = false;
  // JSON schema semantics: the pattern may match anywhere unless anchored by ^ and $
  // (ECMA-262 search). Otherwise the whole text must match.
  bool search = false;
};

// Adds the rules for `pattern` to `b`; returns the element that matches it.
Result<Element> compile_regex(GrammarBuilder& b, std::string_view pattern, const RegexOptions& options);

// A grammar whose documents are exactly the matches of `pattern`.
Result<Grammar> regex_grammar(std::string_view pattern);

// Decodes one UTF-8 code point at s[*i], advancing *i; invalid bytes decode as U+FFFD.
uint32_t decode_utf8(std::string_view s, size_t* i);

}  // namespace koi::grammar
