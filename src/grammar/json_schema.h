// JSON schema to grammar: the documents the grammar allows are compact JSON texts (one
// optional space after ':' and ',', one optional leading space) that validate against the
// schema. The supported subset is in docs/structured_output.md; a keyword outside it is an
// error naming the keyword and where it is ("unsupported keyword 'uniqueItems' at
// /properties/tags"). Where a schema allows more than the grammar generates (properties
// not listed, number exponents), the grammar generates the narrower set: every document is
// valid, not every valid document is generated. Pure functions.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <boost/json.hpp>

#include "base/status.h"
#include "grammar/grammar.h"

namespace koi::grammar {

Result<Grammar> json_schema_grammar(const boost::json::value& schema);
// Any JSON object (response_format {"type": "json_object"}).
Result<Grammar> json_object_grammar();

// A forced tool call: prefix + {"name": "N", "<args_key>": A} + suffix for one of the tools,
// A valid under that tool's parameters schema (null: any JSON object). Errors name the tool.
struct ToolSchema {
  std::string name;
  boost::json::value parameters;
};
Result<Grammar> tool_call_grammar(const std::vector<ToolSchema>& tools, std::string_view prefix,
                                  std::string_view args_key, std::string_view suffix);

}  // namespace koi::grammar
