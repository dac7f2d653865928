#include "grammar/constraint.h"

#include <boost/json.hpp>
#include <fmt/format.h>

#include "grammar/gbnf.h"
#include "grammar/json_schema.h"
#include "grammar/regex.h"

namespace koi::grammar {

namespace {

Result<Grammar> tool_call_constraint(const std::string& source) {
  boost::system::error_code ec;
  const boost::json::value spec = boost::json::parse(source, ec);
  const boost::json::object* o = ec ? nullptr : spec.if_object();
  const boost::json::array* tools = o && o->if_contains("tools") ? o->at("tools").if_array() : nullptr;
  if (!tools) return Status::invalid_argument("a tool-call constraint is {\"prefix\", \"key\", \"suffix\", \"tools\"}");
  std::vector<ToolSchema> schemas;
  for (const auto& t : *tools) {
    schemas.push_back({std::string(t.at("name").as_string()), t.as_object().contains("parameters") ? t.at("parameters")
                                                                                                  : boost::json::value()});
  }
  return tool_call_grammar(schemas, o->at("prefix").as_string(), o->at("key").as_string(), o->at("suffix").as_string());
}

}  // namespace

Result<Grammar> compile_constraint(const Constraint& c) {
  switch (c.kind) {
    case ConstraintKind::kJsonObject: return json_object_grammar();
    case ConstraintKind::kJsonSchema: {
      boost::system::error_code ec;
      boost::json::parse_options options;
      options.max_depth = 64;  // as deep as a request body may nest
      const boost::json::value schema = boost::json::parse(c.source, ec, {}, options);
      if (ec) return Status::invalid_argument(fmt::format("the schema is not valid JSON ({})", ec.message()));
      return json_schema_grammar(schema);
    }
    case ConstraintKind::kRegex: return regex_grammar(c.source);
    case ConstraintKind::kChoice: return choice_grammar(c.choices);
    case ConstraintKind::kGrammar: return parse_gbnf(c.source);
    case ConstraintKind::kToolCall: return tool_call_constraint(c.source);
  }
  return Status::invalid_argument("unknown constraint kind");
}

namespace {

std::string cache_key(const Constraint& c) {
  std::string key = std::to_string(static_cast<int>(c.kind)) + '\0' + c.source;
  for (const std::string& choice : c.choices) key += '\0' + choice;
  return key;
}

}  // namespace

Result<std::shared_ptr<CompiledGrammar>> GrammarCache::get(const Constraint& c) {
  const std::string key = cache_key(c);
  {
    std::lock_guard lock(mu_);
    auto it = index_.find(key);
    if (it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      return it->second->second;
    }
  }
  // Compiled outside the lock: two threads may compile the same constraint once each.
  KOI_ASSIGN_OR_RETURN(Grammar g, compile_constraint(c));
  auto compiled = std::make_shared<CompiledGrammar>(std::move(g), vocab_);
  std::lock_guard lock(mu_);
  auto it = index_.find(key);
  if (it != index_.end()) return it->second->second;
  lru_.emplace_front(key, compiled);
  index_[key] = lru_.begin();
  while (lru_.size() > capacity_) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
  return compiled;
}

size_t GrammarCache::size() const {
  std::lock_guard lock(mu_);
  return lru_.size();
}

}  // namespace koi::grammar
