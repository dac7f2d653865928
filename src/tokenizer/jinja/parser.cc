#include "tokenizer/jinja/parser.h"

#include <charconv>
#include <initializer_list>

#include "tokenizer/jinja/lexer.h"

namespace koi::tokenizer::jinja {
namespace {

ExprPtr make_expr(Expr::Kind kind, size_t pos) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->pos = pos;
  return e;
}

class Parser {
 public:
  Parser(std::string_view source, std::vector<Token> tokens) : src_(source), tokens_(std::move(tokens)) {}

  Result<Body> parse_template() {
    std::string end;
    KOI_ASSIGN_OR_RETURN(Body body, parse_body({}, "", 0, &end));
    return body;
  }

 private:
  // ---- token helpers ----
  const Token& peek(size_t ahead = 0) const { return tokens_[std::min(i_ + ahead, tokens_.size() - 1)]; }
  bool at_op(std::string_view op, size_t ahead = 0) const {
    return peek(ahead).kind == TokenKind::kOp && peek(ahead).text == op;
  }
  bool at_name(std::string_view name, size_t ahead = 0) const {
    return peek(ahead).kind == TokenKind::kName && peek(ahead).text == name;
  }
  bool skip_op(std::string_view op) {
    if (!at_op(op)) return false;
    ++i_;
    return true;
  }
  bool skip_name(std::string_view name) {
    if (!at_name(name)) return false;
    ++i_;
    return true;
  }
  static std::string describe(const Token& t) {
    switch (t.kind) {
      case TokenKind::kEof: return "the end of the template";
      case TokenKind::kBlockEnd: return "'%}'";
      case TokenKind::kVarEnd: return "'}}'";
      case TokenKind::kText: return "template text";
      case TokenKind::kString: return "a string";
      default: return "'" + t.text + "'";
    }
  }
  Status error(size_t pos, const std::string& message) const {
    return Status::invalid_argument(line_col(src_, pos) + ": " + message);
  }
  Status expected(const std::string& what) const {
    return error(peek().pos, "expected " + what + ", got " + describe(peek()));
  }
  Status expect_op(std::string_view op) {
    if (skip_op(op)) return ok_status();
    return expected("'" + std::string(op) + "'");
  }
  Status expect_block_end() {
    if (peek().kind == TokenKind::kBlockEnd) {
      ++i_;
      return ok_status();
    }
    return expected("'%}'");
  }
  Result<std::string> expect_name(const std::string& what) {
    if (peek().kind != TokenKind::kName) return expected(what);
    return tokens_[i_++].text;
  }

  // Guards the recursion of nested blocks and expressions.
  struct DepthGuard {
    explicit DepthGuard(int* depth) : depth_(depth) { ++*depth_; }
    ~DepthGuard() { --*depth_; }
    int* depth_;
  };
  // Left-nested chains (a + b + c, a.b.c, a|f|g) deepen the tree by one per link.
  struct ChainGuard {
    explicit ChainGuard(int* depth) : depth_(depth) {}
    ~ChainGuard() { *depth_ -= added_; }
    int* depth_;
    int added_ = 0;
  };
  Status deepen(ChainGuard* chain) {
    ++*chain->depth_;
    ++chain->added_;
    return check_depth();
  }
  Status check_depth() const {
    if (depth_ > kMaxNesting) return error(peek().pos, "nesting is deeper than " + std::to_string(kMaxNesting) + " levels");
    return ok_status();
  }

  // ---- statements ----

  // Parses until a block tag named in `ends` ({% endfor %}, {% else %}, ...); consumes the
  // "{%" and the tag's name and stores the name in *end. With no ends, parses to the end.
  Result<Body> parse_body(std::initializer_list<std::string_view> ends, const std::string& opener, size_t opener_pos,
                          std::string* end) {
    DepthGuard guard(&depth_);
    KOI_RETURN_IF_ERROR(check_depth());
    Body body;
    while (true) {
      const Token& t = peek();
      if (t.kind == TokenKind::kEof) {
        if (ends.size() == 0) return body;
        return error(t.pos, "unexpected end of template: expected '" + std::string(*(ends.end() - 1)) +
                                "' to close the '" + opener + "' at " + line_col(src_, opener_pos));
      }
      if (t.kind == TokenKind::kText) {
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::kText;
        s->pos = t.pos;
        s->text = t.text;
        body.push_back(std::move(s));
        ++i_;
        continue;
      }
      if (t.kind == TokenKind::kVarBegin) {
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::kOutput;
        s->pos = t.pos;
        ++i_;
        KOI_ASSIGN_OR_RETURN(s->expr, parse_tuple_expression());
        if (peek().kind != TokenKind::kVarEnd) return expected("'}}'");
        ++i_;
        body.push_back(std::move(s));
        continue;
      }
      // A block tag.
      ++i_;
      if (peek().kind != TokenKind::kName) return expected("a statement name");
      for (std::string_view e : ends) {
        if (peek().text == e) {
          *end = tokens_[i_++].text;
          return body;
        }
      }
      KOI_ASSIGN_OR_RETURN(auto stmt, parse_statement());
      body.push_back(std::move(stmt));
    }
  }

  Result<std::unique_ptr<Stmt>> parse_statement() {
    const Token& t = peek();
    auto s = std::make_unique<Stmt>();
    s->pos = t.pos;
    std::string keyword = t.text;
    ++i_;
    std::string end;
    if (keyword == "if") {
      s->kind = Stmt::Kind::kIf;
      std::string tag = "if";
      while (true) {
        KOI_ASSIGN_OR_RETURN(ExprPtr cond, parse_expression());
        KOI_RETURN_IF_ERROR(expect_block_end());
        KOI_ASSIGN_OR_RETURN(Body branch, parse_body({"elif", "else", "endif"}, "if", s->pos, &end));
        s->branches.emplace_back(std::move(cond), std::move(branch));
        if (end != "elif") break;
      }
      if (end == "else") {
        KOI_RETURN_IF_ERROR(expect_block_end());
        KOI_ASSIGN_OR_RETURN(s->else_body, parse_body({"endif"}, "if", s->pos, &end));
      }
    } else if (keyword == "for") {
      s->kind = Stmt::Kind::kFor;
      KOI_ASSIGN_OR_RETURN(s->targets, parse_targets());
      if (!skip_name("in")) return expected("'in'");
      KOI_ASSIGN_OR_RETURN(s->expr, parse_tuple_expression(/*with_condexpr=*/false));
      if (skip_name("if")) {
        KOI_ASSIGN_OR_RETURN(s->condition, parse_expression());
      }
      if (at_name("recursive")) return error(peek().pos, "recursive for loops are not supported");
      KOI_RETURN_IF_ERROR(expect_block_end());
      KOI_ASSIGN_OR_RETURN(s->body, parse_body({"else", "endfor"}, "for", s->pos, &end));
      if (end == "else") {
        KOI_RETURN_IF_ERROR(expect_block_end());
        KOI_ASSIGN_OR_RETURN(s->else_body, parse_body({"endfor"}, "for", s->pos, &end));
      }
    } else if (keyword == "set") {
      KOI_ASSIGN_OR_RETURN(s->targets, parse_targets());
      if (s->targets.size() == 1 && skip_op(".")) {
        KOI_ASSIGN_OR_RETURN(s->attr, expect_name("an attribute name"));
      }
      if (skip_op("=")) {
        s->kind = Stmt::Kind::kSet;
        KOI_ASSIGN_OR_RETURN(s->expr, parse_tuple_expression());
      } else {
        if (s->targets.size() != 1 || !s->attr.empty()) return expected("'='");
        s->kind = Stmt::Kind::kSetBlock;
        KOI_RETURN_IF_ERROR(expect_block_end());
        KOI_ASSIGN_OR_RETURN(s->body, parse_body({"endset"}, "set", s->pos, &end));
      }
    } else if (keyword == "macro") {
      s->kind = Stmt::Kind::kMacro;
      KOI_ASSIGN_OR_RETURN(s->name, expect_name("a macro name"));
      KOI_RETURN_IF_ERROR(parse_params(&s->params));
      KOI_RETURN_IF_ERROR(expect_block_end());
      KOI_ASSIGN_OR_RETURN(s->body, parse_body({"endmacro"}, "macro", s->pos, &end));
    } else if (keyword == "call") {
      s->kind = Stmt::Kind::kCallBlock;
      if (at_op("(")) KOI_RETURN_IF_ERROR(parse_params(&s->params));
      KOI_ASSIGN_OR_RETURN(s->expr, parse_expression());
      if (s->expr->kind != Expr::Kind::kCall) return error(s->expr->pos, "expected a call after 'call'");
      KOI_RETURN_IF_ERROR(expect_block_end());
      KOI_ASSIGN_OR_RETURN(s->body, parse_body({"endcall"}, "call", s->pos, &end));
    } else if (keyword == "filter") {
      s->kind = Stmt::Kind::kFilterBlock;
      ExprPtr input;
      do {
        KOI_ASSIGN_OR_RETURN(input, parse_filter(std::move(input)));
      } while (skip_op("|"));
      s->expr = std::move(input);
      KOI_RETURN_IF_ERROR(expect_block_end());
      KOI_ASSIGN_OR_RETURN(s->body, parse_body({"endfilter"}, "filter", s->pos, &end));
    } else if (keyword == "generation") {
      // Hugging Face's {% generation %} marks assistant text for masks; it renders its body.
      s->kind = Stmt::Kind::kIf;
      KOI_RETURN_IF_ERROR(expect_block_end());
      KOI_ASSIGN_OR_RETURN(Body inner, parse_body({"endgeneration"}, "generation", s->pos, &end));
      s->branches.emplace_back(nullptr, std::move(inner));
    } else if (keyword == "break" || keyword == "continue") {
      s->kind = keyword == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue;
    } else if (keyword.rfind("end", 0) == 0 || keyword == "else" || keyword == "elif") {
      return error(t.pos, "unexpected '" + keyword + "' with no open block to close");
    } else {
      return error(t.pos, "unknown statement '" + keyword + "'");
    }
    KOI_RETURN_IF_ERROR(expect_block_end());
    return s;
  }

  // name or name, name, ...
  Result<std::vector<std::string>> parse_targets() {
    std::vector<std::string> names;
    bool parens = skip_op("(");
    do {
      KOI_ASSIGN_OR_RETURN(std::string name, expect_name("a variable name"));
      names.push_back(std::move(name));
    } while (skip_op(","));
    if (parens) KOI_RETURN_IF_ERROR(expect_op(")"));
    return names;
  }

  Status parse_params(std::vector<Param>* params) {
    KOI_RETURN_IF_ERROR(expect_op("("));
    while (!skip_op(")")) {
      if (!params->empty()) KOI_RETURN_IF_ERROR(expect_op(","));
      if (skip_op(")")) break;
      Param p;
      KOI_ASSIGN_OR_RETURN(p.name, expect_name("a parameter name"));
      if (skip_op("=")) {
        KOI_ASSIGN_OR_RETURN(p.default_value, parse_expression());
      }
      params->push_back(std::move(p));
    }
    return ok_status();
  }

  // ---- expressions ----

  // An expression, or several separated by commas (a tuple, as in `{% set a, b = 1, 2 %}`).
  Result<ExprPtr> parse_tuple_expression(bool with_condexpr = true) {
    size_t pos = peek().pos;
    KOI_ASSIGN_OR_RETURN(ExprPtr first, with_condexpr ? parse_expression() : parse_or());
    if (!at_op(",")) return first;
    ExprPtr tuple = make_expr(Expr::Kind::kList, pos);
    tuple->items.push_back(std::move(first));
    while (skip_op(",")) {
      if (peek().kind == TokenKind::kBlockEnd || peek().kind == TokenKind::kVarEnd) break;
      KOI_ASSIGN_OR_RETURN(ExprPtr next, with_condexpr ? parse_expression() : parse_or());
      tuple->items.push_back(std::move(next));
    }
    return tuple;
  }

  Result<ExprPtr> parse_expression() {
    KOI_ASSIGN_OR_RETURN(ExprPtr expr, parse_or());
    ChainGuard chain(&depth_);
    while (at_name("if")) {
      KOI_RETURN_IF_ERROR(deepen(&chain));
      ExprPtr cond = make_expr(Expr::Kind::kCond, peek().pos);
      ++i_;
      KOI_ASSIGN_OR_RETURN(ExprPtr test, parse_or());
      ExprPtr otherwise;
      if (skip_name("else")) {
        KOI_ASSIGN_OR_RETURN(otherwise, parse_expression());
      }
      cond->items.push_back(std::move(test));
      cond->items.push_back(std::move(expr));
      cond->items.push_back(std::move(otherwise));
      expr = std::move(cond);
    }
    return expr;
  }

  // Left-associative binary operators: `next` parses the operands, `ops` are the operators.
  template <typename Next>
  Result<ExprPtr> parse_binary(Next next, std::initializer_list<std::string_view> ops, bool named) {
    KOI_ASSIGN_OR_RETURN(ExprPtr left, (this->*next)());
    ChainGuard chain(&depth_);
    while (true) {
      std::string op;
      for (std::string_view candidate : ops) {
        if (named ? at_name(candidate) : at_op(candidate)) op = candidate;
      }
      if (op.empty()) return left;
      KOI_RETURN_IF_ERROR(deepen(&chain));
      ExprPtr node = make_expr(Expr::Kind::kBinary, peek().pos);
      ++i_;
      KOI_ASSIGN_OR_RETURN(ExprPtr right, (this->*next)());
      node->name = op;
      node->items.push_back(std::move(left));
      node->items.push_back(std::move(right));
      left = std::move(node);
    }
  }
  Result<ExprPtr> parse_or() { return parse_binary(&Parser::parse_and, {"or"}, true); }
  Result<ExprPtr> parse_and() { return parse_binary(&Parser::parse_not, {"and"}, true); }
  Result<ExprPtr> parse_not() {
    if (!at_name("not")) return parse_compare();
    ExprPtr node = make_expr(Expr::Kind::kUnary, peek().pos);
    ++i_;
    DepthGuard guard(&depth_);
    KOI_RETURN_IF_ERROR(check_depth());
    KOI_ASSIGN_OR_RETURN(ExprPtr operand, parse_not());
    node->name = "not";
    node->items.push_back(std::move(operand));
    return node;
  }
  Result<ExprPtr> parse_compare() {
    size_t pos = peek().pos;
    KOI_ASSIGN_OR_RETURN(ExprPtr first, parse_math1());
    ExprPtr node;
    while (true) {
      std::string op;
      if (peek().kind == TokenKind::kOp &&
          (at_op("==") || at_op("!=") || at_op("<") || at_op(">") || at_op("<=") || at_op(">="))) {
        op = peek().text;
        ++i_;
      } else if (at_name("in")) {
        op = "in";
        ++i_;
      } else if (at_name("not") && at_name("in", 1)) {
        op = "notin";
        i_ += 2;
      } else {
        break;
      }
      if (!node) {
        node = make_expr(Expr::Kind::kCompare, pos);
        node->items.push_back(std::move(first));
      }
      KOI_ASSIGN_OR_RETURN(ExprPtr operand, parse_math1());
      node->ops.push_back(op);
      node->items.push_back(std::move(operand));
    }
    return node ? std::move(node) : std::move(first);
  }
  Result<ExprPtr> parse_math1() { return parse_binary(&Parser::parse_concat, {"+", "-"}, false); }
  Result<ExprPtr> parse_concat() { return parse_binary(&Parser::parse_math2, {"~"}, false); }
  Result<ExprPtr> parse_math2() { return parse_binary(&Parser::parse_pow, {"*", "/", "//", "%"}, false); }
  Result<ExprPtr> parse_pow() { return parse_binary(&Parser::parse_unary_filtered, {"**"}, false); }
  Result<ExprPtr> parse_unary_filtered() { return parse_unary(true); }

  Result<ExprPtr> parse_unary(bool with_filter) {
    DepthGuard guard(&depth_);
    KOI_RETURN_IF_ERROR(check_depth());
    ExprPtr node;
    if (at_op("-") || at_op("+")) {
      node = make_expr(Expr::Kind::kUnary, peek().pos);
      node->name = peek().text;
      ++i_;
      KOI_ASSIGN_OR_RETURN(ExprPtr operand, parse_unary(false));
      node->items.push_back(std::move(operand));
    } else {
      KOI_ASSIGN_OR_RETURN(node, parse_primary());
    }
    KOI_ASSIGN_OR_RETURN(node, parse_postfix(std::move(node)));
    if (!with_filter) return node;
    ChainGuard chain(&depth_);
    while (at_op("|") || at_name("is") || at_op("(")) {
      KOI_RETURN_IF_ERROR(deepen(&chain));
      if (skip_op("|")) {
        KOI_ASSIGN_OR_RETURN(node, parse_filter(std::move(node)));
      } else if (at_name("is")) {
        KOI_ASSIGN_OR_RETURN(node, parse_test(std::move(node)));
      } else {
        KOI_ASSIGN_OR_RETURN(node, parse_call(std::move(node)));
      }
    }
    return node;
  }

  Result<ExprPtr> parse_primary() {
    const Token& t = peek();
    ExprPtr node = make_expr(Expr::Kind::kLiteral, t.pos);
    switch (t.kind) {
      case TokenKind::kName:
        ++i_;
        if (t.text == "true" || t.text == "True") {
          node->value = true;
        } else if (t.text == "false" || t.text == "False") {
          node->value = false;
        } else if (t.text == "none" || t.text == "None") {
          node->value = None{};
        } else {
          node->kind = Expr::Kind::kName;
          node->name = t.text;
        }
        return node;
      case TokenKind::kString: {
        std::string s;
        while (peek().kind == TokenKind::kString) s += tokens_[i_++].text;  // "a" "b" is "ab"
        node->value = std::move(s);
        return node;
      }
      case TokenKind::kInt: {
        int64_t v = 0;
        auto [ptr, ec] = std::from_chars(t.text.data(), t.text.data() + t.text.size(), v);
        if (ec != std::errc()) return error(t.pos, "integer literal " + t.text + " is out of range");
        ++i_;
        node->value = v;
        return node;
      }
      case TokenKind::kFloat:
        ++i_;
        node->value = std::strtod(t.text.c_str(), nullptr);
        return node;
      case TokenKind::kOp:
        if (t.text == "(") {
          ++i_;
          if (skip_op(")")) {
            node->kind = Expr::Kind::kList;  // ()
            return node;
          }
          KOI_ASSIGN_OR_RETURN(ExprPtr inner, parse_tuple_expression());
          KOI_RETURN_IF_ERROR(expect_op(")"));
          return inner;
        }
        if (t.text == "[" || t.text == "{") {
          const bool is_dict = t.text == "{";
          node->kind = is_dict ? Expr::Kind::kDict : Expr::Kind::kList;
          ++i_;
          const std::string close = is_dict ? "}" : "]";
          while (!skip_op(close)) {
            if (!node->items.empty()) KOI_RETURN_IF_ERROR(expect_op(","));
            if (skip_op(close)) break;
            KOI_ASSIGN_OR_RETURN(ExprPtr item, parse_expression());
            node->items.push_back(std::move(item));
            if (is_dict) {
              KOI_RETURN_IF_ERROR(expect_op(":"));
              KOI_ASSIGN_OR_RETURN(ExprPtr value, parse_expression());
              node->items.push_back(std::move(value));
            }
          }
          return node;
        }
        break;
      default:
        break;
    }
    return expected("an expression");
  }

  Result<ExprPtr> parse_postfix(ExprPtr node) {
    ChainGuard chain(&depth_);
    while (at_op(".") || at_op("[") || at_op("(")) {
      KOI_RETURN_IF_ERROR(deepen(&chain));
      if (at_op(".")) {
        size_t pos = peek().pos;
        ++i_;
        const Token& t = peek();
        if (t.kind == TokenKind::kName) {
          ExprPtr attr = make_expr(Expr::Kind::kAttr, pos);
          attr->name = t.text;
          attr->items.push_back(std::move(node));
          node = std::move(attr);
        } else if (t.kind == TokenKind::kInt) {
          ExprPtr item = make_expr(Expr::Kind::kItem, pos);
          item->items.push_back(std::move(node));
          ExprPtr index = make_expr(Expr::Kind::kLiteral, t.pos);
          index->value = static_cast<int64_t>(std::stoll(t.text));
          item->items.push_back(std::move(index));
          node = std::move(item);
        } else {
          return expected("an attribute name after '.'");
        }
        ++i_;
      } else if (at_op("[")) {
        KOI_ASSIGN_OR_RETURN(node, parse_subscript(std::move(node)));
      } else {
        KOI_ASSIGN_OR_RETURN(node, parse_call(std::move(node)));
      }
    }
    return node;
  }

  Result<ExprPtr> parse_subscript(ExprPtr node) {
    size_t pos = peek().pos;
    ++i_;  // [
    ExprPtr parts[3];
    int part = 0;
    bool is_slice = false;
    while (!at_op("]")) {
      if (skip_op(":")) {
        is_slice = true;
        if (++part > 2) return expected("']'");
        continue;
      }
      if (parts[part]) return expected("':' or ']'");
      KOI_ASSIGN_OR_RETURN(parts[part], parse_expression());
    }
    ++i_;  // ]
    if (!is_slice) {
      if (!parts[0]) return error(pos, "expected an index inside '[]'");
      ExprPtr item = make_expr(Expr::Kind::kItem, pos);
      item->items.push_back(std::move(node));
      item->items.push_back(std::move(parts[0]));
      return item;
    }
    ExprPtr slice = make_expr(Expr::Kind::kSlice, pos);
    slice->items.push_back(std::move(node));
    for (auto& p : parts) slice->items.push_back(std::move(p));
    return slice;
  }

  // Arguments "(a, b, key=value)" into node->items (after what is already there) and kwargs.
  Status parse_args(Expr* node) {
    KOI_RETURN_IF_ERROR(expect_op("("));
    bool first = true;
    while (!skip_op(")")) {
      if (!first) KOI_RETURN_IF_ERROR(expect_op(","));
      first = false;
      if (skip_op(")")) break;
      if (peek().kind == TokenKind::kName && at_op("=", 1)) {
        std::string key = peek().text;
        i_ += 2;
        KOI_ASSIGN_OR_RETURN(ExprPtr value, parse_expression());
        node->kwargs.emplace_back(std::move(key), std::move(value));
      } else {
        if (!node->kwargs.empty()) return error(peek().pos, "positional argument after a keyword argument");
        KOI_ASSIGN_OR_RETURN(ExprPtr value, parse_expression());
        node->items.push_back(std::move(value));
      }
    }
    return ok_status();
  }

  Result<ExprPtr> parse_call(ExprPtr callee) {
    ExprPtr call = make_expr(Expr::Kind::kCall, peek().pos);
    call->items.push_back(std::move(callee));
    KOI_RETURN_IF_ERROR(parse_args(call.get()));
    return call;
  }

  // After '|': name[.name...][(args)]. `input` may be null (a filter block).
  Result<ExprPtr> parse_filter(ExprPtr input) {
    ExprPtr filter = make_expr(Expr::Kind::kFilter, peek().pos);
    KOI_ASSIGN_OR_RETURN(filter->name, expect_name("a filter name"));
    while (skip_op(".")) {
      KOI_ASSIGN_OR_RETURN(std::string part, expect_name("a filter name"));
      filter->name += "." + part;
    }
    filter->items.push_back(std::move(input));
    if (at_op("(")) KOI_RETURN_IF_ERROR(parse_args(filter.get()));
    return filter;
  }

  // At 'is': is [not] name [(args) | one argument].
  Result<ExprPtr> parse_test(ExprPtr input) {
    ExprPtr test = make_expr(Expr::Kind::kTest, peek().pos);
    ++i_;
    test->negated = skip_name("not");
    KOI_ASSIGN_OR_RETURN(test->name, expect_name("a test name"));
    test->items.push_back(std::move(input));
    if (at_op("(")) {
      KOI_RETURN_IF_ERROR(parse_args(test.get()));
      return test;
    }
    const Token& t = peek();
    bool starts_argument =
        t.kind == TokenKind::kString || t.kind == TokenKind::kInt || t.kind == TokenKind::kFloat ||
        (t.kind == TokenKind::kName && t.text != "else" && t.text != "or" && t.text != "and" && t.text != "if" &&
         t.text != "in" && t.text != "not" && t.text != "is") ||
        at_op("[") || at_op("{");
    if (starts_argument) {
      KOI_ASSIGN_OR_RETURN(ExprPtr arg, parse_primary());
      KOI_ASSIGN_OR_RETURN(arg, parse_postfix(std::move(arg)));
      test->items.push_back(std::move(arg));
    }
    return test;
  }

  std::string_view src_;
  std::vector<Token> tokens_;
  size_t i_ = 0;
  int depth_ = 0;
};

}  // namespace

Result<Body> parse(std::string_view source) {
  KOI_ASSIGN_OR_RETURN(std::vector<Token> tokens, lex(source));
  Parser parser(source, std::move(tokens));
  return parser.parse_template();
}

}  // namespace koi::tokenizer::jinja
