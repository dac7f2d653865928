// Unit tests of the Jinja interpreter, one feature at a time. Every expected string was
// produced by Python jinja2 3.1 set up as Hugging Face transformers sets it up
// (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols, its tojson).
#include <gtest/gtest.h>

#include <string>

#include "tokenizer/jinja/chat_template.h"

namespace koi::tokenizer {
namespace {

Result<std::string> render(const std::string& source, const std::string& context = "") {
  KOI_ASSIGN_OR_RETURN(ChatTemplate t, ChatTemplate::parse(source));
  ChatTemplateInputs inputs;
  inputs.extra_context_json = context;
  return t.render(inputs);
}

std::string error_of(const std::string& source, const std::string& context = "") {
  Result<std::string> r = render(source, context);
  EXPECT_FALSE(r.ok()) << "rendered: " << (r.ok() ? *r : "");
  return r.status().message();
}

struct Case {
  const char* name;
  const char* source;
  const char* context;
  const char* expected;
};

const Case kCases[] = {
    {"Text", "hello",
     "",
     "hello"},
    {"Output", "{{ 'a' + 'b' }}{{ 1 + 2 * 3 }}{{ (1 + 2) * 3 }}",
     "",
     "ab79"},
    {"Comment", "a{# note #}b",
     "",
     "ab"},
    {"IntegerMath", "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 7 / 2 }} {{ 4 / 2 }}",
     "",
     "3 -4 1 2 1024 3.5 2.0"},
    {"FloatRepr", "{{ 0.1 + 0.2 }} {{ 1e20 }} {{ 1.0 }} {{ 0.00001 }} {{ 2.5|round }} {{ 3.14159|round(2) }}",
     "",
     "0.30000000000000004 1e+20 1.0 1e-05 2.0 3.14"},
    {"Concat", "{{ 'n=' ~ 3 ~ none ~ true }}",
     "",
     "n=3NoneTrue"},
    {"PythonStr", "{{ [1, 'a', none, true, 1.5] }} {{ {'k': 'v', 'n': [1]} }} {{ none }} {{ false }}",
     "",
     "[1, 'a', None, True, 1.5] {'k': 'v', 'n': [1]} None False"},
    {"StrRepr", "{{ [\"it's\", 'say \"hi\"', 'a\\nb'] }}",
     "",
     "[\"it's\", 'say \"hi\"', 'a\\nb']"},
    {"IfElifElse", "{% for x in [1, 2, 3] %}{% if x == 1 %}one{% elif x == 2 %}two{% else %}many{% endif %},{% endfor %}",
     "",
     "one,two,many,"},
    {"LoopVariables", "{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}|{% endfor %}",
     "",
     "1032TrueFalse3|2121FalseFalse3|3210FalseTrue3|"},
    {"LoopPrevNext", "{% for x in [1, 2, 3] %}{{ loop.previtem is defined }}{{ loop.nextitem|default('-') }}{{ loop.cycle('a', 'b') }} {% endfor %}",
     "",
     "False2a True3b True-a "},
    {"ForElse", "{% for x in [] %}x{% else %}empty{% endfor %}",
     "",
     "empty"},
    {"ForFilter", "{% for x in range(10) if x is odd %}{{ x }}{{ ',' if not loop.last }}{% endfor %}",
     "",
     "1,3,5,7,9"},
    {"ForUnpack", "{% for k, v in {'a': 1, 'b': 2}|items %}{{ k }}={{ v }};{% endfor %}",
     "",
     "a=1;b=2;"},
    {"BreakContinue", "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}",
     "",
     "0134"},
    {"LoopScope", "{% set x = 1 %}{% for i in [1, 2] %}{% set x = x + 10 %}{{ x }} {% endfor %}{{ x }}",
     "",
     "11 11 1"},
    {"Namespace", "{% set ns = namespace(n=0, s='') %}{% for i in [1, 2, 3] %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}",
     "",
     "6"},
    {"SetTuple", "{% set a, b = 1, 2 %}{{ a }}{{ b }}",
     "",
     "12"},
    {"SetBlock", "{% set x %}in {{ 1 + 1 }}{% endset %}[{{ x }}]",
     "",
     "[in 2]"},
    {"Macro", "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('a') }} {{ greet('b', '?') }} {{ greet(punct='.', name='c') }}",
     "",
     "Hi a! Hi b? Hi c."},
    {"CallBlock", "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}bold{% endcall %}",
     "",
     "<b>bold</b>"},
    {"FilterBlock", "{% filter upper %}abc{% endfilter %}",
     "",
     "ABC"},
    {"Slicing", "{{ [1, 2, 3, 4][1:] }}{{ [1, 2, 3, 4][::-1] }}{{ [1, 2, 3, 4][-2:] }}{{ 'héllo'[1:3] }}{{ 'abc'[-1] }}",
     "",
     "[2, 3, 4][4, 3, 2, 1][3, 4]élc"},
    {"StringMethods", "{{ '  x  '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ '\\n\\na\\n'.lstrip('\\n') }}|{{ 'a\\n\\n'.rstrip('\\n') }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith(('x', 'c')) }}|{{ 'aXb'.upper() }}{{ 'aXb'.lower() }}|{{ 'a-b-c'.replace('-', '+', 1) }}|{{ 'hello world'.title() }}|{{ '{} and {name}'.format(1, name='n') }}|{{ ', '.join(['a', 'b']) }}",
     "",
     "x|a|a\n|a|['a', 'b', '', 'c']|['a', 'b']|TrueTrue|AXBaxb|a+b-c|Hello World|1 and n|a, b"},
    {"Filters", "{{ '  t  '|trim }}|{{ [1, 2]|length }}{{ 'héllo'|length }}|{{ 'ab'|upper }}{{ 'AB'|lower }}|{{ 'hello'|capitalize }}|{{ x|default('d') }}{{ ''|default('e', true) }}|{{ [3, 4]|first }}{{ [3, 4]|last }}|{{ [1, 2, 3]|join('-') }}|{{ 'aaa'|replace('a', 'b') }}|{{ '42'|int + 1 }}{{ 'x'|int }}{{ 3.9|int }}|{{ 'ab'|list }}|{{ 5|string ~ 'x' }}|{{ [3, 1, 2]|sort }}{{ [1, 1, 2]|unique|list }}{{ [1, 2]|reverse|list }}|{{ -3|abs }}",
     "",
     "t|25|ABab|Hello|de|34|1-2-3|bbb|4303|['a', 'b']|5x|[1, 2, 3][1, 2][2, 1]|3"},
    {"SelectAttr", "{{ msgs|selectattr('role', 'equalto', 'user')|map(attribute='content')|join(',') }}|{{ msgs|rejectattr('role', 'eq', 'user')|list|length }}|{{ [1, 2, 3, 4]|select('even')|list }}|{{ ['a', 'b', 'c']|reject('in', ['b'])|list }}",
     "{\"msgs\": [{\"role\": \"user\", \"content\": \"u1\"}, {\"role\": \"assistant\", \"content\": \"a\"}, {\"role\": \"user\", \"content\": \"u2\"}]}",
     "u1,u2|1|[2, 4]|['a', 'c']"},
    {"ToJson", "{{ d|tojson }}|{{ d|tojson(indent=2) }}|{{ 'é\"\\n'|tojson }}|{{ d|tojson(sort_keys=true) }}|{{ [] |tojson(indent=4) }}",
     "{\"d\": {\"b\": [1, 2.5, null, true], \"a\": {\"x\": \"y\"}}}",
     "{\"b\": [1, 2.5, null, true], \"a\": {\"x\": \"y\"}}|{\n  \"b\": [\n    1,\n    2.5,\n    null,\n    true\n  ],\n  \"a\": {\n    \"x\": \"y\"\n  }\n}|\"é\\\"\\n\"|{\"a\": {\"x\": \"y\"}, \"b\": [1, 2.5, null, true]}|[]"},
    {"Tests", "{{ x is defined }}{{ y is undefined }}{{ none is none }}{{ 'a' is string }}{{ 1 is number }}{{ 1.5 is number }}{{ {} is mapping }}{{ [] is iterable }}{{ 'a' is iterable }}{{ [] is sequence }}{{ 3 is equalto 3 }}{{ true is true }}{{ false is false }}{{ 1 is true }}{{ x is not none }}{{ 4 is divisibleby 2 }}{{ 'ab' is lower }}",
     "{\"x\": 1}",
     "TrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueFalseTrueTrueTrue"},
    {"Operators", "{{ 1 < 2 < 3 }}{{ 3 > 2 > 2 }}{{ 'a' in 'cat' }}{{ 'x' not in ['a'] }}{{ 'k' in {'k': 1} }}{{ not true }}{{ 1 == 1.0 }}{{ 1 != 2 }}{{ 'b' >= 'a' }}{{ none or 'alt' }}{{ 0 and 'never' }}{{ 'yes' if 1 else 'no' }}{{ 'a' if false }}",
     "",
     "TrueFalseTrueTrueTrueFalseTrueTrueTruealt0yes"},
    {"DictAccess", "{{ d.a }}{{ d['b'] }}{{ d.missing is defined }}{{ d.get('a') }}{{ d.get('zz', 'dflt') }}{{ d.keys()|list }}{{ d.values()|list }}{{ d.items()|list|length }}",
     "{\"d\": {\"a\": 1, \"b\": 2}}",
     "12False1dflt['a', 'b'][1, 2]2"},
    {"ListIndex", "{{ l[0] }}{{ l[-1] }}{{ l[5] is defined }}{{ l|length }}",
     "{\"l\": [10, 20, 30]}",
     "1030False3"},
    {"Range", "{{ range(3)|list }}{{ range(1, 7, 2)|list }}{{ range(5, 0, -2)|list }}",
     "",
     "[0, 1, 2][1, 3, 5][5, 3, 1]"},
    {"StringEscapes", "{{ 'tab\\there' }}|{{ \"q\\\"q\" }}|{{ 'uni\\u00e9' }}|{{ 'back\\\\slash' }}|{{ 'keep\\$' }}",
     "",
     "tab\there|q\"q|unié|back\\slash|keep\\$"},
    {"DictLiteralOrder", "{{ {'z': 1, 'a': 2, 'm': 3}|tojson }}",
     "",
     "{\"z\": 1, \"a\": 2, \"m\": 3}"},
    {"TrimBlocks", "{% if true %}\nyes\n{% endif %}\nend",
     "",
     "yes\nend"},
    {"LstripBlocks", "  {% if true %}\n  x\n  {% endif %}\n",
     "",
     "  x\n"},
    {"WhitespaceControl", "a  {%- if true -%}  b  {%- endif -%}  c {{- ' d ' -}} e",
     "",
     "abc d e"},
    {"LstripComment", "x\n    {# c #}\ny",
     "",
     "x\ny"},
    {"PlusKeepsWhitespace", "  {%+ if true %}x{% endif +%}\ny",
     "",
     "  x\ny"},
    {"VariableNoLstrip", "  {{ 'v' }}\n",
     "",
     "  v"},
    {"TrailingNewline", "a\n",
     "",
     "a"},
    {"CrLf", "a\r\nb\rc",
     "",
     "a\nb\nc"},
    {"Unicode", "{{ s }}|{{ s|length }}|{{ s[0] }}|{{ s|tojson }}",
     "{\"s\": \"日本語 ✓ é\"}",
     "日本語 ✓ é|7|日|\"日本語 ✓ é\""},
    {"NestedMacroRecursion", "{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(3) }}",
     "",
     "321"},
    {"InOperatorUndefined", "{{ 'a' in x }}",
     "",
     "False"},
    {"UndefinedPrint", "[{{ nothing }}][{{ nothing is defined }}]",
     "",
     "[][False]"},
    {"StrOnDict", "{{ 'x' ~ {'a': [1, 'b']} }}",
     "",
     "x{'a': [1, 'b']}"},
};

class JinjaFeature : public testing::TestWithParam<Case> {};

TEST_P(JinjaFeature, RendersAsPythonJinja2) {
  const Case& c = GetParam();
  Result<std::string> r = render(c.source, c.context);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(*r, c.expected);
}

INSTANTIATE_TEST_SUITE_P(Features, JinjaFeature, testing::ValuesIn(kCases),
                         [](const testing::TestParamInfo<Case>& info) { return std::string(info.param.name); });

TEST(JinjaErrors, UnclosedTagNamesLineAndColumn) {
  EXPECT_EQ(error_of("line one\n  {% if true %}x"),
            "2:17: unexpected end of template: expected 'endif' to close the 'if' at 2:6");
  EXPECT_EQ(error_of("ab\n{{ x "), "2:1: unclosed tag: expected '}}' before the end of the template");
  EXPECT_EQ(error_of("{# never closed"), "1:1: unclosed comment: expected '#}'");
}

TEST(JinjaErrors, SyntaxErrorsSayWhatWasExpected) {
  EXPECT_EQ(error_of("{% if %}x{% endif %}"), "1:7: expected an expression, got '%}'");
  // An open bracket hides the "}}" (as in Jinja), so the tag runs to the end.
  EXPECT_EQ(error_of("{{ (1 + 2 }}"), "1:1: unclosed tag: expected '}}' before the end of the template");
  EXPECT_EQ(error_of("{{ (1 + 2 ] }}"), "1:11: expected ')', got ']'");
  EXPECT_EQ(error_of("{% for x of y %}{% endfor %}"), "1:10: expected 'in', got 'of'");
  EXPECT_EQ(error_of("{% endif %}"), "1:4: unexpected 'endif' with no open block to close");
  EXPECT_EQ(error_of("{% include 'x' %}"), "1:4: unknown statement 'include'");
  EXPECT_EQ(error_of("{{ 'abc }}"), "1:4: unterminated string: expected a closing '");
  EXPECT_EQ(error_of("{{ a ? b }}"), "1:6: unexpected character '?' inside a tag");
}

TEST(JinjaErrors, UnknownFilterAndTest) {
  EXPECT_EQ(error_of("{{ 'x' | shout }}"), "1:10: unknown filter 'shout'");
  EXPECT_EQ(error_of("\n{{ 1 is prime }}"), "2:6: unknown test 'prime'");
  // A filter that is never reached does not fail the render (Python jinja2 fails at compile time).
  EXPECT_EQ(*render("{% if false %}{{ x | shout }}{% endif %}ok"), "ok");
}

TEST(JinjaErrors, RaiseExceptionMessageIsExact) {
  Result<std::string> r = render("{{ raise_exception('Conversation roles must alternate user/assistant') }}");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "Conversation roles must alternate user/assistant");
  // From inside a macro too.
  EXPECT_EQ(error_of("{% macro m() %}{{ raise_exception('inner') }}{% endmacro %}{{ m() }}"), "inner");
}

TEST(JinjaErrors, RuntimeErrorsNameThePlace) {
  EXPECT_EQ(error_of("{{ 1 + 'a' }}"), "1:6: unsupported operand type(s) for +: 'int' and 'str'");
  EXPECT_EQ(error_of("{{ x.y }}"), "1:5: 'x' is undefined");
  EXPECT_EQ(error_of("{{ d.a.b }}", R"({"d": {}})"), "1:7: 'dict object' has no attribute 'a'");
  EXPECT_EQ(error_of("{{ 1 // 0 }}"), "1:6: integer division or modulo by zero");
  EXPECT_EQ(error_of("{{ 'a' < 1 }}"), "1:4: '<' not supported between instances of 'str' and 'int'");
  EXPECT_EQ(error_of("{% set x.a = 1 %}", R"({"x": {}})"), "1:4: cannot set 'x.a': 'x' is not a namespace() object");
  EXPECT_EQ(error_of("{{ 'a'.nope() }}"), "1:12: 'str object' has no attribute 'nope'");
  EXPECT_EQ(error_of("{{ 5() }}"), "1:5: 'int' object is not callable");
  EXPECT_EQ(error_of("{{ none | tojson }}{{ x | tojson }}"),
            "1:27: tojson: object of type Undefined is not JSON serializable");
  EXPECT_EQ(error_of("{% for a, b in [[1, 2, 3]] %}{% endfor %}"), "1:4: cannot unpack 3 values into 2 names");
}

TEST(JinjaLimits, EndlessWorkStopsWithAnError) {
  EXPECT_EQ(error_of("{% for i in range(100000000) %}{% endfor %}").substr(0, 55),
            "1:18: range(): range() of 100000000 items is over the l");
  EXPECT_EQ(error_of("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}"),
            "1:4: macro 'f': calls nested deeper than 64 levels (endless recursion?)");
  std::string message = error_of(
      "{% set ns = namespace(s='xxxxxxxxxxxxxxxx') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}");
  EXPECT_NE(message.find("over the limit"), std::string::npos) << message;
  const std::string context = R"({"s": ")" + std::string(2000, 'x') + R"("})";
  message = error_of("{% for i in s %}{% for j in s %}{% endfor %}{% endfor %}", context);
  EXPECT_NE(message.find("steps (an endless loop?)"), std::string::npos) << message;
}

TEST(JinjaLimits, DeepNestingIsRefusedNotCrashed) {
  std::string parens = "{{ " + std::string(100000, '(') + "1" + std::string(100000, ')') + " }}";
  EXPECT_NE(error_of(parens).find("nesting is deeper than 128 levels"), std::string::npos);
  std::string deep_if;
  for (int i = 0; i < 1000; ++i) deep_if += "{% if true %}";
  EXPECT_NE(error_of(deep_if).find("nesting is deeper than 128 levels"), std::string::npos);
  std::string chain = "{{ 1";
  for (int i = 0; i < 100000; ++i) chain += "+1";
  EXPECT_NE(error_of(chain + " }}").find("nesting is deeper than 128 levels"), std::string::npos);
  // Self-holding namespaces and deeply nested lists print or fail, and are freed.
  EXPECT_EQ(*render("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns.me.me.me is defined }}"), "True");
  EXPECT_NE(error_of("{% set ns = namespace(l=[]) %}{% for i in range(1000) %}{% set ns.l = [ns.l] %}{% endfor %}")
                .find("nest deeper than 256 levels"),
            std::string::npos);
}

}  // namespace
}  // namespace koi::tokenizer
