#include "cluster/control_plane/model_api.h"

#include <fmt/format.h>

#include <boost/beast/http/verb.hpp>
#include <boost/json.hpp>
#include <charconv>

#include "cluster/control_plane/yaml_reader.h"

namespace koi::cluster {
namespace json = boost::json;
namespace http = boost::beast::http;

namespace {

Reply method_not_allowed(const std::string& what, const std::string& allowed) {
  return {405, status_json(405, "MethodNotAllowed", what + ": use " + allowed)};
}

Reply list_reply(const std::string& kind, const std::vector<StoredObject>& objects) {
  json::array items;
  for (const StoredObject& o : objects) items.push_back(o.to_json());
  return json_reply(json::object{{"apiVersion", kApiVersion}, {"kind", kind}, {"items", std::move(items)}});
}

Status model_not_found(const std::string& name, const std::string& ns) {
  return Status::not_found(fmt::format("model {} not found in namespace {}", name, ns));
}

// ?at=TIME, when given.
Result<std::optional<double>> at_of(const ResourceRequest& r) {
  auto it = r.query.find("at");
  if (it == r.query.end()) return std::optional<double>();
  KOI_ASSIGN_OR_RETURN(double t, parse_time(it->second, "at"));
  return std::optional<double>(t);
}

Result<int> version_of(const std::string& text, const std::string& field) {
  std::string_view s = text;
  if (s.starts_with("v")) s.remove_prefix(1);
  int n = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
  if (ec != std::errc() || end != s.data() + s.size() || n < 1) {
    return Status::invalid_argument(fmt::format("{}: '{}' is not a version number (1, 2, ... or v1, v2, ...)", field, text));
  }
  return n;
}

Result<int64_t> resource_version_param(const ResourceRequest& r) {
  auto it = r.query.find("resourceVersion");
  if (it == r.query.end() || it->second.empty()) return int64_t{0};
  int64_t n = 0;
  auto [end, ec] = std::from_chars(it->second.data(), it->second.data() + it->second.size(), n);
  if (ec != std::errc() || end != it->second.data() + it->second.size() || n < 1) {
    return Status::invalid_argument("resourceVersion: '" + it->second + "' must be a positive integer");
  }
  return n;
}

Reply get_model(StateStore& store, const ResourceRequest& r) {
  auto at = at_of(r);
  if (!at.ok()) return error_reply(at.status());
  auto m = store.get("Model", r.ns, r.path[0]);
  if (!m.ok()) return error_reply(m.status());
  if (!*m) return error_reply(model_not_found(r.path[0], r.ns));
  json::object obj = (*m)->to_json();
  if (*at) {
    json::object& status = obj["status"].as_object();
    json::object held;
    if (const json::value* a = status.if_contains("aliases"); a && a->is_object()) {
      for (const auto& [alias, v] : a->as_object()) {
        held[alias] = alias_version_at(status, std::string(alias), **at);
      }
    }
    status["aliasesAt"] = json::object{{"time", rfc3339(**at)}, {"timestamp", **at}, {"aliases", std::move(held)}};
  }
  return json_reply(obj);
}

Reply register_version(ModelRegistry& registry, const ResourceRequest& r) {
  auto req = parse_register_request(r.body);
  if (!req.ok()) return error_reply(req.status());
  auto v = registry.register_version(r.ns, r.path[0], *req, r.who.name, wall_seconds());
  if (!v.ok()) return error_reply(v.status());
  return json_reply(v->to_json(), 201);
}

Reply get_alias(StateStore& store, const ResourceRequest& r) {
  auto at = at_of(r);
  if (!at.ok()) return error_reply(at.status());
  auto m = store.get("Model", r.ns, r.path[0]);
  if (!m.ok()) return error_reply(m.status());
  if (!*m) return error_reply(model_not_found(r.path[0], r.ns));
  const json::value* st = (*m)->body.if_contains("status");
  const json::object status = st && st->is_object() ? st->as_object() : json::object{};
  const std::string& alias = r.path[2];
  int version = 0;
  json::object out{{"model", r.path[0]}, {"alias", alias}};
  if (*at) {
    version = alias_version_at(status, alias, **at);
    out["at"] = rfc3339(**at);
    out["timestamp"] = **at;
  } else if (const json::value* a = status.if_contains("aliases"); a && a->is_object()) {
    if (const json::value* v = a->as_object().if_contains(alias); v && v->is_number()) version = v->to_number<int>();
  }
  if (version == 0) {
    return error_reply(Status::not_found(*at ? fmt::format("model {} alias '{}' pointed at no version at {}", r.path[0], alias,
                                                           rfc3339(**at))
                                             : fmt::format("model {} has no alias '{}'", r.path[0], alias)));
  }
  out["version"] = version;
  return json_reply(out);
}

Reply put_alias(ModelRegistry& registry, const ResourceRequest& r) {
  auto doc = parse_yaml(r.body, "alias request");
  if (!doc.ok()) return error_reply(doc.status());
  if (!doc->IsMap()) return error_reply(Status::invalid_argument("alias request: must be a map {version[, resourceVersion]}"));
  YamlReader body(*doc, "");
  const std::optional<int64_t> version = body.int64("version", 1, 1 << 30);
  if (body.ok() && !version) body.fail("version", "is required (the version the alias moves to)");
  std::optional<int64_t> expected = body.int64("resourceVersion", 1, INT64_MAX);
  if (Status s = body.finish(); !s.ok()) return error_reply(s);
  auto param = resource_version_param(r);
  if (!param.ok()) return error_reply(param.status());
  const int64_t rv = expected ? *expected : *param;
  auto m = registry.move_alias(r.ns, r.path[0], r.path[2], static_cast<int>(*version), rv, r.who.name, wall_seconds());
  if (!m.ok()) return error_reply(m.status());
  return json_reply(m->to_json());
}

Reply route_model(ModelRegistry& registry, StateStore& store, const ResourceRequest& r) {
  const bool get = r.method == http::verb::get;
  if (!valid_name(r.path[0])) {
    return error_reply(Status::invalid_argument("model: '" + r.path[0] + "' must be 1-63 characters of a-z, 0-9 and '-'"));
  }
  if (r.path.size() == 1) return get ? get_model(store, r) : method_not_allowed("models/" + r.path[0], "GET");
  if (r.path[1] == "versions" && r.path.size() == 2) {
    if (r.method == http::verb::post) return register_version(registry, r);
    if (!get) return method_not_allowed("models/" + r.path[0] + "/versions", "GET or POST");
    auto m = store.get("Model", r.ns, r.path[0]);
    if (!m.ok()) return error_reply(m.status());
    if (!*m) return error_reply(model_not_found(r.path[0], r.ns));
    auto vs = registry.versions(r.ns, r.path[0]);
    if (!vs.ok()) return error_reply(vs.status());
    return list_reply("ModelVersionList", *vs);
  }
  if (r.path[1] == "versions" && r.path.size() == 3) {
    if (!get) return method_not_allowed("a model version", "GET");
    auto n = version_of(r.path[2], "version");
    if (!n.ok()) return error_reply(n.status());
    auto v = store.get("ModelVersion", r.ns, model_version_name(r.path[0], *n));
    if (!v.ok()) return error_reply(v.status());
    if (!*v) return error_reply(Status::not_found(fmt::format("model {} has no version {} in namespace {}", r.path[0], *n, r.ns)));
    return json_reply((*v)->to_json());
  }
  if (r.path[1] == "aliases" && r.path.size() == 3) {
    if (get) return get_alias(store, r);
    if (r.method == http::verb::put) return put_alias(registry, r);
    return method_not_allowed("an alias", "GET or PUT");
  }
  return error_reply(Status::not_found("no route models/" + r.path[0] + "/" + r.path[1] +
                                       ": use models/NAME, models/NAME/versions[/N] or models/NAME/aliases/ALIAS"));
}

}  // namespace

ResourceHandler models_resource(ModelRegistry& registry, StateStore& store) {
  return [&registry, &store](const ResourceRequest& r) -> Reply {
    if (r.path.empty()) {
      if (r.method != http::verb::get) {
        return method_not_allowed("models", "GET (a model is created by registering its first version: "
                                            "POST models/NAME/versions)");
      }
      auto ms = store.list("Model", r.ns);
      if (!ms.ok()) return error_reply(ms.status());
      return list_reply("ModelList", *ms);
    }
    return route_model(registry, store, r);
  };
}

ResourceHandler modelversions_resource(StateStore& store) {
  return [&store](const ResourceRequest& r) -> Reply {
    if (r.method != http::verb::get) return method_not_allowed("modelversions", "GET (register with POST models/NAME/versions)");
    if (r.path.size() > 1) return error_reply(Status::not_found("no route modelversions/" + r.path[0] + "/..."));
    if (r.path.empty()) {
      auto vs = store.list("ModelVersion", r.ns);
      if (!vs.ok()) return error_reply(vs.status());
      auto it = r.query.find("model");
      if (it != r.query.end()) {
        std::erase_if(*vs, [&](const StoredObject& o) {
          auto l = o.metadata.labels.find("model");
          return l == o.metadata.labels.end() || l->second != it->second;
        });
      }
      return list_reply("ModelVersionList", *vs);
    }
    auto v = store.get("ModelVersion", r.ns, r.path[0]);
    if (!v.ok()) return error_reply(v.status());
    if (!*v) return error_reply(Status::not_found(fmt::format("modelversion {} not found in namespace {}", r.path[0], r.ns)));
    return json_reply((*v)->to_json());
  };
}

}  // namespace koi::cluster
