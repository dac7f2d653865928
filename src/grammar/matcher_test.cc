#include "grammar/matcher.h"

#include <gtest/gtest.h>

#include <cmath>

#include <boost/json.hpp>

#include "grammar/constraint.h"
#include "grammar/gbnf.h"
#include "grammar/json_schema.h"
#include "grammar/regex.h"

namespace koi::grammar {
namespace {

using Ids = std::vector<int32_t>;

std::shared_ptr<const Vocabulary> toy_vocab(std::vector<std::string> tokens) {
  tokens.push_back("");  // the last id is the end token
  const int32_t eos = static_cast<int32_t>(tokens.size()) - 1;
  return std::make_shared<const Vocabulary>(std::move(tokens), std::vector<int32_t>{eos});
}

Ids allowed_ids(const std::shared_ptr<const TokenMask>& m, int32_t n_vocab) {
  Ids out;
  for (int32_t t = 0; t < n_vocab; ++t) {
    if (m->test(t)) out.push_back(t);
  }
  return out;
}

// Whether the grammar accepts `text` as a complete document, byte by byte.
bool accepts(CompiledGrammar& g, std::string_view text) {
  int32_t s = g.initial_state();
  for (char c : text) {
    s = g.advance(s, static_cast<uint8_t>(c));
    if (s < 0) return false;
  }
  return g.accepting(s);
}

std::shared_ptr<CompiledGrammar> compiled(Result<Grammar> g, std::shared_ptr<const Vocabulary> v = toy_vocab({"x"})) {
  EXPECT_TRUE(g.ok()) << g.status().to_string();
  return std::make_shared<CompiledGrammar>(std::move(g).value(), std::move(v));
}

std::shared_ptr<CompiledGrammar> schema(std::string_view text) {
  return compiled(json_schema_grammar(boost::json::parse(text)));
}

TEST(MatcherTest, MasksFollowTheGrammarTokenByToken) {
  //                         0    1    2    3     4     5    6 (end)
  auto vocab = toy_vocab({"a", "b", "c", "ab", "ac", "x"});
  Matcher m(compiled(regex_grammar("ab|ac"), vocab));
  EXPECT_EQ(allowed_ids(m.allowed(0), 7), (Ids{0, 3, 4}));
  EXPECT_FALSE(m.accept(1));  // "b" first: rejected, nothing changes
  EXPECT_EQ(allowed_ids(m.allowed(0), 7), (Ids{0, 3, 4}));
  ASSERT_TRUE(m.accept(0));
  EXPECT_EQ(allowed_ids(m.allowed(0), 7), (Ids{1, 2}));
  EXPECT_FALSE(m.accepting());
  ASSERT_TRUE(m.accept(2));
  EXPECT_TRUE(m.accepting());
  EXPECT_TRUE(m.finished());
  EXPECT_EQ(allowed_ids(m.allowed(0), 7), (Ids{6}));  // only the end token
}

TEST(MatcherTest, EndTokenOnlyWhereTheDocumentIsComplete) {
  auto vocab = toy_vocab({"1", "2", "12"});
  Matcher m(compiled(regex_grammar("[12]+"), vocab));
  EXPECT_EQ(allowed_ids(m.allowed(0), 4), (Ids{0, 1, 2}));
  ASSERT_TRUE(m.accept(2));
  EXPECT_TRUE(m.accepting());
  EXPECT_FALSE(m.finished());  // more digits may follow
  EXPECT_EQ(allowed_ids(m.allowed(0), 4), (Ids{0, 1, 2, 3}));
  ASSERT_TRUE(m.accept(3));
  EXPECT_TRUE(m.finished());
  EXPECT_FALSE(m.accept(0));
}

TEST(MatcherTest, MasksAreComputedOncePerState) {
  auto vocab = toy_vocab({"\"", "a", "b", "ab", "a\""});
  auto g = compiled(regex_grammar("\"[ab]*\""), vocab);
  Matcher m(g);
  EXPECT_EQ(allowed_ids(m.allowed(0), 6), (Ids{0}));
  ASSERT_TRUE(m.accept(0));
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(allowed_ids(m.allowed(0), 6), (Ids{0, 1, 2, 3, 4}));
    ASSERT_TRUE(m.accept(i % 2 ? 1 : 3));
  }
  // The state inside the string repeats: two trie walks (before and inside the string).
  EXPECT_EQ(g->stats().masks_computed, 2);
  EXPECT_EQ(g->stats().masks_served, 6);
}

TEST(MatcherTest, MaskCacheIsBoundedAndRecomputesAfterAFlush) {
  auto vocab = toy_vocab({"a", "b"});
  // 601 states, each with its own mask; room for 256 masks of 64 bytes.
  auto g = std::make_shared<CompiledGrammar>(regex_grammar("a{600}b").value(), vocab, 256 * 64);
  Matcher m(g);
  for (int i = 0; i < 600; ++i) {
    ASSERT_EQ(allowed_ids(m.allowed(0), 3), (Ids{0})) << i;
    ASSERT_TRUE(m.accept(0));
  }
  EXPECT_EQ(allowed_ids(m.allowed(0), 3), (Ids{1}));
  EXPECT_EQ(g->stats().mask_flushes, 2);  // at most 256 masks held at once
  EXPECT_EQ(g->stats().masks_computed, 601);
}

TEST(MatcherTest, ShortBudgetKeepsOnlyTokensThatCanStillFinish) {
  //                         0    1    2     3      4
  auto vocab = toy_vocab({"[", "a", "]", "aa]", "aaaa"});
  auto g = compiled(parse_gbnf("root ::= \"[\" \"a\"* \"]\""), vocab);
  Matcher m(g);
  ASSERT_TRUE(m.accept(0));
  EXPECT_EQ(allowed_ids(m.allowed(100), 6), (Ids{1, 2, 3, 4}));
  // One token left: it must close the list.
  EXPECT_EQ(allowed_ids(m.allowed(1), 6), (Ids{2, 3}));
  EXPECT_EQ(allowed_ids(m.allowed(2), 6), (Ids{1, 2, 3, 4}));
}

TEST(MatcherTest, TokenSpanningARuleEndIsCheckedAgainstWhatFollows) {
  auto vocab = toy_vocab({"{\"", "a\":", "1}", "1,", "\"b\":2}", "}"});
  auto g = compiled(json_schema_grammar(boost::json::parse(
                        R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"}},"required":["a"]})")),
                    vocab);
  Matcher m(g);
  ASSERT_TRUE(m.accept(0));
  ASSERT_TRUE(m.accept(1));
  EXPECT_EQ(allowed_ids(m.allowed(0), 7), (Ids{2, 3}));
  ASSERT_TRUE(m.accept(3));
  EXPECT_EQ(allowed_ids(m.allowed(0), 7), (Ids{4}));
  ASSERT_TRUE(m.accept(4));
  EXPECT_TRUE(m.finished());
}

TEST(MatcherTest, ApplyMaskMatchesThePerTokenTest) {
  TokenMask mask;
  mask.bits = {0xFFFFFFFFu, 0u, 0x80000001u, 0x5u};  // 100 tokens: the last word is partial
  std::vector<float> logits(100, 1.0f);
  apply_mask(mask, logits);
  for (int32_t t = 0; t < 100; ++t) {
    EXPECT_EQ(logits[static_cast<size_t>(t)] == 1.0f, mask.test(t)) << t;
    if (!mask.test(t)) EXPECT_TRUE(std::isinf(logits[static_cast<size_t>(t)]) && logits[static_cast<size_t>(t)] < 0);
  }
}

TEST(JsonSchemaTest, IntegerRangesAreExact) {
  auto g = schema(R"({"type":"integer","minimum":-12,"maximum":107})");
  for (int v = -200; v <= 200; ++v) {
    EXPECT_EQ(accepts(*g, std::to_string(v)), v >= -12 && v <= 107) << v;
  }
  EXPECT_FALSE(accepts(*g, "007"));
  EXPECT_FALSE(accepts(*g, "1.5"));
  auto open = schema(R"({"type":"integer","exclusiveMinimum":95})");
  for (int v = 0; v <= 1200; ++v) EXPECT_EQ(accepts(*open, std::to_string(v)), v > 95) << v;
  EXPECT_TRUE(accepts(*open, "123456789012"));
}

TEST(JsonSchemaTest, NumberBoundsHoldWithFractions) {
  auto g = schema(R"({"type":"number","minimum":-2,"maximum":3})");
  EXPECT_TRUE(accepts(*g, "2.999"));
  EXPECT_TRUE(accepts(*g, "3"));
  EXPECT_FALSE(accepts(*g, "3.5"));
  EXPECT_FALSE(accepts(*g, "3.0001"));
  EXPECT_TRUE(accepts(*g, "-1.75"));
  EXPECT_TRUE(accepts(*g, "-2"));
  EXPECT_FALSE(accepts(*g, "-2.1"));
  EXPECT_FALSE(accepts(*g, "4"));
}

TEST(JsonSchemaTest, ObjectsKeepOrderWithOptionalProperties) {
  auto g = schema(R"({"type":"object","properties":{"a":{"type":"boolean"},"b":{"type":"null"},"c":{"enum":[1,"x"]}},
                      "required":["b"]})");
  EXPECT_TRUE(accepts(*g, R"({"b":null})"));
  EXPECT_TRUE(accepts(*g, R"({"a":true,"b":null})"));
  EXPECT_TRUE(accepts(*g, R"({"a":false, "b": null, "c":"x"})"));
  EXPECT_TRUE(accepts(*g, R"( {"b":null,"c":1})"));
  EXPECT_FALSE(accepts(*g, R"({"a":true})"));           // b is required
  EXPECT_FALSE(accepts(*g, R"({"b":null,"a":true})"));  // declared order
  EXPECT_FALSE(accepts(*g, R"({,"b":null})"));
  EXPECT_FALSE(accepts(*g, R"({"b":null,"c":2})"));
}

TEST(JsonSchemaTest, ArraysHonourItemCounts) {
  auto g = schema(R"({"type":"array","items":{"type":"integer","minimum":0,"maximum":9},"minItems":2,"maxItems":3})");
  EXPECT_FALSE(accepts(*g, "[1]"));
  EXPECT_TRUE(accepts(*g, "[1,2]"));
  EXPECT_TRUE(accepts(*g, "[1, 2, 3]"));
  EXPECT_FALSE(accepts(*g, "[1,2,3,4]"));
  EXPECT_FALSE(accepts(*g, "[]"));
  auto empty_ok = schema(R"({"type":"array","maxItems":1})");
  EXPECT_TRUE(accepts(*empty_ok, "[]"));
  EXPECT_TRUE(accepts(*empty_ok, "[{\"k\":[null]}]"));
  EXPECT_FALSE(accepts(*empty_ok, "[1,2]"));
}

TEST(JsonSchemaTest, StringsEscapeAndCountCharacters) {
  auto g = schema(R"({"type":"string","minLength":2,"maxLength":3})");
  EXPECT_FALSE(accepts(*g, "\"a\""));
  EXPECT_TRUE(accepts(*g, "\"ab\""));
  EXPECT_TRUE(accepts(*g, "\"a\\\"\""));     // a and an escaped quote: 2 characters
  EXPECT_TRUE(accepts(*g, "\"\xC3\xA9t\xC3\xA9\""));  // "été": 3 characters, 5 bytes
  EXPECT_FALSE(accepts(*g, "\"abcd\""));
  EXPECT_FALSE(accepts(*g, "\"a\"b\""));
  EXPECT_FALSE(accepts(*g, "\"a\xC3\""));  // a broken UTF-8 sequence
}

TEST(JsonSchemaTest, PatternsAreSearchedUnlessAnchored) {
  auto anchored = schema(R"({"type":"string","pattern":"^[a-c]{2}-\\d+$"})");
  EXPECT_TRUE(accepts(*anchored, "\"ab-12\""));
  EXPECT_FALSE(accepts(*anchored, "\"xab-12\""));
  auto search = schema(R"({"type":"string","pattern":"ok"})");
  EXPECT_TRUE(accepts(*search, "\"it is ok here\""));
  EXPECT_FALSE(accepts(*search, "\"nope\""));
  auto quote = schema(R"({"type":"string","pattern":"^a\"b$"})");
  EXPECT_TRUE(accepts(*quote, "\"a\\\"b\""));  // the quote is escaped in the JSON text
}

TEST(JsonSchemaTest, RefsResolveAndMayRecurse) {
  auto g = schema(R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},
                      "kids":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["v"]}},
                      "$ref":"#/$defs/node"})");
  EXPECT_TRUE(accepts(*g, R"({"v":1,"kids":[{"v":2},{"v":3,"kids":[]}]})"));
  EXPECT_FALSE(accepts(*g, R"({"v":1,"kids":[{"kids":[]}]})"));
}

TEST(JsonSchemaTest, AnyOfAndTypeLists) {
  auto g = schema(R"({"anyOf":[{"type":"string","enum":["a"]},{"type":["integer","null"]}]})");
  EXPECT_TRUE(accepts(*g, "\"a\""));
  EXPECT_TRUE(accepts(*g, "-5"));
  EXPECT_TRUE(accepts(*g, "null"));
  EXPECT_FALSE(accepts(*g, "\"b\""));
  EXPECT_FALSE(accepts(*g, "true"));
}

TEST(JsonSchemaTest, UnsupportedKeywordsAreErrorsNamingThem) {
  auto r = json_schema_grammar(boost::json::parse(R"({"type":"object","properties":{"tags":{"type":"array",
                                                       "uniqueItems":true}}})"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "unsupported keyword 'uniqueItems' at /properties/tags");
  r = json_schema_grammar(boost::json::parse(R"({"oneOf":[{"type":"string"}]})"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "unsupported keyword 'oneOf' at /");
  r = json_schema_grammar(boost::json::parse(R"({"$ref":"#/$defs/missing"})"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "'$ref' '#/$defs/missing' does not resolve in this schema at /$ref");
}

TEST(RegexTest, ErrorsNameTheConstruct) {
  EXPECT_EQ(regex_grammar("a(?=b)").status().message(),
            "regex 'a(?=b)': lookaround, named groups and inline flags '(?' are not supported; use (?:...) or (...) at "
            "offset 2");
  EXPECT_EQ(regex_grammar("(a)\\1").status().message(), "regex '(a)\\1': backreferences are not supported at offset 5");
}

TEST(RegexTest, ClassesRangesAndRepeats) {
  auto g = compiled(regex_grammar("[^a-y\\n]{2,3}(x|\xCE\xB1)?"));
  EXPECT_TRUE(accepts(*g, "zz"));
  EXPECT_TRUE(accepts(*g, "Z\xE2\x82\xAC" "0x"));  // a euro sign is one character
  EXPECT_TRUE(accepts(*g, "zz\xCE\xB1"));
  EXPECT_FALSE(accepts(*g, "za"));
  EXPECT_FALSE(accepts(*g, "z\n"));
  EXPECT_FALSE(accepts(*g, "zzzzx"));
}

TEST(GbnfTest, ParsesRulesGroupsAndRepetition) {
  auto g = compiled(parse_gbnf(R"(# a greeting
root ::= greet " " name ("!" | "?"){0,2}
greet ::= "hello" | "hi"
name ::= [A-Z] [a-z]+
)"));
  EXPECT_TRUE(accepts(*g, "hi Bob"));
  EXPECT_TRUE(accepts(*g, "hello Ann!?"));
  EXPECT_FALSE(accepts(*g, "hello Ann!?!"));
  EXPECT_FALSE(accepts(*g, "hey Bob"));
}

TEST(GbnfTest, ErrorsNameTheRuleOrPlace) {
  EXPECT_EQ(parse_gbnf("root ::= x\nx ::= x \"a\" | \"b\"").status().message(),
            "grammar: rule 'x' is left-recursive (it can start with itself); rewrite it with repetition, e.g. x ::= y "
            "(\",\" y)*");
  EXPECT_EQ(parse_gbnf("root ::= thing").status().message(), "grammar: rule 'thing' is used but never defined");
  EXPECT_EQ(parse_gbnf("root ::= \"a\" )").status().message(), "grammar: unmatched ')' at line 1, column 14");
  EXPECT_EQ(parse_gbnf("start ::= \"a\"").status().message(),
            "grammar: no rule named 'root'; the document is rule 'root'");
}

TEST(GbnfTest, DeepNestingIsAnErrorNotACrash) {
  const std::string deep = "root ::= " + std::string(100000, '(') + "\"a\"" + std::string(100000, ')');
  EXPECT_EQ(parse_gbnf(deep).status().message(), "grammar: groups nest deeper than 200 at line 1, column 210");
  EXPECT_FALSE(regex_grammar(std::string(100000, '(')).ok());
  auto self = json_schema_grammar(boost::json::parse(R"({"$defs":{"a":{"$ref":"#/$defs/b"},"b":{"$ref":"#/$defs/a"}},
                                                         "$ref":"#/$defs/a"})"));
  ASSERT_FALSE(self.ok());
  EXPECT_NE(self.status().message().find("left-recursive"), std::string::npos) << self.status().message();
}

TEST(GrammarCacheTest, CompilesEachConstraintOnce) {
  GrammarCache cache(toy_vocab({"a"}), 2);
  Constraint a{ConstraintKind::kRegex, "a+", {}};
  Constraint b{ConstraintKind::kChoice, "", {"yes", "no"}};
  auto first = cache.get(a);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(cache.get(a).value().get(), first.value().get());
  ASSERT_TRUE(cache.get(b).ok());
  ASSERT_TRUE(cache.get({ConstraintKind::kJsonObject, "", {}}).ok());  // evicts a (least recent)
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_NE(cache.get(a).value().get(), first.value().get());
  EXPECT_EQ(cache.get({ConstraintKind::kRegex, "(", {}}).status().message(), "regex '(': missing ')' at offset 1");
}

}  // namespace
}  // namespace koi::grammar
