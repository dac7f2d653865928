// YamlReader: strict reading of one YAML map for the control plane's config and manifests.
// Every field read is remembered, so finish() can reject the keys nobody asked for; every
// error names the field's full path ("spec.resources.gpu: must be an integer >= 0"). The
// first error wins; later reads return their fallbacks. JSON bodies are YAML too, so one
// reader serves both. Plain value type, never throws (yaml-cpp's exceptions stop here).
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "base/status.h"

namespace koi::cluster {

class YamlReader {
 public:
  // `node` must be a map (or absent); `path` is its own path ("spec"; "" at the top).
  YamlReader(YAML::Node node, std::string path);

  bool has(const char* key) const;
  // Scalars. A present value of the wrong type is an error; absent or null returns fallback.
  std::string str(const char* key, std::string fallback = "");
  std::optional<int64_t> int64(const char* key, int64_t min, int64_t max);
  std::optional<double> number(const char* key, double min, double max);
  std::optional<bool> boolean(const char* key);
  std::vector<std::string> strings(const char* key);           // a list of strings
  std::vector<int64_t> ints(const char* key, int64_t min, int64_t max);
  std::map<std::string, std::string> string_map(const char* key);  // values as text
  // Nested map (an empty map when absent) and list of maps.
  YamlReader child(const char* key);
  std::vector<YamlReader> children(const char* key);
  // The value as written, marked read: a part another parser reads (a Pipeline's deploy step).
  YAML::Node raw(const char* key);
  // The map's keys, for maps keyed by user names (quota: {gpu: ..., cpu: ...}).
  std::vector<std::string> keys() const;

  std::string field(const char* key) const { return path_.empty() ? key : path_ + "." + key; }
  const std::string& path() const { return path_; }
  void fail(const std::string& field, const std::string& message);
  // Rejects keys that were never read (call once everything was read); returns the first error.
  Status finish();
  bool ok() const { return shared_->error.empty(); }
  const YAML::Node& node() const { return node_; }

 private:
  template <typename T>
  std::optional<T> in_range(const char* key, T x, T min, T max);
  struct Entry {
    YAML::Node node;
    std::string path;
    std::set<std::string> read;
  };
  struct Shared {
    std::string error;
    std::deque<Entry> maps;  // every map reader made from the root, for finish()
  };
  YamlReader(std::shared_ptr<Shared> shared, YAML::Node node, std::string path);
  std::optional<YAML::Node> get(const char* key);

  std::shared_ptr<Shared> shared_;
  size_t index_ = 0;
  YAML::Node node_;
  std::string path_;
};

// Parses YAML (or JSON) text into a node; syntax errors name the line.
Result<YAML::Node> parse_yaml(const std::string& text, const std::string& origin);

}  // namespace koi::cluster
