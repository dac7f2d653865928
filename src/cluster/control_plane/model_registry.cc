#include "cluster/control_plane/model_registry.h"

#include <fmt/format.h>

#include <boost/json.hpp>
#include <charconv>

#include "cluster/control_plane/object.h"

namespace koi::cluster {
namespace json = boost::json;

namespace {

std::string str_of(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  return v && v->is_string() ? std::string(v->as_string()) : "";
}

int64_t int_of(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  if (!v) return 0;
  if (v->is_int64()) return v->as_int64();
  if (v->is_uint64()) return static_cast<int64_t>(v->as_uint64());
  if (v->is_double()) return static_cast<int64_t>(v->as_double());
  return 0;
}

const json::object& obj_of(const json::object& o, std::string_view key) {
  static const json::object empty;
  const json::value* v = o.if_contains(key);
  return v && v->is_object() ? v->as_object() : empty;
}

// "3" or "v3" -> 3; 0 when it is not a version number.
int version_number(std::string_view s) {
  if (s.starts_with("v")) s.remove_prefix(1);
  int n = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
  return ec == std::errc() && end == s.data() + s.size() && n > 0 ? n : 0;
}

}  // namespace

std::string model_version_name(const std::string& model, int version) { return fmt::format("{}-v{}", model, version); }

Result<ModelRef> parse_model_ref(const std::string& text, const std::string& field) {
  ModelRef ref;
  const size_t at = text.find('@');
  ref.model = text.substr(0, at);
  if (!valid_name(ref.model)) {
    return Status::invalid_argument(fmt::format(
        "{}: '{}' is not a model reference: use MODEL, MODEL@ALIAS or MODEL@VERSION (names of a-z, 0-9 and '-')", field, text));
  }
  if (at == std::string::npos) return ref;
  const std::string sel = text.substr(at + 1);
  if (sel == "latest") return ref;
  if (int n = version_number(sel); n > 0) {
    ref.version = n;
    return ref;
  }
  const std::string_view digits = std::string_view(sel).substr(sel.starts_with("v") ? 1 : 0);
  if (!digits.empty() && digits.find_first_not_of("0123456789") == std::string_view::npos) {
    return Status::invalid_argument(fmt::format("{}: version '{}' must be 1 or more", field, sel));
  }
  if (!valid_name(sel)) {
    return Status::invalid_argument(fmt::format("{}: '{}' after '@' is neither a version number nor an alias name", field, sel));
  }
  ref.alias = sel;
  return ref;
}

json::object model_version_spec_json(const ModelVersion& v) {
  return json::object{{"model", v.model},
                      {"version", v.version},
                      {"artifact", json::object{{"path", v.artifact.path},
                                                {"format", v.artifact.format},
                                                {"sizeBytes", v.artifact.size_bytes},
                                                {"sha256", v.artifact.sha256}}},
                      {"lineage", v.lineage},
                      {"metrics", v.metrics}};
}

Result<ModelVersion> model_version_from_spec(const json::object& spec) {
  ModelVersion v;
  v.model = str_of(spec, "model");
  v.version = static_cast<int>(int_of(spec, "version"));
  if (v.model.empty() || v.version <= 0) return Status::corrupt("a stored ModelVersion lacks its model or version");
  const json::object& a = obj_of(spec, "artifact");
  v.artifact.path = str_of(a, "path");
  v.artifact.format = str_of(a, "format");
  v.artifact.size_bytes = int_of(a, "sizeBytes");
  v.artifact.sha256 = str_of(a, "sha256");
  v.lineage = obj_of(spec, "lineage");
  v.metrics = obj_of(spec, "metrics");
  return v;
}

Result<ModelVersion> resolve_model_ref(StateStore& store, const std::string& ns, const ModelRef& ref) {
  KOI_ASSIGN_OR_RETURN(std::optional<StoredObject> model, store.get("Model", ns, ref.model));
  if (!model) return Status::not_found(fmt::format("model {} not found in namespace {}", ref.model, ns));
  const json::object& status = obj_of(model->body, "status");
  int version = ref.version;
  if (!ref.alias.empty()) {
    version = static_cast<int>(int_of(obj_of(status, "aliases"), ref.alias));
    if (version <= 0) return Status::not_found(fmt::format("model {} has no alias '{}'", ref.model, ref.alias));
  } else if (version == 0) {
    version = static_cast<int>(int_of(status, "latestVersion"));
    if (version <= 0) return Status::not_found(fmt::format("model {} has no versions yet", ref.model));
  }
  KOI_ASSIGN_OR_RETURN(std::optional<StoredObject> mv, store.get("ModelVersion", ns, model_version_name(ref.model, version)));
  if (!mv) return Status::not_found(fmt::format("model {} has no version {}", ref.model, version));
  return model_version_from_spec(obj_of(mv->body, "spec"));
}

}  // namespace koi::cluster
