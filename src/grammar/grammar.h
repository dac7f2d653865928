// Grammar: the one form every constraint compiles to — a context-free grammar over bytes.
// JSON schemas (json_schema.h), regular expressions (regex.h), choices and the GBNF text
// format (gbnf.h) all become a Grammar; the matcher (matcher.h) runs it against tokens.
//
// A grammar is a list of rules; a rule is a list of alternatives; an alternative is a
// sequence of elements, each a set of bytes (one byte matched) or a reference to a rule.
// Characters beyond ASCII are sequences of byte sets (UTF-8), so the matcher only ever
// sees bytes. Repetition is rules too: x* is R ::= x R | "" (right recursion, which the
// matcher runs in constant stack depth). Left recursion is refused by build(): the matcher
// expands rules top-down.
//
// GrammarBuilder collects rules and finishes them into an immutable Grammar with build(),
// which checks every rule is defined and nothing is left-recursive. Plain values; a built
// Grammar is immutable and safe to share between threads.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace koi::grammar {

// 256 bits: which bytes one element accepts.
struct ByteSet {
  std::array<uint64_t, 4> bits{};
  bool test(uint8_t b) const { return (bits[b >> 6] >> (b & 63)) & 1; }
  void set(uint8_t b) { bits[b >> 6] |= uint64_t{1} << (b & 63); }
  void set_range(uint8_t lo, uint8_t hi) {
    for (int b = lo; b <= hi; ++b) set(static_cast<uint8_t>(b));
  }
  bool empty() const { return (bits[0] | bits[1] | bits[2] | bits[3]) == 0; }
  bool operator==(const ByteSet&) const = default;
  auto operator<=>(const ByteSet&) const = default;
};

enum class ElementKind : uint8_t { kBytes, kRule, kEnd };

struct Element {
  ElementKind kind = ElementKind::kEnd;
  int32_t value = 0;  // kBytes: index into Grammar::byte_sets; kRule: rule id
  bool operator==(const Element&) const = default;
};

using Sequence = std::vector<Element>;

// Inclusive ranges of Unicode code points.
struct CodepointRange {
  uint32_t lo = 0;
  uint32_t hi = 0;
};
using CodepointSet = std::vector<CodepointRange>;

struct Grammar {
  // Every alternative of every rule, each ending in a kEnd element.
  std::vector<Element> elements;
  std::vector<ByteSet> byte_sets;
  std::vector<std::vector<int32_t>> rule_alternatives;  // per rule: start positions in elements
  std::vector<std::string> rule_names;
  // Fewest bytes that complete the sequence from each position (to its kEnd).
  std::vector<int32_t> min_bytes_from;
  int32_t root = 0;

  int num_rules() const { return static_cast<int>(rule_alternatives.size()); }
  // GBNF text of the grammar (for debugging and tests).
  std::string to_string() const;
};

class GrammarBuilder {
 public:
  // A new rule with no alternatives yet; the name need not be unique (a suffix is added).
  int32_t new_rule(std::string_view name);
  // Looks a rule up by exact name, creating it (undefined) when absent.
  int32_t rule_named(std::string_view name);
  void add_alternative(int32_t rule, Sequence seq);
  bool has_alternatives(int32_t rule) const { return !rules_[rule].empty(); }

  Element bytes(const ByteSet& set);
  Element byte(uint8_t b);
  Element rule(int32_t id) const { return {ElementKind::kRule, id}; }
  // The bytes of `text`, one element each.
  Sequence literal(std::string_view text);
  // One element matching any code point of `set` (a rule when it needs more than one byte).
  // json_string: as the characters appear inside a JSON string literal, escaped where JSON
  // requires (", \ and control characters).
  Element codepoints(const CodepointSet& set, bool json_string = false);

  // A rule for one of the sequences.
  Element choice(std::string_view name, std::vector<Sequence> alternatives);
  // seq repeated min..max times (max < 0: unbounded). Fails when max is too large to unroll.
  Result<Element> repeat(std::string_view name, const Sequence& seq, int min, int max);

  // Checks every referenced rule has an alternative and no rule is left-recursive, then
  // flattens. `root` is the start rule.
  Result<Grammar> build(int32_t root) &&;

  static constexpr int kMaxRepeat = 100000;

 private:
  std::vector<std::vector<Sequence>> rules_;
  std::vector<std::string> names_;
  std::vector<ByteSet> byte_sets_;
};

// Normalizes a code point set: sorted, merged, surrogates (U+D800..DFFF) removed, clipped
// to U+10FFFF.
CodepointSet normalize(CodepointSet set);
// Every code point (minus surrogates) not in `set`.
CodepointSet complement(const CodepointSet& set);

}  // namespace koi::grammar
