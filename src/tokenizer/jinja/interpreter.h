// Interpreter: renders a parsed template (the Body of parse()) with Jinja2's semantics:
// scoping (for loops and macros open a scope, if does not; namespace() objects carry
// values out of loops), loop variables, macros and call blocks, break/continue, and the
// globals range(), namespace(), dict() and raise_exception().
//
// Every render is bounded by RenderLimits: a template that loops forever, recurses through
// macros or builds huge strings fails with a Status instead of hanging or exhausting memory.
// render() keeps all of its state on its own stack: concurrent renders of one Body are safe.
// Errors: raise_exception("msg") fails with invalid_argument "msg" exactly; other runtime
// errors are invalid_argument "L:C: <what went wrong>" (line:column of the expression).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/value.h"

namespace koi::tokenizer::jinja {

struct RenderLimits {
  int64_t max_steps = 1'000'000;         // expressions evaluated + loop iterations
  int64_t max_bytes_built = 256 << 20;   // bytes of strings and list items built, in total
  size_t max_output_bytes = 16 << 20;    // length of any one string, the output included
  int max_call_depth = 64;               // nested macro calls
};

// `source` is the normalized text `program` was parsed from (for line:column in errors);
// `globals` are the outermost variables (they may shadow the builtin functions).
Result<std::string> render(const Body& program, std::string_view source,
                           const std::vector<std::pair<std::string, Value>>& globals,
                           const RenderLimits& limits = {});

}  // namespace koi::tokenizer::jinja
