#include "tokenizer/jinja/value.h"


#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "tokenizer/unicode.h"

namespace koi::tokenizer::jinja {

const Value* Dict::find(std::string_view key) const {
  for (const auto& [k, v] : items) {
    if (k == key) return &v;
  }
  return nullptr;
}

void Dict::set(std::string key, Value value) {
  nesting = std::max(nesting, value.nesting() + 1);
  for (auto& [k, v] : items) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(std::move(key), std::move(value));
}

Value::Value(List l) {
  auto box = std::make_shared<ListBox>();
  for (const Value& item : l) box->nesting = std::max(box->nesting, item.nesting() + 1);
  box->items = std::move(l);
  v_ = std::shared_ptr<const ListBox>(std::move(box));
}

Value Value::dict(Dict d) {
  for (const auto& item : d.items) d.nesting = std::max(d.nesting, item.second.nesting() + 1);
  return Value(std::make_shared<Dict>(std::move(d)));
}

int Value::nesting() const {
  if (is_list()) return std::get<std::shared_ptr<const ListBox>>(v_)->nesting;
  if (is_dict()) return as_dict().nesting;
  return 0;
}

double Value::to_double() const {
  if (is_int()) return static_cast<double>(as_int());
  if (is_bool()) return as_bool() ? 1.0 : 0.0;
  return as_float();
}

bool Value::truthy() const {
  switch (kind()) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool: return as_bool();
    case Kind::kInt: return as_int() != 0;
    case Kind::kFloat: return as_float() != 0.0;
    case Kind::kString: return !as_string().empty();
    case Kind::kList: return !as_list().empty();
    case Kind::kDict: return !as_dict().items.empty();
    case Kind::kCallable: return true;
  }
  return false;
}

bool Value::equals(const Value& other) const {
  if (is_number() && other.is_number()) {
    if (is_float() || other.is_float()) return to_double() == other.to_double();
    return (is_bool() ? int64_t{as_bool()} : as_int()) == (other.is_bool() ? int64_t{other.as_bool()} : other.as_int());
  }
  if (kind() != other.kind()) return false;
  switch (kind()) {
    case Kind::kUndefined:
    case Kind::kNone: return true;
    case Kind::kString: return as_string() == other.as_string();
    case Kind::kList: {
      const List& a = as_list();
      const List& b = other.as_list();
      if (a.size() != b.size()) return false;
      for (size_t i = 0; i < a.size(); ++i) {
        if (!a[i].equals(b[i])) return false;
      }
      return true;
    }
    case Kind::kDict: {
      const Dict& a = as_dict();
      const Dict& b = other.as_dict();
      if (&a == &b) return true;
      if (a.is_namespace || b.is_namespace) return false;  // namespaces compare by identity
      if (a.items.size() != b.items.size()) return false;
      for (const auto& [k, v] : a.items) {
        const Value* w = b.find(k);
        if (w == nullptr || !v.equals(*w)) return false;
      }
      return true;
    }
    case Kind::kCallable: return &as_callable() == &other.as_callable();
    default: return false;
  }
}

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  // Shortest round-trip digits in scientific form: "-1.2345e+02".
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, end);
  size_t e_pos = sci.find('e');
  int exponent = std::stoi(sci.substr(e_pos + 1));
  std::string mantissa = sci.substr(0, e_pos);
  bool negative = mantissa[0] == '-';
  if (negative) mantissa.erase(0, 1);
  std::string digits;
  for (char c : mantissa) {
    if (c != '.') digits += c;
  }
  std::string out = negative ? "-" : "";
  // Python's repr switches to exponent notation outside 1e-4 <= |d| < 1e16.
  if (exponent < -4 || exponent >= 16) {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char exp_buf[16];
    std::snprintf(exp_buf, sizeof(exp_buf), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    return out + exp_buf;
  }
  if (exponent < 0) return out + "0." + std::string(-exponent - 1, '0') + digits;
  if (digits.size() <= static_cast<size_t>(exponent) + 1) {
    return out + digits + std::string(exponent + 1 - digits.size(), '0') + ".0";
  }
  return out + digits.substr(0, exponent + 1) + "." + digits.substr(exponent + 1);
}

std::string Value::str(int depth) const {
  // A namespace may hold itself; past the nesting limit print "..." as Python does for cycles.
  if (depth > kMaxValueNesting) return "...";
  switch (kind()) {
    case Kind::kUndefined: return "";
    case Kind::kNone: return "None";
    case Kind::kBool: return as_bool() ? "True" : "False";
    case Kind::kInt: return std::to_string(as_int());
    case Kind::kFloat: return float_repr(as_float());
    case Kind::kString: return as_string();
    case Kind::kList: {
      std::string out = "[";
      for (size_t i = 0; i < as_list().size(); ++i) {
        if (i > 0) out += ", ";
        out += as_list()[i].repr(depth + 1);
      }
      return out + "]";
    }
    case Kind::kDict: {
      const Dict& d = as_dict();
      if (d.is_namespace) return "<Namespace>";
      std::string out = "{";
      for (size_t i = 0; i < d.items.size(); ++i) {
        if (i > 0) out += ", ";
        out += Value(d.items[i].first).repr(depth + 1) + ": " + d.items[i].second.repr(depth + 1);
      }
      return out + "}";
    }
    case Kind::kCallable: return "<function " + as_callable().name + ">";
  }
  return "";
}

std::string Value::repr(int depth) const {
  if (!is_string()) return str(depth);
  const std::string& s = as_string();
  // Python picks single quotes unless the text has a ' and no ".
  char quote = (s.find('\'') != std::string::npos && s.find('"') == std::string::npos) ? '"' : '\'';
  std::string out(1, quote);
  for (unsigned char c : s) {
    if (c == quote || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + quote;
}

std::string Value::type_name() const {
  switch (kind()) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kNone: return "NoneType";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "str";
    case Kind::kList: return "list";
    case Kind::kDict: return as_dict().is_namespace ? "Namespace" : "dict";
    case Kind::kCallable: return "function";
  }
  return "";
}

namespace {

void append_json_string(std::string_view s, bool ensure_ascii, std::string* out) {
  auto append_escape = [out](uint32_t unit) {
    char buf[16];
    std::snprintf(buf, sizeof(buf), "\\u%04x", unit);
    *out += buf;
  };
  *out += '"';
  for (size_t pos = 0; pos < s.size();) {
    auto c = static_cast<unsigned char>(s[pos]);
    if (c >= 0x80) {
      if (!ensure_ascii) {
        *out += s[pos++];
        continue;
      }
      char32_t cp = utf8_next(s, &pos);
      if (cp < 0x10000) {
        append_escape(cp);
      } else {
        append_escape(0xd800 + ((cp - 0x10000) >> 10));
        append_escape(0xdc00 + ((cp - 0x10000) & 0x3ff));
      }
      continue;
    }
    ++pos;
    switch (c) {
      case '"': *out += "\\\""; break;
      case '\\': *out += "\\\\"; break;
      case '\n': *out += "\\n"; break;
      case '\r': *out += "\\r"; break;
      case '\t': *out += "\\t"; break;
      case '\b': *out += "\\b"; break;
      case '\f': *out += "\\f"; break;
      default:
        if (c < 0x20) {
          append_escape(c);
        } else {
          *out += static_cast<char>(c);
        }
    }
  }
  *out += '"';
}

Status append_json(const Value& v, const JsonOptions& o, int depth, std::string* out) {
  if (depth > kMaxValueNesting) return Status::invalid_argument("tojson: value nested too deeply (or holds itself)");
  auto newline = [&](int level) {
    if (!o.has_indent) return;
    *out += '\n';
    for (int i = 0; i < level; ++i) *out += o.indent;
  };
  switch (v.kind()) {
    case Value::Kind::kNone: *out += "null"; return ok_status();
    case Value::Kind::kBool: *out += v.as_bool() ? "true" : "false"; return ok_status();
    case Value::Kind::kInt: *out += std::to_string(v.as_int()); return ok_status();
    case Value::Kind::kFloat: {
      double d = v.as_float();
      *out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d < 0 ? "-Infinity" : "Infinity") : float_repr(d);
      return ok_status();
    }
    case Value::Kind::kString: append_json_string(v.as_string(), o.ensure_ascii, out); return ok_status();
    case Value::Kind::kList: {
      const List& list = v.as_list();
      if (list.empty()) {
        *out += "[]";
        return ok_status();
      }
      *out += '[';
      for (size_t i = 0; i < list.size(); ++i) {
        if (i > 0) *out += o.item_separator;
        newline(depth + 1);
        KOI_RETURN_IF_ERROR(append_json(list[i], o, depth + 1, out));
      }
      newline(depth);
      *out += ']';
      return ok_status();
    }
    case Value::Kind::kDict: {
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& item : v.as_dict().items) items.push_back(&item);
      if (items.empty()) {
        *out += "{}";
        return ok_status();
      }
      if (o.sort_keys) {
        std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) { return a->first < b->first; });
      }
      *out += '{';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) *out += o.item_separator;
        newline(depth + 1);
        append_json_string(items[i]->first, o.ensure_ascii, out);
        *out += o.key_separator;
        KOI_RETURN_IF_ERROR(append_json(items[i]->second, o, depth + 1, out));
      }
      newline(depth);
      *out += '}';
      return ok_status();
    }
    case Value::Kind::kUndefined:
    case Value::Kind::kCallable:
      return Status::invalid_argument("tojson: object of type " + v.type_name() + " is not JSON serializable");
  }
  return ok_status();
}

}  // namespace

Result<std::string> to_json(const Value& v, const JsonOptions& options) {
  std::string out;
  KOI_RETURN_IF_ERROR(append_json(v, options, 0, &out));
  return out;
}

char32_t utf8_next(std::string_view s, size_t* pos) {
  auto c = static_cast<unsigned char>(s[*pos]);
  size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
  char32_t cp = len == 1 ? c : len == 2 ? (c & 0x1f) : len == 3 ? (c & 0x0f) : (c & 0x07);
  bool valid = len > 0 && *pos + len <= s.size();
  for (size_t k = 1; valid && k < len; ++k) {
    auto cont = static_cast<unsigned char>(s[*pos + k]);
    valid = (cont & 0xc0) == 0x80;
    cp = (cp << 6) | (cont & 0x3f);
  }
  if (!valid) {
    ++*pos;
    return U'\uFFFD';
  }
  *pos += len;
  return cp;
}

std::u32string utf8_decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t pos = 0; pos < s.size();) out += utf8_next(s, &pos);
  return out;
}

void append_utf8(char32_t cp, std::string* out) { *out += encode_utf8(static_cast<uint32_t>(cp)); }

std::string utf8_encode(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t cp : s) append_utf8(cp, &out);
  return out;
}

}  // namespace koi::tokenizer::jinja
