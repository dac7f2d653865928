// Constraint: what a request asks its output to match (a JSON schema, any JSON object, a
// regular expression, one of several strings, or a GBNF grammar), and GrammarCache, which
// compiles each distinct constraint once and hands every request using it the same
// CompiledGrammar, so its per-state token masks are shared too.
//
// GrammarCache is thread-safe: HTTP threads look constraints up while the engine thread
// runs matchers. It keeps the `capacity` most recently used grammars; a grammar evicted
// while requests use it lives on until they finish (shared_ptr). Failures are
// kInvalidArgument with a message naming what is wrong (the keyword, the offset).
#pragma once

#include <cstddef>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "grammar/grammar.h"
#include "grammar/matcher.h"
#include "grammar/vocabulary.h"

namespace koi::grammar {

enum class ConstraintKind { kJsonObject, kJsonSchema, kRegex, kChoice, kGrammar, kToolCall };

struct Constraint {
  ConstraintKind kind = ConstraintKind::kJsonObject;
  // Schema (JSON text), regex or GBNF text; kToolCall: {"prefix", "key", "suffix", "tools":
  // [{"name", "parameters"}]} as JSON text (json_schema.h, tool_call_grammar).
  std::string source;
  std::vector<std::string> choices;  // kChoice
};

Result<Grammar> compile_constraint(const Constraint& c);

class GrammarCache {
 public:
  GrammarCache(std::shared_ptr<const Vocabulary> vocab, size_t capacity = 16)
      : vocab_(std::move(vocab)), capacity_(capacity) {}

  Result<std::shared_ptr<CompiledGrammar>> get(const Constraint& c);
  const std::shared_ptr<const Vocabulary>& vocab() const { return vocab_; }
  size_t size() const;

 private:
  std::shared_ptr<const Vocabulary> vocab_;
  const size_t capacity_;
  mutable std::mutex mu_;
  std::list<std::pair<std::string, std::shared_ptr<CompiledGrammar>>> lru_;  // guarded by mu_; newest first
  std::unordered_map<std::string, decltype(lru_)::iterator> index_;         // guarded by mu_
};

}  // namespace koi::grammar
