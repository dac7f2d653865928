// The model registry's objects, as the store keeps them (StoredObject kinds "Model" and
// "ModelVersion", in the tenant's namespace):
//
//   kind: Model          metadata.name: fortunes
//     spec:   {description}
//     status: {latestVersion: 3, aliases: {production: 2, canary: 3},
//              aliasHistory: [{alias, version, previous, time, by}, ...]}   (oldest first)
//   kind: ModelVersion   metadata.name: fortunes-v3, labels {model: fortunes}
//     spec:   {model: fortunes, version: 3,
//              artifact: {path, format: gguf|hf|koi, sizeBytes, sha256},
//              lineage: {job, step, data, config}, metrics: {perplexity: 4.1, ...}}
//     status: {phase: Ready}
//
// A reference to a version, as a Deployment or a Pipeline names one: "fortunes@production"
// (an alias), "fortunes@3" or "fortunes@v3" (a version), "fortunes" or "fortunes@latest"
// (the newest version). resolve_model_ref() is the one reader of that syntax.
#pragma once

#include <boost/json/object.hpp>
#include <cstdint>
#include <map>
#include <string>

#include "base/status.h"
#include "cluster/control_plane/state_store.h"

namespace koi::cluster {

struct ModelArtifact {
  std::string path;
  std::string format;  // gguf | hf | koi (a koi train checkpoint)
  int64_t size_bytes = 0;
  std::string sha256;  // of the file, or of a directory's files in name order
};

struct ModelVersion {
  std::string model;
  int version = 0;
  ModelArtifact artifact;
  boost::json::object lineage;  // {job, step, data, config}
  boost::json::object metrics;  // {perplexity: ...}
};

// "fortunes-v3"
std::string model_version_name(const std::string& model, int version);

struct ModelRef {
  std::string model;
  std::string alias;  // "" when a version is named
  int version = 0;    // 0 = the alias's (or, without one, the newest)
};
// Parses "model[@alias|@N|@vN|@latest]"; InvalidArgument naming `field` when malformed.
Result<ModelRef> parse_model_ref(const std::string& text, const std::string& field);

// The version a reference names now: NotFound (in words) when the model, the alias or the
// version does not exist in `ns`.
Result<ModelVersion> resolve_model_ref(StateStore& store, const std::string& ns, const ModelRef& ref);

boost::json::object model_version_spec_json(const ModelVersion& v);
Result<ModelVersion> model_version_from_spec(const boost::json::object& spec);

}  // namespace koi::cluster
