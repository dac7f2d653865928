#include "grammar/json_schema.h"

#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "grammar/regex.h"

namespace koi::grammar {

namespace json = boost::json;

namespace {

constexpr double kMaxBound = 1e15;  // bounds beyond this are not exact in a double

// Keywords that only describe; they never constrain.
const std::set<std::string> kAnnotations = {"title", "description", "default", "examples", "$schema", "$id",
                                            "$comment", "deprecated", "readOnly", "writeOnly", "$defs",
                                            "definitions"};
const std::set<std::string> kKnown = {"type", "enum", "const", "anyOf", "allOf", "$ref", "properties", "required",
                                      "additionalProperties", "items", "prefixItems", "minItems", "maxItems",
                                      "uniqueItems", "minLength", "maxLength", "pattern", "format", "minimum",
                                      "maximum", "exclusiveMinimum", "exclusiveMaximum"};

// Formats as regular expressions over the decoded string; day numbers stop at 28 so that
// every generated date exists.
const std::map<std::string, std::string> kFormats = {
    {"date", "^\\d{4}-(0[1-9]|1[0-2])-(0[1-9]|1\\d|2[0-8])$"},
    {"time", "^([01]\\d|2[0-3]):[0-5]\\d:[0-5]\\d(\\.\\d{1,6})?(Z|[+-]([01]\\d|2[0-3]):[0-5]\\d)$"},
    {"date-time",
     "^\\d{4}-(0[1-9]|1[0-2])-(0[1-9]|1\\d|2[0-8])T([01]\\d|2[0-3]):[0-5]\\d:[0-5]\\d(\\.\\d{1,6})?(Z|[+-]([01]\\d|2[0-3]):"
     "[0-5]\\d)$"},
    {"uuid", "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"},
    {"email", "^[a-z0-9]{1,20}(\\.[a-z0-9]{1,20}){0,2}@[a-z0-9]{1,20}(\\.[a-z0-9]{1,20}){0,2}\\.[a-z]{2,6}$"},
    {"ipv4", "^((25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)\\.){3}(25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)$"},
};

std::string digits_of(int64_t v) { return std::to_string(v); }

class SchemaCompiler {
 public:
  explicit SchemaCompiler(const json::value& root) : root_(&root) {}

  Result<Grammar> compile() {
    const int32_t root = b_.new_rule("root");
    KOI_ASSIGN_OR_RETURN(Element value, schema(*root_, ""));
    b_.add_alternative(root, {opt_space(), value});
    return std::move(b_).build(root);
  }

  Result<Grammar> tool_calls(const std::vector<ToolSchema>& tools, std::string_view prefix, std::string_view args_key,
                             std::string_view suffix) {
    const int32_t root = b_.new_rule("root");
    for (const ToolSchema& tool : tools) {
      Element args = any_object_rule();
      root_ = &tool.parameters;
      refs_.clear();
      if (!tool.parameters.is_null()) {
        auto compiled = schema(tool.parameters, "");
        if (!compiled.ok()) {
          return Status::invalid_argument(fmt::format("tool '{}': {}", tool.name, compiled.status().message()));
        }
        args = *compiled;
      }
      Sequence seq = b_.literal(std::string(prefix) + "{\"name\": " + json::serialize(json::string(tool.name)) + ", " +
                                json::serialize(json::string(args_key)) + ": ");
      seq.push_back(args);
      for (Element e : b_.literal("}" + std::string(suffix))) seq.push_back(e);
      b_.add_alternative(root, std::move(seq));
    }
    return std::move(b_).build(root);
  }

  Result<Grammar> any_object() {
    const int32_t root = b_.new_rule("root");
    b_.add_alternative(root, {opt_space(), any_object_rule()});
    return std::move(b_).build(root);
  }

 private:
  static Status error(const std::string& path, std::string message) {
    return Status::invalid_argument(fmt::format("{} at {}", message, path.empty() ? "/" : path));
  }

  Element opt_space() {
    if (!space_) {
      const int32_t r = b_.new_rule("ws");
      b_.add_alternative(r, b_.literal(" "));
      b_.add_alternative(r, {});
      space_ = b_.rule(r);
    }
    return *space_;
  }
  Sequence comma() { return {b_.byte(','), opt_space()}; }
  Sequence colon() { return {b_.byte(':'), opt_space()}; }

  Element json_char() {
    if (!json_char_) json_char_ = b_.codepoints({{0, 0x10FFFF}}, /*json_string=*/true);
    return *json_char_;
  }
  Element any_string() {
    if (!any_string_) {
      Element content = b_.repeat("string-chars", {json_char()}, 0, -1).value();
      any_string_ = b_.choice("string", {{b_.byte('"'), content, b_.byte('"')}});
    }
    return *any_string_;
  }
  Element digit(char lo = '0', char hi = '9') {
    ByteSet s;
    s.set_range(static_cast<uint8_t>(lo), static_cast<uint8_t>(hi));
    return b_.bytes(s);
  }
  Element fraction() {
    if (!fraction_) {
      Element digits = b_.repeat("digits", {digit()}, 1, -1).value();
      const int32_t r = b_.new_rule("fraction");
      b_.add_alternative(r, {b_.byte('.'), digits});
      b_.add_alternative(r, {});
      fraction_ = b_.rule(r);
    }
    return *fraction_;
  }
  Element any_integer() {
    if (!any_integer_) {
      Element more = b_.repeat("digits", {digit()}, 0, -1).value();
      const int32_t minus = b_.new_rule("sign");
      b_.add_alternative(minus, b_.literal("-"));
      b_.add_alternative(minus, {});
      Element magnitude = b_.choice("magnitude", {{b_.byte('0')}, {digit('1', '9'), more}});
      any_integer_ = b_.choice("integer", {{b_.rule(minus), magnitude}});
    }
    return *any_integer_;
  }
  Element any_number() {
    if (!any_number_) any_number_ = b_.choice("number", {{any_integer(), fraction()}});
    return *any_number_;
  }
  Element any_value() {
    if (!any_value_) {
      const int32_t r = b_.new_rule("value");
      any_value_ = b_.rule(r);
      b_.add_alternative(r, {any_object_rule()});
      b_.add_alternative(r, {any_array_rule()});
      b_.add_alternative(r, {any_string()});
      b_.add_alternative(r, {any_number()});
      for (const char* lit : {"true", "false", "null"}) b_.add_alternative(r, b_.literal(lit));
    }
    return *any_value_;
  }
  Element any_object_rule() {
    if (!any_object_) {
      const int32_t r = b_.new_rule("object");
      any_object_ = b_.rule(r);
      b_.add_alternative(r, map_of(any_value()));
    }
    return *any_object_;
  }
  Element any_array_rule() {
    if (!any_array_) {
      const int32_t r = b_.new_rule("array");
      any_array_ = b_.rule(r);
      b_.add_alternative(r, list_of(any_value(), 0, -1).value());
    }
    return *any_array_;
  }
  // "{" (string ":" value ("," string ":" value)*)? "}"
  Sequence map_of(Element value) {
    Sequence kv = {any_string()};
    for (Element e : colon()) kv.push_back(e);
    kv.push_back(value);
    Sequence more = comma();
    more.insert(more.end(), kv.begin(), kv.end());
    Element rest = b_.repeat("members", more, 0, -1).value();
    kv.push_back(rest);
    const int32_t body = b_.new_rule("members-opt");
    b_.add_alternative(body, kv);
    b_.add_alternative(body, {});
    return {b_.byte('{'), b_.rule(body), b_.byte('}')};
  }
  // "[" item ("," item){min-1,max-1} "]", the items optional when min is 0.
  Result<Sequence> list_of(Element item, int min, int max) {
    if (max == 0) return b_.literal("[]");
    Sequence more = comma();
    more.push_back(item);
    KOI_ASSIGN_OR_RETURN(Element rest, b_.repeat("items", more, std::max(min - 1, 0), max < 0 ? -1 : max - 1));
    const int32_t body = b_.new_rule("items-body");
    b_.add_alternative(body, {item, rest});
    if (min == 0) b_.add_alternative(body, {});
    return Sequence{b_.byte('['), b_.rule(body), b_.byte(']')};
  }

  Result<Element> schema(const json::value& s, const std::string& path) {
    if (s.is_bool()) {
      if (s.as_bool()) return any_value();
      return error(path, "the schema 'false' matches nothing");
    }
    if (!s.is_object()) return error(path, "a schema must be an object or a boolean");
    const json::object& o = s.as_object();
    for (const auto& kv : o) {
      const std::string key(kv.key());
      if (kAnnotations.count(key)) continue;
      if (!kKnown.count(key)) return error(path, fmt::format("unsupported keyword '{}'", key));
    }
    if (const json::value* ref = o.if_contains("$ref")) return reference(*ref, o, path);
    if (const json::value* c = o.if_contains("const")) return literal_value(*c);
    if (const json::value* e = o.if_contains("enum")) return enumeration(*e, path);
    if (const json::value* any = o.if_contains("anyOf")) return any_of(*any, o, path);
    if (const json::value* all = o.if_contains("allOf")) {
      if (!all->is_array() || all->as_array().size() != 1 || o.size() != 1 + annotations(o)) {
        return error(path, "unsupported keyword 'allOf' (only a single-schema allOf is supported)");
      }
      return schema(all->as_array()[0], path + "/allOf/0");
    }
    std::vector<std::string> types;
    if (const json::value* t = o.if_contains("type")) {
      if (t->is_string()) {
        types.push_back(std::string(t->as_string()));
      } else if (t->is_array() && !t->as_array().empty()) {
        for (const auto& x : t->as_array()) {
          if (!x.is_string()) return error(path + "/type", "'type' must be a string or an array of strings");
          types.push_back(std::string(x.as_string()));
        }
      } else {
        return error(path + "/type", "'type' must be a string or a non-empty array of strings");
      }
    } else if (o.contains("properties") || o.contains("required") || o.contains("additionalProperties")) {
      types = {"object"};
    } else if (o.contains("items") || o.contains("prefixItems") || o.contains("minItems") || o.contains("maxItems")) {
      types = {"array"};
    } else if (o.contains("pattern") || o.contains("minLength") || o.contains("maxLength") || o.contains("format")) {
      types = {"string"};
    } else if (o.contains("minimum") || o.contains("maximum") || o.contains("exclusiveMinimum") ||
               o.contains("exclusiveMaximum")) {
      types = {"number"};
    } else {
      return any_value();
    }
    std::vector<Sequence> alternatives;
    for (const std::string& type : types) {
      KOI_ASSIGN_OR_RETURN(Element e, typed(type, o, path));
      alternatives.push_back({e});
    }
    return b_.choice("schema", std::move(alternatives));
  }

  static size_t annotations(const json::object& o) {
    size_t n = 0;
    for (const auto& kv : o) n += kAnnotations.count(std::string(kv.key()));
    return n;
  }

  Result<Element> typed(const std::string& type, const json::object& o, const std::string& path) {
    if (type == "string") return string_schema(o, path);
    if (type == "integer") return number_schema(o, path, /*integer=*/true);
    if (type == "number") return number_schema(o, path, /*integer=*/false);
    if (type == "boolean") return b_.choice("boolean", {b_.literal("true"), b_.literal("false")});
    if (type == "null") return b_.choice("null", {b_.literal("null")});
    if (type == "object") return object_schema(o, path);
    if (type == "array") return array_schema(o, path);
    return error(path + "/type", fmt::format("unknown type '{}'", type));
  }

  Result<Element> reference(const json::value& ref, const json::object& o, const std::string& path) {
    if (!ref.is_string() || !ref.as_string().starts_with("#")) {
      return error(path + "/$ref", "'$ref' must be a local reference such as '#/$defs/Name'");
    }
    if (o.size() != 1 + annotations(o)) {
      return error(path, "keywords beside '$ref' are not supported; move them into the referenced schema");
    }
    const std::string target(ref.as_string());
    auto it = refs_.find(target);
    if (it != refs_.end()) return b_.rule(it->second);
    const std::string pointer = target.substr(1);
    boost::system::error_code ec;
    const json::value* resolved = pointer.empty() ? root_ : root_->find_pointer(pointer, ec);
    if (!resolved || ec) return error(path + "/$ref", fmt::format("'$ref' '{}' does not resolve in this schema", target));
    const int32_t rule = b_.new_rule("ref");
    refs_.emplace(target, rule);  // before compiling it: recursive schemas refer back to it
    KOI_ASSIGN_OR_RETURN(Element body, schema(*resolved, pointer));
    b_.add_alternative(rule, {body});
    return b_.rule(rule);
  }

  Element literal_value(const json::value& v) { return b_.choice("const", {b_.literal(json::serialize(v))}); }

  Result<Element> enumeration(const json::value& e, const std::string& path) {
    if (!e.is_array() || e.as_array().empty()) return error(path + "/enum", "'enum' must be a non-empty array");
    std::vector<Sequence> alternatives;
    for (const auto& v : e.as_array()) alternatives.push_back(b_.literal(json::serialize(v)));
    return b_.choice("enum", std::move(alternatives));
  }

  Result<Element> any_of(const json::value& any, const json::object& o, const std::string& path) {
    if (!any.is_array() || any.as_array().empty()) return error(path + "/anyOf", "'anyOf' must be a non-empty array");
    if (o.size() != 1 + annotations(o)) {
      return error(path, "keywords beside 'anyOf' are not supported; move them into each alternative");
    }
    std::vector<Sequence> alternatives;
    for (size_t i = 0; i < any.as_array().size(); ++i) {
      KOI_ASSIGN_OR_RETURN(Element e, schema(any.as_array()[i], fmt::format("{}/anyOf/{}", path, i)));
      alternatives.push_back({e});
    }
    return b_.choice("any-of", std::move(alternatives));
  }

  // A non-negative integer keyword, or `fallback` when absent.
  Result<int> count_keyword(const json::object& o, const char* key, int fallback, const std::string& path) {
    const json::value* v = o.if_contains(key);
    if (!v) return fallback;
    if (!v->is_int64() && !v->is_uint64()) return error(path + "/" + key, fmt::format("'{}' must be an integer", key));
    const int64_t x = v->is_int64() ? v->as_int64() : static_cast<int64_t>(v->as_uint64());
    if (x < 0 || x > GrammarBuilder::kMaxRepeat) {
      return error(path + "/" + key, fmt::format("'{}' must be between 0 and {}", key, GrammarBuilder::kMaxRepeat));
    }
    return static_cast<int>(x);
  }

  Result<Element> string_schema(const json::object& o, const std::string& path) {
    KOI_ASSIGN_OR_RETURN(int min_length, count_keyword(o, "minLength", 0, path));
    KOI_ASSIGN_OR_RETURN(int max_length, count_keyword(o, "maxLength", -1, path));
    if (max_length >= 0 && max_length < min_length) return error(path, "'maxLength' is below 'minLength'");
    const json::value* pattern = o.if_contains("pattern");
    const json::value* format = o.if_contains("format");
    const bool lengths = o.contains("minLength") || o.contains("maxLength");
    if ((pattern || format) && lengths) {
      return error(path, "'minLength'/'maxLength' together with 'pattern' or 'format' are not supported; put the "
                         "length in the pattern");
    }
    if (pattern && format) return error(path, "'pattern' together with 'format' is not supported");
    Element content;
    if (pattern || format) {
      std::string regex;
      RegexOptions options;
      options.json_string = true;
      if (pattern) {
        if (!pattern->is_string()) return error(path + "/pattern", "'pattern' must be a string");
        regex = std::string(pattern->as_string());
        options.search = true;
      } else {
        if (!format->is_string() || !kFormats.count(std::string(format->as_string()))) {
          return error(path + "/format", fmt::format("unsupported format {}; supported: date, time, date-time, uuid, "
                                                     "email, ipv4", json::serialize(*format)));
        }
        regex = kFormats.at(std::string(format->as_string()));
      }
      auto compiled = compile_regex(b_, regex, options);
      if (!compiled.ok()) return error(path + (pattern ? "/pattern" : "/format"), compiled.status().message());
      content = *compiled;
    } else {
      KOI_ASSIGN_OR_RETURN(content, b_.repeat("string-chars", {json_char()}, min_length, max_length));
    }
    return b_.choice("string", {{b_.byte('"'), content, b_.byte('"')}});
  }

  // Digit sequences for the integers [lo, hi], both with `n` digits (lo's first digit is
  // nonzero unless n is 1).
  void same_length_range(const std::string& lo, const std::string& hi, Sequence prefix, std::vector<Sequence>* out) {
    if (lo.empty()) {
      out->push_back(std::move(prefix));
      return;
    }
    if (lo[0] == hi[0]) {
      prefix.push_back(b_.byte(static_cast<uint8_t>(lo[0])));
      same_length_range(lo.substr(1), hi.substr(1), std::move(prefix), out);
      return;
    }
    const std::string rest_lo = lo.substr(1), rest_hi = hi.substr(1);
    const bool lo_all_zero = rest_lo.find_first_not_of('0') == std::string::npos;
    const bool hi_all_nine = rest_hi.find_first_not_of('9') == std::string::npos;
    char mid_lo = lo[0], mid_hi = hi[0];
    if (!lo_all_zero) {
      Sequence p = prefix;
      p.push_back(b_.byte(static_cast<uint8_t>(lo[0])));
      same_length_range(rest_lo, std::string(rest_lo.size(), '9'), std::move(p), out);
      ++mid_lo;
    }
    if (!hi_all_nine) --mid_hi;
    if (mid_lo <= mid_hi) {
      Sequence p = prefix;
      p.push_back(digit(mid_lo, mid_hi));
      for (size_t k = 0; k < rest_lo.size(); ++k) p.push_back(digit());
      out->push_back(std::move(p));
    }
    if (!hi_all_nine) {
      Sequence p = prefix;
      p.push_back(b_.byte(static_cast<uint8_t>(hi[0])));
      same_length_range(std::string(rest_hi.size(), '0'), rest_hi, std::move(p), out);
    }
  }

  // The decimal integers in [lo, hi] (lo >= 0; hi empty: unbounded), no leading zeros.
  std::vector<Sequence> nonnegative_range(int64_t lo, std::optional<int64_t> hi) {
    std::vector<Sequence> out;
    const size_t lo_digits = digits_of(lo).size();
    const size_t hi_digits = hi ? digits_of(*hi).size() : lo_digits;
    for (size_t n = lo_digits; n <= hi_digits; ++n) {
      const std::string first = n == lo_digits ? digits_of(lo) : "1" + std::string(n - 1, '0');
      const std::string last = hi && n == hi_digits ? digits_of(*hi) : std::string(n, '9');
      same_length_range(first, last, {}, &out);
    }
    if (!hi) {  // any longer number
      Sequence longer = {digit('1', '9')};
      for (size_t k = 0; k < lo_digits; ++k) longer.push_back(digit());
      longer.push_back(b_.repeat("digits", {digit()}, 0, -1).value());
      out.push_back(std::move(longer));
    }
    return out;
  }

  // Non-negative magnitudes in [lo, hi] with a fraction (hi empty: unbounded): an integer
  // part in [lo, hi - 1] with any fraction, or exactly hi.
  std::vector<Sequence> magnitudes(int64_t lo, std::optional<int64_t> hi, bool integer) {
    if (integer) return nonnegative_range(lo, hi);
    std::vector<Sequence> out;
    if (!hi || *hi - 1 >= lo) {
      const std::optional<int64_t> below = hi ? std::optional<int64_t>(*hi - 1) : std::nullopt;
      for (Sequence s : nonnegative_range(lo, below)) {
        s.push_back(fraction());
        out.push_back(std::move(s));
      }
    }
    if (hi) out.push_back(b_.literal(digits_of(*hi)));
    return out;
  }

  Result<std::optional<double>> bound(const json::object& o, const char* key, const std::string& path) {
    const json::value* v = o.if_contains(key);
    if (!v) return std::optional<double>();
    if (!v->is_number()) return error(path + "/" + key, fmt::format("'{}' must be a number", key));
    const double x = v->to_number<double>();
    if (std::abs(x) > kMaxBound) return error(path + "/" + key, fmt::format("'{}' beyond +-1e15 is not supported", key));
    return std::optional<double>(x);
  }

  // Integer and number bounds become integer bounds, rounded inwards (exclusive ones move
  // by one): documents stay inside the schema's range.
  Result<Element> number_schema(const json::object& o, const std::string& path, bool integer) {
    KOI_ASSIGN_OR_RETURN(std::optional<double> minimum, bound(o, "minimum", path));
    KOI_ASSIGN_OR_RETURN(std::optional<double> maximum, bound(o, "maximum", path));
    KOI_ASSIGN_OR_RETURN(std::optional<double> ex_min, bound(o, "exclusiveMinimum", path));
    KOI_ASSIGN_OR_RETURN(std::optional<double> ex_max, bound(o, "exclusiveMaximum", path));
    std::optional<int64_t> lo, hi;
    auto raise = [&](int64_t v) { lo = lo ? std::max(*lo, v) : v; };
    auto lower = [&](int64_t v) { hi = hi ? std::min(*hi, v) : v; };
    if (minimum) raise(static_cast<int64_t>(std::ceil(*minimum)));
    if (ex_min) raise(static_cast<int64_t>(std::floor(*ex_min)) + 1);
    if (maximum) lower(static_cast<int64_t>(std::floor(*maximum)));
    if (ex_max) lower(static_cast<int64_t>(std::ceil(*ex_max)) - 1);
    if (!lo && !hi) return integer ? any_integer() : any_number();
    if (lo && hi && *lo > *hi) {
      return error(path, "the bounds leave no integer-valued number; bounds of non-integer numbers must have an "
                         "integer between them");
    }
    std::vector<Sequence> alternatives;
    if (!hi || *hi >= 0) {
      for (Sequence s : magnitudes(lo ? std::max<int64_t>(*lo, 0) : 0, hi, integer)) alternatives.push_back(s);
    }
    if (!lo || *lo < 0) {
      // x = -m: m in [max(0, -hi), -lo]; zero comes from the non-negative side.
      const int64_t m_lo = hi && *hi < 0 ? -*hi : (integer ? 1 : 0);
      const std::optional<int64_t> m_hi = lo ? std::optional<int64_t>(-*lo) : std::nullopt;
      if (!m_hi || *m_hi >= m_lo) {
        for (Sequence s : magnitudes(m_lo, m_hi, integer)) {
          s.insert(s.begin(), b_.byte('-'));
          alternatives.push_back(std::move(s));
        }
      }
    }
    return b_.choice(integer ? "integer-range" : "number-range", std::move(alternatives));
  }

  Result<Element> object_schema(const json::object& o, const std::string& path) {
    const json::value* props_v = o.if_contains("properties");
    if (props_v && !props_v->is_object()) return error(path + "/properties", "'properties' must be an object");
    std::vector<std::string> required;
    if (const json::value* r = o.if_contains("required")) {
      if (!r->is_array()) return error(path + "/required", "'required' must be an array of strings");
      for (const auto& x : r->as_array()) {
        if (!x.is_string()) return error(path + "/required", "'required' must be an array of strings");
        required.push_back(std::string(x.as_string()));
      }
    }
    struct Prop {
      std::string name;
      Element value;
      bool required;
    };
    std::vector<Prop> props;
    if (props_v) {
      for (const auto& kv : props_v->as_object()) {
        const std::string name(kv.key());
        KOI_ASSIGN_OR_RETURN(Element value, schema(kv.value(), path + "/properties/" + name));
        const bool req = std::find(required.begin(), required.end(), name) != required.end();
        props.push_back({name, value, req});
      }
    }
    for (const std::string& name : required) {  // required but not described: any value
      if (!props_v || !props_v->as_object().contains(name)) props.push_back({name, any_value(), true});
    }
    const json::value* extra = o.if_contains("additionalProperties");
    if (props.empty()) {
      if (extra && extra->is_bool() && !extra->as_bool()) return b_.choice("object", {b_.literal("{}")});
      Element value = any_value();
      if (extra && !extra->is_bool()) {
        KOI_ASSIGN_OR_RETURN(value, schema(*extra, path + "/additionalProperties"));
      }
      return b_.choice("object", {map_of(value)});
    }
    if (extra && !extra->is_bool()) {
      KOI_ASSIGN_OR_RETURN(Element unused, schema(*extra, path + "/additionalProperties"));  // checked, not generated
      (void)unused;
    }
    // rest[i][first]: the properties from i on, `first` when none has been written yet.
    const size_t n = props.size();
    std::vector<std::array<int32_t, 2>> rest(n + 1);
    for (int first = 0; first < 2; ++first) {
      rest[n][first] = b_.new_rule("props-end");
      b_.add_alternative(rest[n][first], {});
    }
    for (size_t i = n; i-- > 0;) {
      Sequence member = b_.literal(json::serialize(json::string(props[i].name)));
      for (Element e : colon()) member.push_back(e);
      member.push_back(props[i].value);
      for (int first = 0; first < 2; ++first) {
        const int32_t r = b_.new_rule("props");
        Sequence with = first ? Sequence{} : comma();
        with.insert(with.end(), member.begin(), member.end());
        with.push_back(b_.rule(rest[i + 1][0]));
        b_.add_alternative(r, std::move(with));
        if (!props[i].required) b_.add_alternative(r, {b_.rule(rest[i + 1][first])});
        rest[i][first] = r;
      }
    }
    return b_.choice("object", {{b_.byte('{'), b_.rule(rest[0][1]), b_.byte('}')}});
  }

  Result<Element> array_schema(const json::object& o, const std::string& path) {
    if (const json::value* u = o.if_contains("uniqueItems"); u && !(u->is_bool() && !u->as_bool())) {
      return error(path, "unsupported keyword 'uniqueItems'");
    }
    KOI_ASSIGN_OR_RETURN(int min_items, count_keyword(o, "minItems", 0, path));
    KOI_ASSIGN_OR_RETURN(int max_items, count_keyword(o, "maxItems", -1, path));
    if (max_items >= 0 && max_items < min_items) return error(path, "'maxItems' is below 'minItems'");
    const json::value* items_v = o.if_contains("items");
    bool no_more = items_v && items_v->is_bool() && !items_v->as_bool();
    Element item{};
    if (!no_more) {
      if (items_v) {
        KOI_ASSIGN_OR_RETURN(item, schema(*items_v, path + "/items"));
      } else {
        item = any_value();
      }
    }
    const json::value* prefix_v = o.if_contains("prefixItems");
    if (!prefix_v) {
      if (no_more) return b_.choice("array", {b_.literal("[]")});
      KOI_ASSIGN_OR_RETURN(Sequence s, list_of(item, min_items, max_items));
      return b_.choice("array", {std::move(s)});
    }
    if (!prefix_v->is_array() || prefix_v->as_array().empty()) {
      return error(path + "/prefixItems", "'prefixItems' must be a non-empty array of schemas");
    }
    const int num_prefix = static_cast<int>(prefix_v->as_array().size());
    if (max_items >= 0 && max_items < num_prefix) {
      return error(path, "'maxItems' below the number of 'prefixItems' is not supported");
    }
    if (no_more && min_items > num_prefix) return error(path, "'minItems' exceeds the 'prefixItems' allowed");
    Sequence seq = {b_.byte('[')};
    for (int i = 0; i < num_prefix; ++i) {
      if (i) {
        for (Element e : comma()) seq.push_back(e);
      }
      KOI_ASSIGN_OR_RETURN(Element e, schema(prefix_v->as_array()[i], fmt::format("{}/prefixItems/{}", path, i)));
      seq.push_back(e);
    }
    if (!no_more) {
      Sequence more = comma();
      more.push_back(item);
      KOI_ASSIGN_OR_RETURN(Element rest, b_.repeat("items", more, std::max(0, min_items - num_prefix),
                                                   max_items < 0 ? -1 : max_items - num_prefix));
      seq.push_back(rest);
    }
    seq.push_back(b_.byte(']'));
    return b_.choice("array", {std::move(seq)});
  }

  const json::value* root_;  // $refs resolve against it
  GrammarBuilder b_;
  std::map<std::string, int32_t> refs_;
  std::optional<Element> space_, json_char_, any_string_, fraction_, any_integer_, any_number_, any_value_,
      any_object_, any_array_;
};

}  // namespace

Result<Grammar> json_schema_grammar(const json::value& schema) { return SchemaCompiler(schema).compile(); }

Result<Grammar> tool_call_grammar(const std::vector<ToolSchema>& tools, std::string_view prefix,
                                  std::string_view args_key, std::string_view suffix) {
  if (tools.empty()) return Status::invalid_argument("no tools to call");
  // $refs inside a tool's parameters resolve against that tool's parameters.
  return SchemaCompiler(tools[0].parameters).tool_calls(tools, prefix, args_key, suffix);
}

Result<Grammar> json_object_grammar() {
  const json::value empty;
  return SchemaCompiler(empty).any_object();
}

}  // namespace koi::grammar
