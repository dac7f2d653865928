#include "tokenizer/jinja/interpreter.h"

#include <cmath>
#include <memory>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/lexer.h"

namespace koi::tokenizer::jinja {
namespace {

enum class Flow { kNormal, kBreak, kContinue };

// Variables of one block level. Lookups walk outwards through the parents.
struct Scope {
  std::shared_ptr<Scope> parent;
  std::vector<std::pair<std::string, Value>> vars;

  const Value* find(std::string_view name) const {
    for (const Scope* s = this; s != nullptr; s = s->parent.get()) {
      for (const auto& [k, v] : s->vars) {
        if (k == name) return &v;
      }
    }
    return nullptr;
  }
  void set(const std::string& name, Value value) {
    for (auto& [k, v] : vars) {
      if (k == name) {
        v = std::move(value);
        return;
      }
    }
    vars.emplace_back(name, std::move(value));
  }
};
using ScopePtr = std::shared_ptr<Scope>;

ScopePtr child_of(const ScopePtr& parent) {
  auto s = std::make_shared<Scope>();
  s->parent = parent;
  return s;
}

class Interpreter {
 public:
  Interpreter(std::string_view source, const RenderLimits& limits) : src_(source), limits_(limits) {}
  // A namespace may hold itself (`{% set ns.me = ns %}`); emptying them breaks such cycles.
  ~Interpreter() {
    for (const auto& ns : namespaces_) ns->items.clear();
  }

  Result<std::string> run(const Body& program, const std::vector<std::pair<std::string, Value>>& globals) {
    auto root = std::make_shared<Scope>();
    add_builtins(root.get());
    for (const auto& [name, value] : globals) root->set(name, value);
    std::string out;
    KOI_RETURN_IF_ERROR(exec(program, root, &out).status());
    return out;
  }

 private:
  Status error(size_t pos, const std::string& message) const {
    return Status::invalid_argument(line_col(src_, pos) + ": " + message);
  }
  Status step(size_t pos) {
    if (++steps_ > limits_.max_steps) {
      return error(pos, "rendering took more than " + std::to_string(limits_.max_steps) + " steps (an endless loop?)");
    }
    return ok_status();
  }
  // Accounts for a string or list of `size` bytes or items just built.
  Status built(size_t size, size_t pos) {
    bytes_built_ += static_cast<int64_t>(size);
    if (size > limits_.max_output_bytes) {
      return error(pos, "a string or list of " + std::to_string(size) + " bytes or items is over the limit of " +
                            std::to_string(limits_.max_output_bytes));
    }
    if (bytes_built_ > limits_.max_bytes_built) {
      return error(pos, "rendering built more than " + std::to_string(limits_.max_bytes_built) + " bytes of values");
    }
    return ok_status();
  }
  Status append(std::string* out, std::string_view text, size_t pos) {
    if (out->size() + text.size() > limits_.max_output_bytes) {
      return error(pos, "output is over the limit of " + std::to_string(limits_.max_output_bytes) + " bytes");
    }
    out->append(text);
    return ok_status();
  }
  Status check_nesting(const Value& v, size_t pos) const {
    if (v.nesting() > kMaxValueNesting) {
      return error(pos, "lists and dicts nest deeper than " + std::to_string(kMaxValueNesting) + " levels");
    }
    return ok_status();
  }
  // A builtin's error, located at `pos`.
  template <typename T>
  Result<T> at(Result<T> r, size_t pos) const {
    if (r.ok()) return r;
    return error(pos, r.status().message());
  }

  void add_builtins(Scope* root) {
    root->set("range", Value::callable("range", [this](Args& args) -> Result<Value> {
      KOI_ASSIGN_OR_RETURN(Value v, range_function(args, limits_.max_steps - steps_));
      steps_ += static_cast<int64_t>(v.as_list().size());
      return v;
    }));
    root->set("namespace", Value::callable("namespace", [this](Args& args) -> Result<Value> {
      auto ns = std::make_shared<Dict>();
      ns->is_namespace = true;
      if (args.positional.size() > 1 || (args.positional.size() == 1 && !args.positional[0].is_dict())) {
        return Status::invalid_argument("namespace() takes keyword arguments or one dict");
      }
      if (!args.positional.empty()) {
        for (const auto& [k, v] : args.positional[0].as_dict().items) ns->set(k, v);
      }
      for (auto& [k, v] : args.keyword) ns->set(k, v);
      namespaces_.push_back(ns);
      return Value(ns);
    }));
    root->set("dict", Value::callable("dict", [](Args& args) -> Result<Value> {
      if (!args.positional.empty()) return Status::invalid_argument("dict() takes keyword arguments only");
      Dict d;
      for (auto& [k, v] : args.keyword) d.set(k, v);
      return Value::dict(std::move(d));
    }));
    root->set("raise_exception", Value::callable(
                                     "raise_exception",
                                     [](Args& args) -> Result<Value> {
                                       std::string message = args.positional.empty() ? "" : args.positional[0].str();
                                       return Status::invalid_argument(message);
                                     },
                                     /*final_errors=*/true));
  }

  // ---- statements ----

  Result<Flow> exec(const Body& body, const ScopePtr& scope, std::string* out) {
    for (const auto& stmt : body) {
      KOI_ASSIGN_OR_RETURN(Flow flow, exec_stmt(*stmt, scope, out));
      if (flow != Flow::kNormal) return flow;
    }
    return Flow::kNormal;
  }

  Result<std::string> render_body(const Body& body, const ScopePtr& scope) {
    std::string out;
    KOI_RETURN_IF_ERROR(exec(body, scope, &out).status());
    return out;
  }

  Result<Flow> exec_stmt(const Stmt& s, const ScopePtr& scope, std::string* out) {
    KOI_RETURN_IF_ERROR(step(s.pos));
    switch (s.kind) {
      case Stmt::Kind::kText:
        KOI_RETURN_IF_ERROR(append(out, s.text, s.pos));
        return Flow::kNormal;
      case Stmt::Kind::kOutput: {
        KOI_ASSIGN_OR_RETURN(Value v, eval(*s.expr, scope));
        KOI_RETURN_IF_ERROR(append(out, v.str(), s.pos));
        return Flow::kNormal;
      }
      case Stmt::Kind::kIf:
        for (const auto& [cond, body] : s.branches) {
          bool taken = true;
          if (cond) {
            KOI_ASSIGN_OR_RETURN(Value v, eval(*cond, scope));
            taken = v.truthy();
          }
          if (taken) return exec(body, scope, out);
        }
        return exec(s.else_body, scope, out);
      case Stmt::Kind::kFor: return exec_for(s, scope, out);
      case Stmt::Kind::kSet: {
        KOI_ASSIGN_OR_RETURN(Value v, eval(*s.expr, scope));
        if (!s.attr.empty()) {
          const Value* target = scope->find(s.targets[0]);
          if (target == nullptr || !target->is_dict() || !target->as_dict().is_namespace) {
            return error(s.pos, "cannot set '" + s.targets[0] + "." + s.attr + "': '" + s.targets[0] +
                                    "' is not a namespace() object");
          }
          KOI_RETURN_IF_ERROR(check_nesting(v, s.pos));
          target->mutable_dict().set(s.attr, std::move(v));
          if (target->nesting() > kMaxValueNesting) return check_nesting(*target, s.pos);
          return Flow::kNormal;
        }
        KOI_RETURN_IF_ERROR(bind_targets(s.targets, v, scope.get(), s.pos));
        return Flow::kNormal;
      }
      case Stmt::Kind::kSetBlock: {
        KOI_ASSIGN_OR_RETURN(std::string text, render_body(s.body, scope));
        scope->set(s.targets[0], Value(std::move(text)));
        return Flow::kNormal;
      }
      case Stmt::Kind::kMacro: {
        const Stmt* macro = &s;
        std::weak_ptr<Scope> defining = scope;
        scope->set(s.name, Value::callable(
                               s.name, [this, macro, defining](Args& args) { return call_macro(*macro, defining, args); },
                               /*final_errors=*/true));
        return Flow::kNormal;
      }
      case Stmt::Kind::kCallBlock: {
        const Expr& call = *s.expr;
        KOI_ASSIGN_OR_RETURN(Value callee, eval(*call.items[0], scope));
        KOI_ASSIGN_OR_RETURN(Args args, eval_args(call, scope));
        const Stmt* block = &s;
        std::weak_ptr<Scope> enclosing = scope;
        args.keyword.emplace_back("caller", Value::callable(
                                                "caller",
                                                [this, block, enclosing](Args& caller_args) {
                                                  return call_macro(*block, enclosing, caller_args);
                                                },
                                                /*final_errors=*/true));
        KOI_ASSIGN_OR_RETURN(Value result, call_value(callee, args, call.pos));
        KOI_RETURN_IF_ERROR(append(out, result.str(), s.pos));
        return Flow::kNormal;
      }
      case Stmt::Kind::kFilterBlock: {
        KOI_ASSIGN_OR_RETURN(std::string text, render_body(s.body, scope));
        KOI_ASSIGN_OR_RETURN(Value v, apply_filter_chain(*s.expr, Value(std::move(text)), scope));
        KOI_RETURN_IF_ERROR(append(out, v.str(), s.pos));
        return Flow::kNormal;
      }
      case Stmt::Kind::kBreak: return Flow::kBreak;
      case Stmt::Kind::kContinue: return Flow::kContinue;
    }
    return Flow::kNormal;
  }

  Status bind_targets(const std::vector<std::string>& targets, const Value& v, Scope* scope, size_t pos) {
    if (targets.size() == 1) {
      scope->set(targets[0], v);
      return ok_status();
    }
    if (!v.is_list() || v.as_list().size() != targets.size()) {
      return error(pos, "cannot unpack " + (v.is_list() ? std::to_string(v.as_list().size()) + " values" : v.type_name()) +
                            " into " + std::to_string(targets.size()) + " names");
    }
    for (size_t i = 0; i < targets.size(); ++i) scope->set(targets[i], v.as_list()[i]);
    return ok_status();
  }

  Result<Flow> exec_for(const Stmt& s, const ScopePtr& scope, std::string* out) {
    KOI_ASSIGN_OR_RETURN(Value seq, eval(*s.expr, scope));
    KOI_ASSIGN_OR_RETURN(List items, at(iterate(seq), s.expr->pos));
    if (s.condition) {
      List kept;
      for (const Value& item : items) {
        auto filter_scope = child_of(scope);
        KOI_RETURN_IF_ERROR(bind_targets(s.targets, item, filter_scope.get(), s.pos));
        KOI_ASSIGN_OR_RETURN(Value keep, eval(*s.condition, filter_scope));
        if (keep.truthy()) kept.push_back(item);
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      KOI_RETURN_IF_ERROR(exec(s.else_body, scope, out).status());
      return Flow::kNormal;
    }
    const auto n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
      KOI_RETURN_IF_ERROR(step(s.pos));
      auto iteration = child_of(scope);
      KOI_RETURN_IF_ERROR(bind_targets(s.targets, items[i], iteration.get(), s.pos));
      Dict loop;
      loop.set("index", i + 1);
      loop.set("index0", i);
      loop.set("revindex", n - i);
      loop.set("revindex0", n - i - 1);
      loop.set("first", i == 0);
      loop.set("last", i == n - 1);
      loop.set("length", n);
      loop.set("depth", 1);
      loop.set("depth0", 0);
      loop.set("previtem", i > 0 ? items[i - 1] : Value::undefined("there is no previous item"));
      loop.set("nextitem", i + 1 < n ? items[i + 1] : Value::undefined("there is no next item"));
      loop.set("cycle", Value::callable("loop.cycle", [i](Args& args) -> Result<Value> {
        if (args.positional.empty()) return Status::invalid_argument("loop.cycle() needs at least one value");
        return args.positional[static_cast<size_t>(i) % args.positional.size()];
      }));
      iteration->set("loop", Value::dict(std::move(loop)));
      KOI_ASSIGN_OR_RETURN(Flow flow, exec(s.body, iteration, out));
      if (flow == Flow::kBreak) break;
    }
    return Flow::kNormal;
  }

  // Calls a macro (or a call block's body as `caller`) with its parameters bound.
  Result<Value> call_macro(const Stmt& macro, const std::weak_ptr<Scope>& defining, Args& args) {
    ScopePtr parent = defining.lock();
    const std::string name = macro.kind == Stmt::Kind::kMacro ? "macro '" + macro.name + "'" : "caller";
    if (!parent) return error(macro.pos, name + " was called after the block that defined it ended");
    if (call_depth_ >= limits_.max_call_depth) {
      return error(macro.pos, name + ": calls nested deeper than " + std::to_string(limits_.max_call_depth) +
                                  " levels (endless recursion?)");
    }
    struct DepthGuard {
      int* depth;
      ~DepthGuard() { --*depth; }
    } guard{&++call_depth_};
    if (args.positional.size() > macro.params.size()) {
      return error(macro.pos, name + " takes at most " + std::to_string(macro.params.size()) + " argument(s), got " +
                                  std::to_string(args.positional.size()));
    }
    auto scope = child_of(parent);
    for (auto& [key, value] : args.keyword) {
      bool known = key == "caller";
      for (const Param& p : macro.params) known = known || p.name == key;
      if (!known) return error(macro.pos, name + " got an unexpected keyword argument '" + key + "'");
      if (key == "caller") scope->set("caller", value);
    }
    for (size_t i = 0; i < macro.params.size(); ++i) {
      const Param& p = macro.params[i];
      Value v = Value::undefined("'" + p.name + "' is undefined");
      if (i < args.positional.size()) {
        v = args.positional[i];
      } else if (auto it = std::find_if(args.keyword.begin(), args.keyword.end(), [&](const auto& kw) { return kw.first == p.name; });
                 it != args.keyword.end()) {
        v = it->second;
      } else if (p.default_value) {
        KOI_ASSIGN_OR_RETURN(v, eval(*p.default_value, scope));
      }
      scope->set(p.name, std::move(v));
    }
    KOI_ASSIGN_OR_RETURN(std::string text, render_body(macro.body, scope));
    return Value(std::move(text));
  }

  // ---- expressions ----

  Result<Args> eval_args(const Expr& e, const ScopePtr& scope) {
    Args args;
    for (size_t i = 1; i < e.items.size(); ++i) {
      KOI_ASSIGN_OR_RETURN(Value v, eval(*e.items[i], scope));
      args.positional.push_back(std::move(v));
    }
    for (const auto& [key, expr] : e.kwargs) {
      KOI_ASSIGN_OR_RETURN(Value v, eval(*expr, scope));
      args.keyword.emplace_back(key, std::move(v));
    }
    return args;
  }

  Result<Value> call_value(const Value& callee, Args& args, size_t pos) {
    if (callee.is_undefined()) return error(pos, callee.undefined_message());
    if (!callee.is_callable()) return error(pos, "'" + callee.type_name() + "' object is not callable");
    const Callable& c = callee.as_callable();
    Result<Value> r = c.fn(args);
    if (!r.ok() && !c.final_errors) return error(pos, c.name + "(): " + r.status().message());
    if (r.ok() && r->is_string()) KOI_RETURN_IF_ERROR(built(r->as_string().size(), pos));
    return r;
  }

  // Applies the kFilter node `f` to `input` (its own input expression is ignored).
  Result<Value> apply_filter_node(const Expr& f, const Value& input, const ScopePtr& scope) {
    KOI_ASSIGN_OR_RETURN(Args args, eval_args(f, scope));
    KOI_ASSIGN_OR_RETURN(Value v, at(apply_filter(f.name, input, args), f.pos));
    if (v.is_string()) KOI_RETURN_IF_ERROR(built(v.as_string().size(), f.pos));
    if (v.is_list()) KOI_RETURN_IF_ERROR(built(v.as_list().size(), f.pos));
    return v;
  }

  // A {% filter %} block's chain: the innermost filter's input is the rendered body.
  Result<Value> apply_filter_chain(const Expr& f, Value body, const ScopePtr& scope) {
    Value input = std::move(body);
    if (f.items[0]) {
      KOI_ASSIGN_OR_RETURN(input, apply_filter_chain(*f.items[0], std::move(input), scope));
    }
    return apply_filter_node(f, input, scope);
  }

  Result<Value> eval(const Expr& e, const ScopePtr& scope) {
    KOI_RETURN_IF_ERROR(step(e.pos));
    switch (e.kind) {
      case Expr::Kind::kLiteral: return e.value;
      case Expr::Kind::kName:
        if (const Value* v = scope->find(e.name)) return *v;
        return Value::undefined("'" + e.name + "' is undefined");
      case Expr::Kind::kList: {
        List items;
        for (const auto& item : e.items) {
          KOI_ASSIGN_OR_RETURN(Value v, eval(*item, scope));
          items.push_back(std::move(v));
        }
        KOI_RETURN_IF_ERROR(built(items.size(), e.pos));
        Value list(std::move(items));
        KOI_RETURN_IF_ERROR(check_nesting(list, e.pos));
        return list;
      }
      case Expr::Kind::kDict: {
        Dict d;
        for (size_t i = 0; i + 1 < e.items.size(); i += 2) {
          KOI_ASSIGN_OR_RETURN(Value key, eval(*e.items[i], scope));
          if (!key.is_string()) return error(e.items[i]->pos, "dict keys must be strings, not " + key.type_name());
          KOI_ASSIGN_OR_RETURN(Value v, eval(*e.items[i + 1], scope));
          d.set(key.as_string(), std::move(v));
        }
        KOI_RETURN_IF_ERROR(built(d.items.size(), e.pos));
        Value dict = Value::dict(std::move(d));
        KOI_RETURN_IF_ERROR(check_nesting(dict, e.pos));
        return dict;
      }
      case Expr::Kind::kAttr: {
        KOI_ASSIGN_OR_RETURN(Value obj, eval(*e.items[0], scope));
        return at(get_attr(obj, e.name), e.pos);
      }
      case Expr::Kind::kItem: {
        KOI_ASSIGN_OR_RETURN(Value obj, eval(*e.items[0], scope));
        KOI_ASSIGN_OR_RETURN(Value key, eval(*e.items[1], scope));
        return at(get_item(obj, key), e.pos);
      }
      case Expr::Kind::kSlice: {
        Value parts[4];
        for (size_t i = 0; i < 4; ++i) {
          if (e.items[i]) {
            KOI_ASSIGN_OR_RETURN(parts[i], eval(*e.items[i], scope));
          }
        }
        return at(get_slice(parts[0], parts[1], parts[2], parts[3]), e.pos);
      }
      case Expr::Kind::kCall: {
        KOI_ASSIGN_OR_RETURN(Value callee, eval(*e.items[0], scope));
        KOI_ASSIGN_OR_RETURN(Args args, eval_args(e, scope));
        return call_value(callee, args, e.pos);
      }
      case Expr::Kind::kFilter: {
        KOI_ASSIGN_OR_RETURN(Value input, eval(*e.items[0], scope));
        return apply_filter_node(e, input, scope);
      }
      case Expr::Kind::kTest: {
        KOI_ASSIGN_OR_RETURN(Value input, eval(*e.items[0], scope));
        KOI_ASSIGN_OR_RETURN(Args args, eval_args(e, scope));
        KOI_ASSIGN_OR_RETURN(bool pass, at(apply_test(e.name, input, args), e.pos));
        return Value(pass != e.negated);
      }
      case Expr::Kind::kUnary: {
        KOI_ASSIGN_OR_RETURN(Value v, eval(*e.items[0], scope));
        if (e.name == "not") return Value(!v.truthy());
        if (v.is_undefined()) return error(e.pos, v.undefined_message());
        if (!v.is_number()) return error(e.pos, "bad operand type for unary " + e.name + ": '" + v.type_name() + "'");
        if (e.name == "+") return v.is_bool() ? Value(int64_t{v.as_bool()}) : v;
        if (v.is_float()) return Value(-v.as_float());
        int64_t i = v.is_bool() ? int64_t{v.as_bool()} : v.as_int();
        if (i == INT64_MIN) return error(e.pos, "integer overflow");
        return Value(-i);
      }
      case Expr::Kind::kBinary: {
        KOI_ASSIGN_OR_RETURN(Value left, eval(*e.items[0], scope));
        if (e.name == "and" && !left.truthy()) return left;
        if (e.name == "or" && left.truthy()) return left;
        KOI_ASSIGN_OR_RETURN(Value right, eval(*e.items[1], scope));
        if (e.name == "and" || e.name == "or") return right;
        return binary(e.name, left, right, e.pos);
      }
      case Expr::Kind::kCompare: {
        KOI_ASSIGN_OR_RETURN(Value left, eval(*e.items[0], scope));
        for (size_t i = 0; i < e.ops.size(); ++i) {
          KOI_ASSIGN_OR_RETURN(Value right, eval(*e.items[i + 1], scope));
          KOI_ASSIGN_OR_RETURN(bool holds, compare(e.ops[i], left, right, e.pos));
          if (!holds) return Value(false);
          left = std::move(right);
        }
        return Value(true);
      }
      case Expr::Kind::kCond: {
        KOI_ASSIGN_OR_RETURN(Value cond, eval(*e.items[0], scope));
        if (cond.truthy()) return eval(*e.items[1], scope);
        if (e.items[2]) return eval(*e.items[2], scope);
        return Value::undefined("the condition was false and there is no else");
      }
    }
    return Value();
  }

  Result<bool> compare(const std::string& op, const Value& a, const Value& b, size_t pos) {
    if (op == "==") return a.equals(b);
    if (op == "!=") return !a.equals(b);
    if (op == "in" || op == "notin") {
      bool found = false;
      if (b.is_string()) {
        if (!a.is_string()) return error(pos, "'in <string>' requires a string as left operand, not " + a.type_name());
        found = b.as_string().find(a.as_string()) != std::string::npos;
      } else if (b.is_dict() && !b.as_dict().is_namespace) {
        found = a.is_string() && b.as_dict().find(a.as_string()) != nullptr;
      } else if (b.is_list()) {
        for (const Value& item : b.as_list()) found = found || item.equals(a);
      } else if (!b.is_undefined()) {
        return error(pos, "argument of type '" + b.type_name() + "' is not iterable");
      }
      return op == "in" ? found : !found;
    }
    if (a.is_undefined() || b.is_undefined()) return error(pos, (a.is_undefined() ? a : b).undefined_message());
    Args args;
    args.positional.push_back(b);
    return at(apply_test(op, a, args), pos);
  }

  Result<Value> binary(const std::string& op, const Value& a, const Value& b, size_t pos) {
    if (op == "~") {
      std::string s = a.str() + b.str();
      KOI_RETURN_IF_ERROR(built(s.size(), pos));
      return Value(std::move(s));
    }
    if (a.is_undefined() || b.is_undefined()) return error(pos, (a.is_undefined() ? a : b).undefined_message());
    if (op == "+" && a.is_string() && b.is_string()) {
      KOI_RETURN_IF_ERROR(built(a.as_string().size() + b.as_string().size(), pos));
      return Value(a.as_string() + b.as_string());
    }
    if (op == "+" && a.is_list() && b.is_list()) {
      KOI_RETURN_IF_ERROR(built(a.as_list().size() + b.as_list().size(), pos));
      List joined = a.as_list();
      joined.insert(joined.end(), b.as_list().begin(), b.as_list().end());
      return Value(std::move(joined));
    }
    if (op == "*" && (a.is_string() || a.is_list() || b.is_string() || b.is_list())) {
      const Value& seq = a.is_string() || a.is_list() ? a : b;
      const Value& count_v = &seq == &a ? b : a;
      if (!count_v.is_int() && !count_v.is_bool()) {
        return error(pos, "can't multiply sequence by non-int of type '" + count_v.type_name() + "'");
      }
      int64_t count = std::max<int64_t>(0, count_v.is_int() ? count_v.as_int() : int64_t{count_v.as_bool()});
      size_t unit = seq.is_string() ? seq.as_string().size() : seq.as_list().size();
      if (unit > 0 && static_cast<uint64_t>(count) > limits_.max_output_bytes / unit) {
        return error(pos, "repeating a sequence " + std::to_string(count) + " times is over the size limit");
      }
      KOI_RETURN_IF_ERROR(built(unit * static_cast<size_t>(count), pos));
      if (seq.is_string()) {
        std::string out;
        for (int64_t i = 0; i < count; ++i) out += seq.as_string();
        return Value(std::move(out));
      }
      List out;
      for (int64_t i = 0; i < count; ++i) out.insert(out.end(), seq.as_list().begin(), seq.as_list().end());
      return Value(std::move(out));
    }
    if (!a.is_number() || !b.is_number()) {
      return error(pos, "unsupported operand type(s) for " + op + ": '" + a.type_name() + "' and '" + b.type_name() + "'");
    }
    if (!a.is_float() && !b.is_float() && op != "/") {
      int64_t x = a.is_bool() ? int64_t{a.as_bool()} : a.as_int();
      int64_t y = b.is_bool() ? int64_t{b.as_bool()} : b.as_int();
      int64_t r = 0;
      bool overflow = false;
      if (op == "+") {
        overflow = __builtin_add_overflow(x, y, &r);
      } else if (op == "-") {
        overflow = __builtin_sub_overflow(x, y, &r);
      } else if (op == "*") {
        overflow = __builtin_mul_overflow(x, y, &r);
      } else if (op == "//" || op == "%") {
        if (y == 0) return error(pos, "integer division or modulo by zero");
        if (x == INT64_MIN && y == -1) return error(pos, "integer overflow");
        int64_t q = x / y;
        int64_t m = x % y;
        if (m != 0 && ((m < 0) != (y < 0))) {
          --q;
          m += y;
        }
        r = op == "//" ? q : m;
      } else if (op == "**") {
        if (y < 0) return Value(std::pow(static_cast<double>(x), static_cast<double>(y)));
        r = 1;
        for (int64_t base = x, e = y; e > 0 && !overflow; e >>= 1) {
          if (e & 1) overflow = __builtin_mul_overflow(r, base, &r);
          if (e > 1) overflow = overflow || __builtin_mul_overflow(base, base, &base);
        }
      }
      if (overflow) return error(pos, "integer overflow in " + op);
      return Value(r);
    }
    double x = a.to_double();
    double y = b.to_double();
    if (op == "+") return Value(x + y);
    if (op == "-") return Value(x - y);
    if (op == "*") return Value(x * y);
    if (op == "**") return Value(std::pow(x, y));
    if (y == 0.0) return error(pos, "float division by zero");
    if (op == "/") return Value(x / y);
    if (op == "//") return Value(std::floor(x / y));
    double m = std::fmod(x, y);
    if (m != 0.0 && ((m < 0) != (y < 0))) m += y;
    return Value(m);
  }

  std::string_view src_;
  const RenderLimits& limits_;
  int64_t steps_ = 0;
  int64_t bytes_built_ = 0;
  int call_depth_ = 0;
  std::vector<std::shared_ptr<Dict>> namespaces_;
};

}  // namespace

Result<std::string> render(const Body& program, std::string_view source,
                           const std::vector<std::pair<std::string, Value>>& globals, const RenderLimits& limits) {
  Interpreter interpreter(source, limits);
  return interpreter.run(program, globals);
}

}  // namespace koi::tokenizer::jinja
