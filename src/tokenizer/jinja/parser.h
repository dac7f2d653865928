// Parser: tokens -> syntax tree, following Jinja2's grammar and operator precedence
// (or < and < not < comparisons < + - < ~ < * / // % < ** < unary < filters and tests <
// postfix). Nesting is limited (kMaxNesting), so hostile input cannot exhaust the stack.
// A pure function, thread-safe. Errors are Status values "L:C: expected ...".
#pragma once

#include <string_view>

#include "base/status.h"
#include "tokenizer/jinja/ast.h"

namespace koi::tokenizer::jinja {

inline constexpr int kMaxNesting = 128;

// `source` is the normalized source the tokens came from (for line:column in errors).
Result<Body> parse(std::string_view source);

}  // namespace koi::tokenizer::jinja
