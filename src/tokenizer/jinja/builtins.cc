#include "tokenizer/jinja/builtins.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <functional>
#include <optional>
#include <unordered_map>

namespace koi::tokenizer::jinja {
namespace {

Status type_error(const std::string& message) { return Status::invalid_argument(message); }

// Python's str.isspace() for one code point.
bool is_py_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

// str.strip / lstrip / rstrip: `chars` undefined or none strips whitespace.
Result<std::string> py_strip(const std::string& s, const Value& chars, bool left, bool right) {
  if (!chars.is_undefined() && !chars.is_none() && !chars.is_string()) {
    return type_error("strip arg must be None or str, not " + chars.type_name());
  }
  std::u32string set = chars.is_string() ? utf8_decode(chars.as_string()) : U"";
  auto strip_it = [&](char32_t c) { return chars.is_string() ? set.find(c) != std::u32string::npos : is_py_space(c); };
  std::u32string cps = utf8_decode(s);
  size_t begin = 0;
  size_t end = cps.size();
  while (left && begin < end && strip_it(cps[begin])) ++begin;
  while (right && end > begin && strip_it(cps[end - 1])) --end;
  return utf8_encode(std::u32string_view(cps).substr(begin, end - begin));
}

// str.split(sep=None, maxsplit=-1).
Result<Value> py_split(const std::string& s, const Value& sep, const Value& maxsplit_value) {
  int64_t maxsplit = maxsplit_value.is_int() ? maxsplit_value.as_int() : -1;
  List parts;
  if (sep.is_undefined() || sep.is_none()) {
    std::u32string cps = utf8_decode(s);
    size_t i = 0;
    while (true) {
      while (i < cps.size() && is_py_space(cps[i])) ++i;
      if (i == cps.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
        size_t end = cps.size();
        while (end > i && is_py_space(cps[end - 1])) --end;
        parts.emplace_back(utf8_encode(std::u32string_view(cps).substr(i, end - i)));
        break;
      }
      size_t start = i;
      while (i < cps.size() && !is_py_space(cps[i])) ++i;
      parts.emplace_back(utf8_encode(std::u32string_view(cps).substr(start, i - start)));
    }
    return Value(std::move(parts));
  }
  if (!sep.is_string()) return type_error("must be str or None, not " + sep.type_name());
  const std::string& d = sep.as_string();
  if (d.empty()) return type_error("empty separator");
  size_t start = 0;
  while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
    size_t hit = s.find(d, start);
    if (hit == std::string::npos) break;
    parts.emplace_back(s.substr(start, hit - start));
    start = hit + d.size();
  }
  parts.emplace_back(s.substr(start));
  return Value(std::move(parts));
}

// str.replace(old, new, count=-1); an empty `old` inserts `new` around every character.
std::string py_replace(const std::string& s, const std::string& old, const std::string& with, int64_t count) {
  std::string out;
  if (old.empty()) {
    std::u32string cps = utf8_decode(s);
    int64_t done = 0;
    for (size_t i = 0; i <= cps.size(); ++i) {
      if (count < 0 || done < count) {
        out += with;
        ++done;
      }
      if (i < cps.size()) append_utf8(cps[i], &out);
    }
    return out;
  }
  size_t start = 0;
  for (int64_t done = 0; count < 0 || done < count; ++done) {
    size_t hit = s.find(old, start);
    if (hit == std::string::npos) break;
    out.append(s, start, hit - start);
    out += with;
    start = hit + old.size();
  }
  out.append(s, start, std::string::npos);
  return out;
}

// Case changes are ASCII-only (documented in chat_template.h).
std::string ascii_upper(std::string s) {
  for (char& c : s) {
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  }
  return s;
}
std::string ascii_lower(std::string s) {
  for (char& c : s) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return s;
}
std::string capitalize(const std::string& s) {
  std::string out = ascii_lower(s);
  if (!out.empty()) out[0] = ascii_upper(out.substr(0, 1))[0];
  return out;
}
// Jinja's title filter: upper-case the first letter of each word, lower-case the rest.
std::string title(const std::string& s) {
  std::string out;
  bool word_start = true;
  for (char c : s) {
    bool alnum = std::isalnum(static_cast<unsigned char>(c)) || (static_cast<unsigned char>(c) >= 0x80);
    out += word_start ? ascii_upper(std::string(1, c))[0] : ascii_lower(std::string(1, c))[0];
    word_start = !alnum;
  }
  return out;
}

bool starts_or_ends(const std::string& s, const Value& affix, bool start) {
  auto test = [&](const std::string& a) {
    if (a.size() > s.size()) return false;
    return start ? s.compare(0, a.size(), a) == 0 : s.compare(s.size() - a.size(), a.size(), a) == 0;
  };
  if (affix.is_list()) {
    for (const Value& a : affix.as_list()) {
      if (a.is_string() && test(a.as_string())) return true;
    }
    return false;
  }
  return affix.is_string() && test(affix.as_string());
}

// Python's str.format with "{}", "{0}" and "{name}" fields (no format specs).
Result<std::string> py_format(const std::string& s, Args& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '{' && i + 1 < s.size() && s[i + 1] == '{') {
      out += '{';
      ++i;
    } else if (s[i] == '}' && i + 1 < s.size() && s[i + 1] == '}') {
      out += '}';
      ++i;
    } else if (s[i] == '{') {
      size_t close = s.find('}', i);
      if (close == std::string::npos) return type_error("format: single '{' encountered in format string");
      std::string field = s.substr(i + 1, close - i - 1);
      const Value* v = nullptr;
      if (field.empty() || std::isdigit(static_cast<unsigned char>(field[0]))) {
        size_t index = field.empty() ? auto_index++ : std::strtoul(field.c_str(), nullptr, 10);
        if (index < args.positional.size()) v = &args.positional[index];
      } else {
        for (const auto& [k, val] : args.keyword) {
          if (k == field) v = &val;
        }
      }
      if (v == nullptr) return type_error("format: no argument for the field '{" + field + "}'");
      out += v->str();
      i = close;
    } else {
      out += s[i];
    }
  }
  return out;
}

Value bound(std::string name, std::function<Result<Value>(Args&)> fn) {
  return Value::callable(std::move(name), std::move(fn));
}

Result<Value> string_method(const std::string& s, const std::string& name) {
  using F = std::function<Result<Value>(Args&)>;
  F fn;
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    bool left = name != "rstrip";
    bool right = name != "lstrip";
    fn = [s, name, left, right](Args& args) -> Result<Value> {
      KOI_ASSIGN_OR_RETURN(auto a, bind_args(name, args, {"chars"}));
      KOI_ASSIGN_OR_RETURN(std::string out, py_strip(s, a[0], left, right));
      return Value(std::move(out));
    };
  } else if (name == "split") {
    fn = [s](Args& args) -> Result<Value> {
      KOI_ASSIGN_OR_RETURN(auto a, bind_args("split", args, {"sep", "maxsplit"}));
      return py_split(s, a[0], a[1]);
    };
  } else if (name == "startswith" || name == "endswith") {
    bool start = name == "startswith";
    fn = [s, start, name](Args& args) -> Result<Value> {
      KOI_ASSIGN_OR_RETURN(auto a, bind_args(name, args, {"prefix"}));
      return Value(starts_or_ends(s, a[0], start));
    };
  } else if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
    fn = [s, name](Args& args) -> Result<Value> {
      KOI_RETURN_IF_ERROR(bind_args(name, args, {}).status());
      if (name == "upper") return Value(ascii_upper(s));
      if (name == "lower") return Value(ascii_lower(s));
      if (name == "title") return Value(title(s));
      return Value(capitalize(s));
    };
  } else if (name == "replace") {
    fn = [s](Args& args) -> Result<Value> {
      KOI_ASSIGN_OR_RETURN(auto a, bind_args("replace", args, {"old", "new", "count"}));
      if (!a[0].is_string() || !a[1].is_string()) return type_error("replace() arguments must be str");
      return Value(py_replace(s, a[0].as_string(), a[1].as_string(), a[2].is_int() ? a[2].as_int() : -1));
    };
  } else if (name == "find" || name == "count") {
    bool find = name == "find";
    fn = [s, find, name](Args& args) -> Result<Value> {
      KOI_ASSIGN_OR_RETURN(auto a, bind_args(name, args, {"sub"}));
      if (!a[0].is_string()) return type_error(name + "() argument must be str");
      const std::string& sub = a[0].as_string();
      if (find) {
        size_t hit = s.find(sub);
        if (hit == std::string::npos) return Value(int64_t{-1});
        return Value(static_cast<int64_t>(utf8_decode(s.substr(0, hit)).size()));
      }
      if (sub.empty()) return Value(static_cast<int64_t>(utf8_decode(s).size() + 1));
      int64_t n = 0;
      for (size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + sub.size())) ++n;
      return Value(n);
    };
  } else if (name == "join") {
    fn = [s](Args& args) -> Result<Value> {
      KOI_ASSIGN_OR_RETURN(auto a, bind_args("join", args, {"iterable"}));
      KOI_ASSIGN_OR_RETURN(List items, iterate(a[0]));
      std::string out;
      for (size_t i = 0; i < items.size(); ++i) {
        if (!items[i].is_string()) return type_error("sequence item " + std::to_string(i) + ": expected str instance, " + items[i].type_name() + " found");
        if (i > 0) out += s;
        out += items[i].as_string();
      }
      return Value(std::move(out));
    };
  } else if (name == "format") {
    fn = [s](Args& args) -> Result<Value> {
      KOI_ASSIGN_OR_RETURN(std::string out, py_format(s, args));
      return Value(std::move(out));
    };
  } else {
    return Value::undefined("'str object' has no attribute '" + name + "'");
  }
  return bound("str." + name, std::move(fn));
}

Result<Value> dict_method(const Value& obj, const std::string& name) {
  if (name == "items" || name == "keys" || name == "values") {
    return bound("dict." + name, [obj, name](Args& args) -> Result<Value> {
      KOI_RETURN_IF_ERROR(bind_args(name, args, {}).status());
      List out;
      for (const auto& [k, v] : obj.as_dict().items) {
        if (name == "items") out.emplace_back(List{Value(k), v});
        if (name == "keys") out.emplace_back(k);
        if (name == "values") out.push_back(v);
      }
      return Value(std::move(out));
    });
  }
  return bound("dict.get", [obj](Args& args) -> Result<Value> {
    KOI_ASSIGN_OR_RETURN(auto a, bind_args("get", args, {"key", "default"}));
    const Value* v = a[0].is_string() ? obj.as_dict().find(a[0].as_string()) : nullptr;
    if (v != nullptr) return *v;
    return a[1].is_undefined() ? Value(None{}) : a[1];
  });
}

// Python's slice.indices() walk for a sequence of `length`.
Result<std::vector<int64_t>> slice_indices(int64_t length, const Value& start_v, const Value& stop_v,
                                           const Value& step_v) {
  auto as_index = [](const Value& v, const char* what) -> Result<std::optional<int64_t>> {
    if (v.is_undefined() || v.is_none()) return std::optional<int64_t>();
    if (v.is_int()) return std::optional<int64_t>(v.as_int());
    if (v.is_bool()) return std::optional<int64_t>(v.as_bool() ? 1 : 0);
    return type_error(std::string("slice ") + what + " must be an integer or none, not " + v.type_name());
  };
  KOI_ASSIGN_OR_RETURN(auto start_o, as_index(start_v, "start"));
  KOI_ASSIGN_OR_RETURN(auto stop_o, as_index(stop_v, "stop"));
  KOI_ASSIGN_OR_RETURN(auto step_o, as_index(step_v, "step"));
  int64_t step = step_o.value_or(1);
  if (step == 0) return type_error("slice step cannot be zero");
  auto clamp = [&](std::optional<int64_t> v, int64_t dflt) {
    if (!v) return dflt;
    int64_t i = *v < 0 ? *v + length : *v;
    if (step > 0) return std::clamp<int64_t>(i, 0, length);
    return std::clamp<int64_t>(i, -1, length - 1);
  };
  int64_t start = clamp(start_o, step > 0 ? 0 : length - 1);
  int64_t stop = clamp(stop_o, step > 0 ? length : -1);
  std::vector<int64_t> out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) out.push_back(i);
  return out;
}

Result<int64_t> to_int(const Value& v) {
  if (v.is_int()) return v.as_int();
  if (v.is_bool()) return int64_t{v.as_bool()};
  return type_error("expected an integer, got " + v.type_name());
}

// Applies `test_name` (with `test_args`) to each item; keeps those that pass == keep.
// attr: selectattr/rejectattr look at item.attr instead of the item.
Result<Value> select_items(const Value& input, const std::string& attr, Args& args, bool keep, bool by_attr) {
  KOI_ASSIGN_OR_RETURN(List items, iterate(input));
  size_t first_test_arg = by_attr ? 1 : 0;
  if (by_attr && args.positional.empty()) return type_error("selectattr/rejectattr need an attribute name");
  std::string test_name = args.positional.size() > first_test_arg && args.positional[first_test_arg].is_string()
                              ? args.positional[first_test_arg].as_string()
                              : "";
  List out;
  for (const Value& item : items) {
    Value subject = item;
    if (by_attr) {
      for (size_t start = 0; start <= attr.size();) {  // "a.b" walks nested attributes
        size_t dot = std::min(attr.find('.', start), attr.size());
        KOI_ASSIGN_OR_RETURN(subject, get_attr(subject, attr.substr(start, dot - start)));
        if (subject.is_undefined()) break;
        start = dot + 1;
      }
    }
    bool pass = false;
    if (test_name.empty()) {
      pass = subject.truthy();
    } else {
      Args test_args;
      for (size_t i = first_test_arg + 1; i < args.positional.size(); ++i) test_args.positional.push_back(args.positional[i]);
      KOI_ASSIGN_OR_RETURN(pass, apply_test(test_name, subject, test_args));
    }
    if (pass == keep) out.push_back(item);
  }
  return Value(std::move(out));
}

// Sort key comparison for sort/min/max: numbers by value, strings by code point.
Result<bool> less_than(const Value& a, const Value& b, bool case_sensitive) {
  if (a.is_number() && b.is_number()) return a.to_double() < b.to_double();
  if (a.is_string() && b.is_string()) {
    if (case_sensitive) return a.as_string() < b.as_string();
    return ascii_lower(a.as_string()) < ascii_lower(b.as_string());
  }
  return type_error("'<' not supported between instances of '" + a.type_name() + "' and '" + b.type_name() + "'");
}

using FilterFn = std::function<Result<Value>(const Value&, Args&)>;

const std::unordered_map<std::string, FilterFn>& filters() {
  static const auto* table = new std::unordered_map<std::string, FilterFn>{
      {"trim",
       [](const Value& in, Args& args) -> Result<Value> {
         KOI_ASSIGN_OR_RETURN(auto a, bind_args("trim", args, {"chars"}));
         KOI_ASSIGN_OR_RETURN(std::string out, py_strip(in.str(), a[0], true, true));
         return Value(std::move(out));
       }},
      {"length",
       [](const Value& in, Args& args) -> Result<Value> {
         KOI_RETURN_IF_ERROR(bind_args("length", args, {}).status());
         if (in.is_string()) return Value(static_cast<int64_t>(utf8_decode(in.as_string()).size()));
         if (in.is_list()) return Value(static_cast<int64_t>(in.as_list().size()));
         if (in.is_dict()) return Value(static_cast<int64_t>(in.as_dict().items.size()));
         if (in.is_undefined()) return Value(int64_t{0});
         return type_error("object of type '" + in.type_name() + "' has no len()");
       }},
      {"tojson",
       [](const Value& in, Args& args) -> Result<Value> {
         // Hugging Face's tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
         KOI_ASSIGN_OR_RETURN(auto a, bind_args("tojson", args, {"ensure_ascii", "indent", "separators", "sort_keys"}));
         JsonOptions o;
         o.ensure_ascii = a[0].truthy();
         if (a[1].is_int()) {
           o.has_indent = true;
           o.indent = std::string(static_cast<size_t>(std::clamp<int64_t>(a[1].as_int(), 0, 64)), ' ');
         } else if (a[1].is_string()) {
           o.has_indent = true;
           o.indent = a[1].as_string();
         }
         o.item_separator = o.has_indent ? "," : ", ";
         if (a[2].is_list() && a[2].as_list().size() == 2) {
           o.item_separator = a[2].as_list()[0].str();
           o.key_separator = a[2].as_list()[1].str();
         }
         o.sort_keys = a[3].truthy();
         KOI_ASSIGN_OR_RETURN(std::string json, to_json(in, o));
         return Value(std::move(json));
       }},
      {"string",
       [](const Value& in, Args& args) -> Result<Value> {
         KOI_RETURN_IF_ERROR(bind_args("string", args, {}).status());
         return Value(in.str());
       }},
      {"upper", [](const Value& in, Args&) -> Result<Value> { return Value(ascii_upper(in.str())); }},
      {"lower", [](const Value& in, Args&) -> Result<Value> { return Value(ascii_lower(in.str())); }},
      {"capitalize", [](const Value& in, Args&) -> Result<Value> { return Value(capitalize(in.str())); }},
      {"title", [](const Value& in, Args&) -> Result<Value> { return Value(title(in.str())); }},
      {"safe", [](const Value& in, Args&) -> Result<Value> { return in; }},
      {"escape",
       [](const Value& in, Args&) -> Result<Value> {
         std::string out;
         for (char c : in.str()) {
           switch (c) {
             case '&': out += "&amp;"; break;
             case '<': out += "&lt;"; break;
             case '>': out += "&gt;"; break;
             case '"': out += "&#34;"; break;
             case '\'': out += "&#39;"; break;
             default: out += c;
           }
         }
         return Value(std::move(out));
       }},
      {"default",
       [](const Value& in, Args& args) -> Result<Value> {
         KOI_ASSIGN_OR_RETURN(auto a, bind_args("default", args, {"default_value", "boolean"}));
         bool use_default = a[1].truthy() ? !in.truthy() : in.is_undefined();
         if (!use_default) return in;
         return a[0].is_undefined() ? Value("") : a[0];
       }},
      {"first",
       [](const Value& in, Args&) -> Result<Value> {
         KOI_ASSIGN_OR_RETURN(List items, iterate(in));
         return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
       }},
      {"last",
       [](const Value& in, Args&) -> Result<Value> {
         KOI_ASSIGN_OR_RETURN(List items, iterate(in));
         return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
       }},
      {"join",
       [](const Value& in, Args& args) -> Result<Value> {
         KOI_ASSIGN_OR_RETURN(auto a, bind_args("join", args, {"d", "attribute"}));
         KOI_ASSIGN_OR_RETURN(List items, iterate(in));
         std::string sep = a[0].is_undefined() ? "" : a[0].str();
         std::string out;
         for (size_t i = 0; i < items.size(); ++i) {
           if (i > 0) out += sep;
           Value item = items[i];
           if (!a[1].is_undefined()) {
             KOI_ASSIGN_OR_RETURN(item, get_attr(item, a[1].str()));
           }
           out += item.str();
         }
         return Value(std::move(out));
       }},
      {"replace",
       [](const Value& in, Args& args) -> Result<Value> {
         KOI_ASSIGN_OR_RETURN(auto a, bind_args("replace", args, {"old", "new", "count"}));
         return Value(py_replace(in.str(), a[0].str(), a[1].str(), a[2].is_int() ? a[2].as_int() : -1));
       }},
      {"items",
       [](const Value& in, Args&) -> Result<Value> {
         if (in.is_undefined()) return Value(List{});
         if (!in.is_dict()) return type_error("items filter: expected a mapping, got " + in.type_name());
         List out;
         for (const auto& [k, v] : in.as_dict().items) out.emplace_back(List{Value(k), v});
         return Value(std::move(out));
       }},
      {"list",
       [](const Value& in, Args&) -> Result<Value> {
         KOI_ASSIGN_OR_RETURN(List items, iterate(in));
         return Value(std::move(items));
       }},
      {"selectattr",
       [](const Value& in, Args& args) -> Result<Value> {
         return select_items(in, args.positional.empty() ? "" : args.positional[0].str(), args, true, true);
       }},
      {"rejectattr",
       [](const Value& in, Args& args) -> Result<Value> {
         return select_items(in, args.positional.empty() ? "" : args.positional[0].str(), args, false, true);
       }},
      {"select", [](const Value& in, Args& args) -> Result<Value> { return select_items(in, "", args, true, false); }},
      {"reject", [](const Value& in, Args& args) -> Result<Value> { return select_items(in, "", args, false, false); }},
      {"map",
       [](const Value& in, Args& args) -> Result<Value> {
         KOI_ASSIGN_OR_RETURN(List items, iterate(in));
         const Value* attribute = nullptr;
         const Value* fallback = nullptr;
         for (const auto& [k, v] : args.keyword) {
           if (k == "attribute") attribute = &v;
           if (k == "default") fallback = &v;
         }
         List out;
         for (const Value& item : items) {
           if (attribute != nullptr) {
             KOI_ASSIGN_OR_RETURN(Value v, get_attr(item, attribute->str()));
             out.push_back(v.is_undefined() && fallback != nullptr ? *fallback : v);
             continue;
           }
           if (args.positional.empty() || !args.positional[0].is_string()) return type_error("map: expected a filter name or attribute=");
           Args filter_args;
           filter_args.positional.assign(args.positional.begin() + 1, args.positional.end());
           KOI_ASSIGN_OR_RETURN(Value v, apply_filter(args.positional[0].as_string(), item, filter_args));
           out.push_back(std::move(v));
         }
         return Value(std::move(out));
       }},
      {"int",
       [](const Value& in, Args& args) -> Result<Value> {
         KOI_ASSIGN_OR_RETURN(auto a, bind_args("int", args, {"default", "base"}));
         Value fallback = a[0].is_undefined() ? Value(int64_t{0}) : a[0];
         if (in.is_int()) return in;
         if (in.is_bool()) return Value(int64_t{in.as_bool()});
         if (in.is_float()) return std::isfinite(in.as_float()) ? Value(static_cast<int64_t>(in.as_float())) : fallback;
         if (!in.is_string()) return fallback;
         std::string s = in.as_string();
         s.erase(0, s.find_first_not_of(" \t\n"));
         s.erase(s.find_last_not_of(" \t\n") + 1);
         int64_t v = 0;
         auto [ptr, ec] = std::from_chars(s.data() + (!s.empty() && s[0] == '+'), s.data() + s.size(), v);
         if (ec == std::errc() && ptr == s.data() + s.size() && !s.empty()) return Value(v);
         char* end = nullptr;
         double d = std::strtod(s.c_str(), &end);
         if (!s.empty() && end == s.c_str() + s.size() && std::isfinite(d)) return Value(static_cast<int64_t>(d));
         return fallback;
       }},
      {"float",
       [](const Value& in, Args& args) -> Result<Value> {
         KOI_ASSIGN_OR_RETURN(auto a, bind_args("float", args, {"default"}));
         if (in.is_number()) return Value(in.to_double());
         if (in.is_string()) {
           char* end = nullptr;
           double d = std::strtod(in.as_string().c_str(), &end);
           if (!in.as_string().empty() && end == in.as_string().c_str() + in.as_string().size()) return Value(d);
         }
         return a[0].is_undefined() ? Value(0.0) : a[0];
       }},
      {"round",
       [](const Value& in, Args& args) -> Result<Value> {
         KOI_ASSIGN_OR_RETURN(auto a, bind_args("round", args, {"precision", "method"}));
         if (!in.is_number()) return type_error("round: expected a number, got " + in.type_name());
         double scale = std::pow(10.0, a[0].is_int() ? static_cast<double>(a[0].as_int()) : 0.0);
         std::string method = a[1].is_string() ? a[1].as_string() : "common";
         double x = in.to_double() * scale;
         if (method == "common") {
           x = std::nearbyint(x);  // Python's round(): halves go to the even neighbour
         } else if (method == "ceil") {
           x = std::ceil(x);
         } else if (method == "floor") {
           x = std::floor(x);
         } else {
           return type_error("round: method must be 'common', 'ceil' or 'floor'");
         }
         return Value(x / scale);
       }},
      {"abs",
       [](const Value& in, Args&) -> Result<Value> {
         if (in.is_int() && in.as_int() != INT64_MIN) return Value(in.as_int() < 0 ? -in.as_int() : in.as_int());
         if (in.is_number()) return Value(std::fabs(in.to_double()));
         return type_error("bad operand type for abs(): '" + in.type_name() + "'");
       }},
      {"reverse",
       [](const Value& in, Args&) -> Result<Value> {
         if (in.is_string()) {
           std::u32string cps = utf8_decode(in.as_string());
           std::reverse(cps.begin(), cps.end());
           return Value(utf8_encode(cps));
         }
         KOI_ASSIGN_OR_RETURN(List items, iterate(in));
         std::reverse(items.begin(), items.end());
         return Value(std::move(items));
       }},
      {"sort",
       [](const Value& in, Args& args) -> Result<Value> {
         KOI_ASSIGN_OR_RETURN(auto a, bind_args("sort", args, {"reverse", "case_sensitive", "attribute"}));
         KOI_ASSIGN_OR_RETURN(List items, iterate(in));
         List keys;
         for (const Value& item : items) {
           Value key = item;
           if (!a[2].is_undefined()) {
             KOI_ASSIGN_OR_RETURN(key, get_attr(item, a[2].str()));
           }
           keys.push_back(key);
         }
         std::vector<size_t> order(items.size());
         for (size_t i = 0; i < order.size(); ++i) order[i] = i;
         Status status;
         std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
           auto r = a[0].truthy() ? less_than(keys[y], keys[x], a[1].truthy()) : less_than(keys[x], keys[y], a[1].truthy());
           if (!r.ok()) status = r.status();
           return r.ok() && *r;
         });
         KOI_RETURN_IF_ERROR(status);
         List out;
         for (size_t i : order) out.push_back(items[i]);
         return Value(std::move(out));
       }},
      {"unique",
       [](const Value& in, Args&) -> Result<Value> {
         KOI_ASSIGN_OR_RETURN(List items, iterate(in));
         List out;
         for (const Value& item : items) {
           bool seen = std::any_of(out.begin(), out.end(), [&](const Value& o) { return o.equals(item); });
           if (!seen) out.push_back(item);
         }
         return Value(std::move(out));
       }},
      {"indent",
       [](const Value& in, Args& args) -> Result<Value> {
         KOI_ASSIGN_OR_RETURN(auto a, bind_args("indent", args, {"width", "first", "blank"}));
         std::string pad = a[0].is_string() ? a[0].as_string() : std::string(a[0].is_int() ? std::clamp<int64_t>(a[0].as_int(), 0, 256) : 4, ' ');
         std::string s = in.str();
         std::string out;
         size_t start = 0;
         for (bool first_line = true; start <= s.size(); first_line = false) {
           size_t nl = std::min(s.find('\n', start), s.size());
           std::string line = s.substr(start, nl - start);
           bool indent_it = first_line ? a[1].truthy() : (a[2].truthy() || !line.empty());
           if (!first_line) out += '\n';
           out += (indent_it ? pad : "") + line;
           start = nl + 1;
         }
         return Value(std::move(out));
       }},
  };
  return *table;
}

const std::unordered_map<std::string, std::string>& filter_aliases() {
  static const auto* table = new std::unordered_map<std::string, std::string>{
      {"count", "length"}, {"d", "default"}, {"e", "escape"}};
  return *table;
}

using TestFn = std::function<Result<bool>(const Value&, const std::vector<Value>&)>;

Result<bool> compare_test(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return a.equals(b);
  if (op == "!=") return !a.equals(b);
  if (!(a.is_number() && b.is_number()) && !(a.is_string() && b.is_string())) {
    return type_error("'" + op + "' not supported between instances of '" + a.type_name() + "' and '" + b.type_name() + "'");
  }
  bool lt = a.is_number() ? a.to_double() < b.to_double() : a.as_string() < b.as_string();
  bool gt = a.is_number() ? a.to_double() > b.to_double() : a.as_string() > b.as_string();
  if (op == "<") return lt;
  if (op == "<=") return !gt;
  if (op == ">") return gt;
  return !lt;
}

Value arg0(const std::vector<Value>& a) { return a.empty() ? Value() : a[0]; }

const std::unordered_map<std::string, TestFn>& tests() {
  auto cmp = [](std::string op) {
    return [op](const Value& v, const std::vector<Value>& a) { return compare_test(op, v, arg0(a)); };
  };
  static const auto* table = new std::unordered_map<std::string, TestFn>{
      {"defined", [](const Value& v, const std::vector<Value>&) -> Result<bool> { return !v.is_undefined(); }},
      {"undefined", [](const Value& v, const std::vector<Value>&) -> Result<bool> { return v.is_undefined(); }},
      {"none", [](const Value& v, const std::vector<Value>&) -> Result<bool> { return v.is_none(); }},
      {"string", [](const Value& v, const std::vector<Value>&) -> Result<bool> { return v.is_string(); }},
      {"number", [](const Value& v, const std::vector<Value>&) -> Result<bool> { return v.is_number(); }},
      {"integer", [](const Value& v, const std::vector<Value>&) -> Result<bool> { return v.is_int(); }},
      {"float", [](const Value& v, const std::vector<Value>&) -> Result<bool> { return v.is_float(); }},
      {"boolean", [](const Value& v, const std::vector<Value>&) -> Result<bool> { return v.is_bool(); }},
      {"true", [](const Value& v, const std::vector<Value>&) -> Result<bool> { return v.is_bool() && v.as_bool(); }},
      {"false", [](const Value& v, const std::vector<Value>&) -> Result<bool> { return v.is_bool() && !v.as_bool(); }},
      {"mapping", [](const Value& v, const std::vector<Value>&) -> Result<bool> { return v.is_dict() && !v.as_dict().is_namespace; }},
      {"iterable",
       [](const Value& v, const std::vector<Value>&) -> Result<bool> {
         return v.is_string() || v.is_list() || (v.is_dict() && !v.as_dict().is_namespace) || v.is_undefined();
       }},
      {"sequence",
       [](const Value& v, const std::vector<Value>&) -> Result<bool> {
         return v.is_string() || v.is_list() || (v.is_dict() && !v.as_dict().is_namespace);
       }},
      {"callable", [](const Value& v, const std::vector<Value>&) -> Result<bool> { return v.is_callable(); }},
      {"odd",
       [](const Value& v, const std::vector<Value>&) -> Result<bool> {
         KOI_ASSIGN_OR_RETURN(int64_t i, to_int(v));
         return i % 2 != 0;
       }},
      {"even",
       [](const Value& v, const std::vector<Value>&) -> Result<bool> {
         KOI_ASSIGN_OR_RETURN(int64_t i, to_int(v));
         return i % 2 == 0;
       }},
      {"divisibleby",
       [](const Value& v, const std::vector<Value>& a) -> Result<bool> {
         KOI_ASSIGN_OR_RETURN(int64_t i, to_int(v));
         KOI_ASSIGN_OR_RETURN(int64_t d, to_int(arg0(a)));
         if (d == 0) return type_error("divisibleby: division by zero");
         return i % d == 0;
       }},
      {"lower", [](const Value& v, const std::vector<Value>&) -> Result<bool> { return v.is_string() && ascii_lower(v.as_string()) == v.as_string(); }},
      {"upper", [](const Value& v, const std::vector<Value>&) -> Result<bool> { return v.is_string() && ascii_upper(v.as_string()) == v.as_string(); }},
      {"in",
       [](const Value& v, const std::vector<Value>& a) -> Result<bool> {
         Value container = arg0(a);
         if (container.is_string()) return v.is_string() && container.as_string().find(v.as_string()) != std::string::npos;
         KOI_ASSIGN_OR_RETURN(List items, iterate(container));
         return std::any_of(items.begin(), items.end(), [&](const Value& item) { return item.equals(v); });
       }},
      {"sameas",
       [](const Value& v, const std::vector<Value>& a) -> Result<bool> {
         const Value other = arg0(a);
         if (v.is_dict() && other.is_dict()) return &v.as_dict() == &other.as_dict();
         return v.kind() == other.kind() && v.equals(other) && !v.is_list();
       }},
      {"==", cmp("==")}, {"eq", cmp("==")}, {"equalto", cmp("==")},
      {"!=", cmp("!=")}, {"ne", cmp("!=")},
      {"<", cmp("<")}, {"lt", cmp("<")}, {"lessthan", cmp("<")},
      {"<=", cmp("<=")}, {"le", cmp("<=")},
      {">", cmp(">")}, {"gt", cmp(">")}, {"greaterthan", cmp(">")},
      {">=", cmp(">=")}, {"ge", cmp(">=")},
  };
  return *table;
}

}  // namespace

Result<std::vector<Value>> bind_args(std::string_view what, Args& args, std::initializer_list<std::string_view> names) {
  std::vector<Value> out(names.size());
  if (args.positional.size() > names.size()) {
    return type_error(std::string(what) + "() takes at most " + std::to_string(names.size()) + " argument(s), got " +
                      std::to_string(args.positional.size()));
  }
  for (size_t i = 0; i < args.positional.size(); ++i) out[i] = args.positional[i];
  for (const auto& [key, value] : args.keyword) {
    auto it = std::find(names.begin(), names.end(), key);
    if (it == names.end()) return type_error(std::string(what) + "() got an unexpected keyword argument '" + key + "'");
    out[it - names.begin()] = value;
  }
  return out;
}

Result<Value> get_attr(const Value& obj, const std::string& name) {
  switch (obj.kind()) {
    case Value::Kind::kUndefined: return type_error(obj.undefined_message().empty() ? "undefined value has no attribute '" + name + "'" : obj.undefined_message());
    case Value::Kind::kDict: {
      const Dict& d = obj.as_dict();
      if (!d.is_namespace && (name == "items" || name == "keys" || name == "values" || name == "get")) {
        return dict_method(obj, name);
      }
      if (const Value* v = d.find(name)) return *v;
      return Value::undefined("'" + obj.type_name() + " object' has no attribute '" + name + "'");
    }
    case Value::Kind::kString: return string_method(obj.as_string(), name);
    case Value::Kind::kNone: return Value::undefined("'None' has no attribute '" + name + "'");
    default: return Value::undefined("'" + obj.type_name() + " object' has no attribute '" + name + "'");
  }
}

Result<Value> get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) return type_error(obj.undefined_message());
  if (obj.is_dict()) {
    if (key.is_string()) {
      if (const Value* v = obj.as_dict().find(key.as_string())) return *v;
      return Value::undefined("'" + obj.type_name() + " object' has no attribute '" + key.as_string() + "'");
    }
    return Value::undefined(obj.type_name() + " object has no element " + key.repr());
  }
  if ((obj.is_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    int64_t index = key.is_int() ? key.as_int() : int64_t{key.as_bool()};
    if (obj.is_list()) {
      int64_t n = static_cast<int64_t>(obj.as_list().size());
      int64_t i = index < 0 ? index + n : index;
      if (i >= 0 && i < n) return obj.as_list()[i];
    } else {
      std::u32string cps = utf8_decode(obj.as_string());
      int64_t n = static_cast<int64_t>(cps.size());
      int64_t i = index < 0 ? index + n : index;
      if (i >= 0 && i < n) return Value(utf8_encode(std::u32string(1, cps[i])));
    }
    return Value::undefined(obj.type_name() + " object has no element " + key.repr());
  }
  if (key.is_string()) return get_attr(obj, key.as_string());
  return Value::undefined(obj.type_name() + " object has no element " + key.repr());
}

Result<Value> get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  if (obj.is_list()) {
    const List& items = obj.as_list();
    KOI_ASSIGN_OR_RETURN(auto idx, slice_indices(static_cast<int64_t>(items.size()), start, stop, step));
    List out;
    for (int64_t i : idx) out.push_back(items[i]);
    return Value(std::move(out));
  }
  if (obj.is_string()) {
    std::u32string cps = utf8_decode(obj.as_string());
    KOI_ASSIGN_OR_RETURN(auto idx, slice_indices(static_cast<int64_t>(cps.size()), start, stop, step));
    std::string out;
    for (int64_t i : idx) append_utf8(cps[i], &out);
    return Value(std::move(out));
  }
  if (obj.is_undefined()) return type_error(obj.undefined_message());
  return type_error("'" + obj.type_name() + "' object is not subscriptable with a slice");
}

Result<List> iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return List{};
    case Value::Kind::kList: return v.as_list();
    case Value::Kind::kDict: {
      if (v.as_dict().is_namespace) break;
      List keys;
      for (const auto& item : v.as_dict().items) keys.emplace_back(item.first);
      return keys;
    }
    case Value::Kind::kString: {
      List chars;
      for (char32_t c : utf8_decode(v.as_string())) chars.emplace_back(utf8_encode(std::u32string(1, c)));
      return chars;
    }
    default: break;
  }
  return type_error("'" + v.type_name() + "' object is not iterable");
}

Result<Value> apply_filter(const std::string& name, const Value& input, Args& args) {
  auto alias = filter_aliases().find(name);
  auto it = filters().find(alias == filter_aliases().end() ? name : alias->second);
  if (it == filters().end()) return type_error("unknown filter '" + name + "'");
  return it->second(input, args);
}

Result<bool> apply_test(const std::string& name, const Value& input, Args& args) {
  auto it = tests().find(name);
  if (it == tests().end()) return type_error("unknown test '" + name + "'");
  if (!args.keyword.empty()) return type_error("test '" + name + "' takes no keyword arguments");
  return it->second(input, args.positional);
}

Result<Value> range_function(Args& args, int64_t max_items) {
  KOI_ASSIGN_OR_RETURN(auto a, bind_args("range", args, {"start", "stop", "step"}));
  int64_t start = 0;
  int64_t stop = 0;
  int64_t step = 1;
  if (a[1].is_undefined()) {
    KOI_ASSIGN_OR_RETURN(stop, to_int(a[0]));
  } else {
    KOI_ASSIGN_OR_RETURN(start, to_int(a[0]));
    KOI_ASSIGN_OR_RETURN(stop, to_int(a[1]));
    if (!a[2].is_undefined()) {
      KOI_ASSIGN_OR_RETURN(step, to_int(a[2]));
    }
  }
  if (step == 0) return type_error("range() arg 3 must not be zero");
  double count = std::ceil((static_cast<double>(stop) - static_cast<double>(start)) / static_cast<double>(step));
  if (count > static_cast<double>(max_items)) {
    return type_error("range() of " + std::to_string(static_cast<int64_t>(count)) + " items is over the limit of " + std::to_string(max_items));
  }
  List out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) out.emplace_back(i);
  return Value(std::move(out));
}

}  // namespace koi::tokenizer::jinja
