// The syntax tree of a parsed template: expressions (Expr) and statements (Stmt). Built by
// the parser, then read-only: the interpreter walks it from many threads at once.
// Each node keeps the byte offset of its first token for error messages.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja/value.h"

namespace koi::tokenizer::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;
using KwargExprs = std::vector<std::pair<std::string, ExprPtr>>;

struct Expr {
  enum class Kind {
    kLiteral,  // value
    kName,     // name
    kList,     // [items...] and tuples
    kDict,     // {items[0]: items[1], items[2]: items[3], ...}
    kAttr,     // items[0].name
    kItem,     // items[0][items[1]]
    kSlice,    // items[0][items[1]:items[2]:items[3]]; absent parts are null
    kCall,     // items[0](items[1...], kwargs)
    kFilter,   // items[0] | name(items[1...], kwargs)
    kTest,     // items[0] is [not] name(items[1...]); negated for `is not`
    kUnary,    // name items[0]; name is "not", "-" or "+"
    kBinary,   // items[0] name items[1]; name is an arithmetic op, "~", "and" or "or"
    kCompare,  // items[0] ops[0] items[1] ops[1] items[2] ...; ops: == != < > <= >= in notin
    kCond,     // items[1] if items[0] else items[2]; items[2] is null without else
  };
  Kind kind;
  size_t pos = 0;
  Value value;
  std::string name;
  bool negated = false;
  std::vector<std::string> ops;
  std::vector<ExprPtr> items;
  KwargExprs kwargs;
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

// A macro's (or a call block's caller's) parameter; default_value may be null.
struct Param {
  std::string name;
  ExprPtr default_value;
};

struct Stmt {
  enum class Kind {
    kText,         // text
    kOutput,       // {{ expr }}
    kIf,           // branches: (condition, body)...; else_body
    kFor,          // for targets in expr [if condition]: body; else_body
    kSet,          // set targets = expr; or set targets[0].attr = expr when attr is set
    kSetBlock,     // set targets[0]: body
    kMacro,        // macro name(params): body
    kCallBlock,    // call(params) expr: body (the body is the `caller`)
    kFilterBlock,  // filter expr: body; expr is a kFilter chain whose innermost input is null
    kBreak,
    kContinue,
  };
  Kind kind;
  size_t pos = 0;
  std::string text;
  std::string name;
  std::string attr;
  std::vector<std::string> targets;
  ExprPtr expr;
  ExprPtr condition;
  std::vector<std::pair<ExprPtr, Body>> branches;
  std::vector<Param> params;
  Body body;
  Body else_body;
};

}  // namespace koi::tokenizer::jinja
