// Builtins of the Jinja interpreter: attribute and item access (with the string and dict
// methods chat templates call), Jinja's filters and tests, and the global functions that
// need no interpreter state. Python semantics throughout (code-point indices, negative
// indices, slices). Pure functions, thread-safe. Errors are Status values without a
// position; the interpreter adds "L:C: " in front.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "tokenizer/jinja/value.h"

namespace koi::tokenizer::jinja {

// obj.name: a dict's value (or its items/keys/values/get method), a string's method, or an
// undefined value that says what was missing. Fails on an undefined obj, as Jinja does.
Result<Value> get_attr(const Value& obj, const std::string& name);
// obj[key]: dict key, list or string index (negative from the end); missing -> undefined.
Result<Value> get_item(const Value& obj, const Value& key);
// obj[start:stop:step] of a list or string; absent parts are undefined or none.
Result<Value> get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step);

// The values a for loop walks: list items, dict keys, string characters; undefined -> none.
Result<List> iterate(const Value& v);

Result<Value> apply_filter(const std::string& name, const Value& input, Args& args);
Result<bool> apply_test(const std::string& name, const Value& input, Args& args);

// Binds call arguments Python-style to `names` (positional first, then keywords by name).
// Absent parameters come back undefined. `what` names the callee in errors.
Result<std::vector<Value>> bind_args(std::string_view what, Args& args, std::initializer_list<std::string_view> names);

// range(stop) / range(start, stop[, step]); at most max_items items.
Result<Value> range_function(Args& args, int64_t max_items);

}  // namespace koi::tokenizer::jinja
