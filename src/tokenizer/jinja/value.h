// Value: the dynamic value of the Jinja interpreter, with Python's semantics for the
// operations chat templates use (truthiness, ==, str(), repr(), json.dumps()).
//
// Kinds: undefined (a missing variable or attribute; carries the message Jinja would give
// when it is used), none, bool, int (int64), float, string (UTF-8 bytes; lengths and
// indices count code points as Python does), list, dict (string keys, insertion-ordered)
// and callable (builtins, macros, bound methods). Lists and dicts are shared and immutable
// once built, as in Hugging Face's ImmutableSandboxedEnvironment; the one mutable object
// is a namespace() dict, changed only by `{% set ns.attr = ... %}`.
// Values are cheap to copy (containers are shared). A Value is not thread-safe to mutate;
// the values of one render belong to that render.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "base/status.h"

namespace koi::tokenizer::jinja {

class Value;

struct Undefined {
  std::string message;  // "'x' is undefined", "'dict object' has no attribute 'y'"
};
struct None {};

using List = std::vector<Value>;

// How deeply lists and dicts may nest; deeper values are refused where they are built, so
// that printing, comparing and freeing them never recurses without bound.
inline constexpr int kMaxValueNesting = 256;

struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  bool is_namespace = false;
  int nesting = 1;  // 1 + the deepest nesting of a value (grows with set())

  const Value* find(std::string_view key) const;
  void set(std::string key, Value value);  // replaces in place or appends
};

struct ListBox {
  List items;
  int nesting = 1;
};

// Arguments of a call: positional, then keyword (in source order).
struct Args {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

struct Callable {
  std::string name;
  std::function<Result<Value>(Args&)> fn;
  // False: fn's errors lack a position, the caller adds one. True: they are final (macros,
  // which report their own positions, and raise_exception, whose message is the user's).
  bool final_errors = false;
};

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kCallable };

  Value() : v_(Undefined{}) {}
  Value(None) : v_(None{}) {}  // NOLINT
  Value(bool b) : v_(b) {}  // NOLINT
  Value(int64_t i) : v_(i) {}  // NOLINT
  Value(int i) : v_(int64_t{i}) {}  // NOLINT
  Value(double d) : v_(d) {}  // NOLINT
  Value(std::string s) : v_(std::move(s)) {}  // NOLINT
  Value(const char* s) : v_(std::string(s)) {}  // NOLINT
  Value(List l);  // NOLINT
  Value(std::shared_ptr<Dict> d) : v_(std::move(d)) {}  // NOLINT
  Value(std::shared_ptr<const Callable> c) : v_(std::move(c)) {}  // NOLINT
  static Value undefined(std::string message) { Value v; v.v_ = Undefined{std::move(message)}; return v; }
  static Value dict(Dict d);  // computes d.nesting
  static Value callable(std::string name, std::function<Result<Value>(Args&)> fn, bool final_errors = false) {
    return Value(std::make_shared<const Callable>(Callable{std::move(name), std::move(fn), final_errors}));
  }

  Kind kind() const { return static_cast<Kind>(v_.index()); }
  bool is_undefined() const { return kind() == Kind::kUndefined; }
  bool is_none() const { return kind() == Kind::kNone; }
  bool is_bool() const { return kind() == Kind::kBool; }
  bool is_int() const { return kind() == Kind::kInt; }
  bool is_float() const { return kind() == Kind::kFloat; }
  bool is_number() const { return is_int() || is_float() || is_bool(); }  // Python: bool is a Number
  bool is_string() const { return kind() == Kind::kString; }
  bool is_list() const { return kind() == Kind::kList; }
  bool is_dict() const { return kind() == Kind::kDict; }
  bool is_callable() const { return kind() == Kind::kCallable; }

  bool as_bool() const { return std::get<bool>(v_); }
  int64_t as_int() const { return std::get<int64_t>(v_); }
  double as_float() const { return std::get<double>(v_); }
  double to_double() const;  // int, float or bool as a double
  const std::string& as_string() const { return std::get<std::string>(v_); }
  const List& as_list() const { return std::get<std::shared_ptr<const ListBox>>(v_)->items; }
  const Dict& as_dict() const { return *std::get<std::shared_ptr<Dict>>(v_); }
  Dict& mutable_dict() const { return *std::get<std::shared_ptr<Dict>>(v_); }
  const Callable& as_callable() const { return *std::get<std::shared_ptr<const Callable>>(v_); }
  const std::string& undefined_message() const { return std::get<Undefined>(v_).message; }
  // 0 for scalars; 1 + the deepest item for lists and dicts.
  int nesting() const;

  // Python bool(x).
  bool truthy() const;
  // Python ==, with 1 == 1.0 == True and element-wise containers.
  bool equals(const Value& other) const;
  // Jinja's {{ x }} and |string: Python str(x); undefined prints as "".
  std::string str() const { return str(0); }
  // Python repr(x), used for the items of a printed list or dict.
  std::string repr() const { return repr(0); }
  // "str", "int", "dict", ... as Python names the type (for error messages).
  std::string type_name() const;

 private:
  std::string str(int depth) const;
  std::string repr(int depth) const;

  std::variant<Undefined, None, bool, int64_t, double, std::string, std::shared_ptr<const ListBox>,
               std::shared_ptr<Dict>, std::shared_ptr<const Callable>>
      v_;
};

// Python repr() of a float: the shortest text that reads back the same ("0.1", "1e-05",
// "3.0", "inf", "nan").
std::string float_repr(double d);

struct JsonOptions {
  std::string indent;          // "" with has_indent = false: one line
  bool has_indent = false;
  std::string item_separator;  // ", " on one line, "," when indented (Python's defaults)
  std::string key_separator = ": ";
  bool sort_keys = false;
  bool ensure_ascii = false;   // Hugging Face's tojson keeps non-ASCII text as is
};
// Python json.dumps(x, ...) as Hugging Face's tojson filter calls it. Undefined and
// callables cannot be serialized (an error).
Result<std::string> to_json(const Value& v, const JsonOptions& options);

// UTF-8 helpers: code points of a string and back. Invalid bytes decode as U+FFFD.
std::u32string utf8_decode(std::string_view s);
// The code point at *pos; advances *pos past it (one byte for an invalid one).
char32_t utf8_next(std::string_view s, size_t* pos);
std::string utf8_encode(std::u32string_view s);
void append_utf8(char32_t cp, std::string* out);

}  // namespace koi::tokenizer::jinja
