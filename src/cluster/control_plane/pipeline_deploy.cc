#include "cluster/control_plane/pipeline_deploy.h"

#include <fmt/format.h>

#include <boost/json.hpp>

#include "cluster/control_plane/deployment.h"
#include "cluster/control_plane/object.h"

namespace koi::cluster {
namespace json = boost::json;

std::string deploy_step_manifest(const json::object& deploy, const std::string& model_ref) {
  json::object spec = deploy;
  std::string name;
  if (const json::value* n = spec.if_contains("name")) {
    if (n->is_string()) name = std::string(n->as_string());
    spec.erase("name");
  }
  if (!spec.contains("model")) spec["model"] = model_ref;
  return json::serialize(json::object{{"apiVersion", kApiVersion},
                                      {"kind", "Deployment"},
                                      {"metadata", json::object{{"name", name}}},
                                      {"spec", std::move(spec)}});
}

Status check_deploy_step(const json::object& deploy, const std::string& field) {
  const json::value* name = deploy.if_contains("name");
  if (!name || !name->is_string() || name->as_string().empty()) {
    return Status::invalid_argument(field + ".name: is required (the Deployment's name)");
  }
  auto parsed = parse_deployment_manifest(deploy_step_manifest(deploy, "model@1"), "pipeline");
  if (parsed.ok()) return ok_status();
  // "spec.replicas.min: ..." -> "spec.steps[4].deploy.replicas.min: ..."
  std::string message = parsed.status().message();
  if (message.starts_with("spec.")) message = field + "." + message.substr(5);
  else if (message.starts_with("metadata.name")) message = field + ".name" + message.substr(13);
  else message = field + ": " + message;
  return Status::invalid_argument(message);
}

DeployStep make_deploy_step(StateStore& store, const Reconciler& reconciler) {
  return [&store, &reconciler](const std::string& ns, const json::object& deploy, const std::string& model_ref,
                               const std::string& by) -> Result<std::string> {
    const std::string manifest = deploy_step_manifest(deploy, model_ref);
    bool created = false;
    KOI_RETURN_IF_ERROR(apply_deployment(store, *reconciler.cluster(), ns, manifest, by, &created));
    const json::value* name = deploy.if_contains("name");
    return fmt::format("deployment {} {}", name && name->is_string() ? std::string(name->as_string()) : "",
                       created ? "created" : "updated");
  };
}

}  // namespace koi::cluster
