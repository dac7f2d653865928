#include "cluster/control_plane/yaml_reader.h"

#include <fmt/format.h>

#include <cmath>

namespace koi::cluster {

YamlReader::YamlReader(YAML::Node node, std::string path)
    : YamlReader(std::make_shared<Shared>(), std::move(node), std::move(path)) {}

YamlReader::YamlReader(std::shared_ptr<Shared> shared, YAML::Node node, std::string path)
    : shared_(std::move(shared)), node_(std::move(node)), path_(std::move(path)) {
  if (node_ && !node_.IsNull() && !node_.IsMap()) {
    fail(path_.empty() ? "(document)" : path_, "must be a map");
    node_ = YAML::Node(YAML::NodeType::Map);
  }
  if (!node_ || node_.IsNull()) node_ = YAML::Node(YAML::NodeType::Map);
  index_ = shared_->maps.size();
  shared_->maps.push_back({node_, path_, {}});
}

void YamlReader::fail(const std::string& field, const std::string& message) {
  if (shared_->error.empty()) shared_->error = field + ": " + message;
}

bool YamlReader::has(const char* key) const {
  const YAML::Node v = node_[key];
  return v && !v.IsNull();
}

std::optional<YAML::Node> YamlReader::get(const char* key) {
  shared_->maps[index_].read.insert(key);
  YAML::Node v = node_[key];
  if (!v || v.IsNull()) return std::nullopt;
  return v;
}

std::string YamlReader::str(const char* key, std::string fallback) {
  const std::optional<YAML::Node> ov = get(key);
  if (!ov) return fallback;
  const YAML::Node& v = *ov;
  if (!v.IsScalar()) {
    fail(field(key), "must be a string");
    return fallback;
  }
  return v.Scalar();
}

// `x`, or nullopt with the error naming the field when it is outside [min, max].
template <typename T>
std::optional<T> YamlReader::in_range(const char* key, T x, T min, T max) {
  if (x < min) {
    fail(field(key), fmt::format("must be >= {}", min));
    return std::nullopt;
  }
  if (x > max) {
    fail(field(key), fmt::format("must be <= {}", max));
    return std::nullopt;
  }
  return x;
}

std::optional<int64_t> YamlReader::int64(const char* key, int64_t min, int64_t max) {
  const std::optional<YAML::Node> ov = get(key);
  if (!ov) return std::nullopt;
  const YAML::Node& v = *ov;
  int64_t x = 0;
  if (!v.IsScalar() || !YAML::convert<int64_t>::decode(v, x)) {
    fail(field(key), "must be an integer");
    return std::nullopt;
  }
  return in_range(key, x, min, max);
}

std::optional<double> YamlReader::number(const char* key, double min, double max) {
  const std::optional<YAML::Node> ov = get(key);
  if (!ov) return std::nullopt;
  const YAML::Node& v = *ov;
  double x = 0;
  if (!v.IsScalar() || !YAML::convert<double>::decode(v, x) || !std::isfinite(x)) {
    fail(field(key), "must be a number");
    return std::nullopt;
  }
  return in_range(key, x, min, max);
}

std::optional<bool> YamlReader::boolean(const char* key) {
  const std::optional<YAML::Node> ov = get(key);
  if (!ov) return std::nullopt;
  const YAML::Node& v = *ov;
  bool x = false;
  if (!v.IsScalar() || !YAML::convert<bool>::decode(v, x)) {
    fail(field(key), "must be true or false");
    return std::nullopt;
  }
  return x;
}

std::vector<std::string> YamlReader::strings(const char* key) {
  const std::optional<YAML::Node> ov = get(key);
  std::vector<std::string> out;
  if (!ov) return out;
  const YAML::Node& v = *ov;
  if (!v.IsSequence()) {
    fail(field(key), "must be a list of strings");
    return out;
  }
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].IsScalar()) {
      fail(fmt::format("{}[{}]", field(key), i), "must be a string");
      return {};
    }
    out.push_back(v[i].Scalar());
  }
  return out;
}

std::vector<int64_t> YamlReader::ints(const char* key, int64_t min, int64_t max) {
  const std::optional<YAML::Node> ov = get(key);
  std::vector<int64_t> out;
  if (!ov) return out;
  const YAML::Node& v = *ov;
  if (!v.IsSequence()) {
    fail(field(key), "must be a list of integers");
    return out;
  }
  for (size_t i = 0; i < v.size(); ++i) {
    int64_t x = 0;
    if (!v[i].IsScalar() || !YAML::convert<int64_t>::decode(v[i], x) || x < min || x > max) {
      fail(fmt::format("{}[{}]", field(key), i), fmt::format("must be an integer in [{}, {}]", min, max));
      return {};
    }
    out.push_back(x);
  }
  return out;
}

std::map<std::string, std::string> YamlReader::string_map(const char* key) {
  const std::optional<YAML::Node> ov = get(key);
  std::map<std::string, std::string> out;
  if (!ov) return out;
  const YAML::Node& v = *ov;
  if (!v.IsMap()) {
    fail(field(key), "must be a map of strings");
    return out;
  }
  for (const auto& kv : v) {
    if (!kv.second.IsScalar()) {
      fail(field(key) + "." + kv.first.Scalar(), "must be a string");
      return {};
    }
    out[kv.first.Scalar()] = kv.second.Scalar();
  }
  return out;
}

YamlReader YamlReader::child(const char* key) {
  const std::optional<YAML::Node> v = get(key);
  return YamlReader(shared_, v ? *v : YAML::Node(YAML::NodeType::Map), field(key));
}

std::vector<YamlReader> YamlReader::children(const char* key) {
  const std::optional<YAML::Node> ov = get(key);
  std::vector<YamlReader> out;
  if (!ov) return out;
  const YAML::Node& v = *ov;
  if (!v.IsSequence()) {
    fail(field(key), "must be a list");
    return out;
  }
  for (size_t i = 0; i < v.size(); ++i) out.push_back(YamlReader(shared_, v[i], fmt::format("{}[{}]", field(key), i)));
  return out;
}

YAML::Node YamlReader::raw(const char* key) { return get(key).value_or(YAML::Node()); }

std::vector<std::string> YamlReader::keys() const {
  std::vector<std::string> out;
  for (const auto& kv : node_) out.push_back(kv.first.Scalar());
  return out;
}

Status YamlReader::finish() {
  for (const Entry& e : shared_->maps) {
    if (!shared_->error.empty()) break;
    for (const auto& kv : e.node) {
      const std::string k = kv.first.IsScalar() ? kv.first.Scalar() : "?";
      if (!e.read.count(k)) {
        fail(e.path.empty() ? k : e.path + "." + k, "unknown field");
        break;
      }
    }
  }
  if (shared_->error.empty()) return ok_status();
  return Status::invalid_argument(shared_->error);
}

Result<YAML::Node> parse_yaml(const std::string& text, const std::string& origin) {
  try {
    return YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    return Status::invalid_argument(fmt::format("{}: not valid YAML or JSON (line {}): {}", origin, e.mark.line + 1, e.msg));
  } catch (const YAML::Exception& e) {
    return Status::invalid_argument(fmt::format("{}: not valid YAML or JSON: {}", origin, e.what()));
  }
}

}  // namespace koi::cluster
