// Lexer: Jinja template source -> tokens, with the whitespace rules Hugging Face sets
// (trim_blocks and lstrip_blocks on, keep_trailing_newline off) and the `-` / `+` markers.
// Pure functions, thread-safe. Errors are Status values naming line:column.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace koi::tokenizer::jinja {

enum class TokenKind {
  kText,        // literal template text (whitespace control already applied)
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,        // identifiers and keywords (if, for, and, true, ...)
  kString,      // a string literal, unescaped
  kInt,
  kFloat,
  kOp,          // + - * / // % ** ~ == != < > <= >= = ( ) [ ] { } , . : |
  kEof,
};

struct Token {
  TokenKind kind;
  std::string text;  // kText, kName, kString, kOp: the text; kInt/kFloat: the digits
  size_t pos;        // byte offset in the normalized source
};

// Jinja's newline handling: "\r\n" and "\r" become "\n", and one trailing newline is dropped.
std::string normalize_newlines(std::string_view source);

// "line:column" (both 1-based; the column counts characters) of byte offset `pos`.
std::string line_col(std::string_view source, size_t pos);

// Tokens of a normalized source, ending with kEof.
Result<std::vector<Token>> lex(std::string_view source);

}  // namespace koi::tokenizer::jinja
