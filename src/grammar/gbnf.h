// GBNF: the text format for context-free grammars (llama.cpp's, which vLLM's guided_grammar
// also accepts for llama.cpp-style grammars). docs/structured_output.md describes it:
//   root   ::= greeting " " name "!"
//   greeting ::= "hello" | "hi"        # comments run to the end of the line
//   name   ::= [A-Z] [a-z]{1,15}
// Rules are `name ::= alternatives`; elements are "literals" (escapes \n \t \r \\ \" \xHH
// \uHHHH), character classes [a-z] [^...], '.', rule names, groups ( ... ); postfix
// * + ? {m} {m,} {m,n}. The document is rule 'root'. Whitespace and newlines between
// elements do not matter; a rule ends where the next `name ::=` begins. Errors name the
// line and column. Pure function.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "grammar/grammar.h"

namespace koi::grammar {

Result<Grammar> parse_gbnf(std::string_view text);

// A grammar whose documents are exactly the given strings.
Result<Grammar> choice_grammar(const std::vector<std::string>& choices);

}  // namespace koi::grammar
