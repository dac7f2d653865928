// A pipeline's deploy step, joined to Deployments. The step's map is a Deployment: `name`
// (its metadata.name) and the fields of a Deployment's spec (deployment.h); `model` may be
// left out, and then it is the version the pipeline made (the alias its promote step moved,
// else the version its register step wrote). So
//
//   - name: serve
//     deploy: {name: fortunes, replicas: {min: 1, max: 1}, resources: {cpu: 1, memoryMiB: 1024}}
//
// applies the Deployment "fortunes" for fortunes@production; a Deployment that exists gets the
// new spec (a moved alias or a new version rolls out as for any apply).
#pragma once

#include <boost/json/object.hpp>
#include <string>

#include "base/status.h"
#include "cluster/control_plane/pipeline_controller.h"
#include "cluster/control_plane/reconciler.h"
#include "cluster/control_plane/state_store.h"

namespace koi::cluster {

// The Deployment manifest (JSON) a deploy step's map stands for.
std::string deploy_step_manifest(const boost::json::object& deploy, const std::string& model_ref);
// Checks a deploy step's map at the pipeline's submit, as apply would (with a stand-in model
// reference when the step names none): InvalidArgument "PATH: what is wrong", the path under
// `field` ("spec.steps[4].deploy.replicas.min").
Status check_deploy_step(const boost::json::object& deploy, const std::string& field);
// The DeployStep that applies it through apply_deployment(), as the API's apply does.
DeployStep make_deploy_step(StateStore& store, const Reconciler& reconciler);

}  // namespace koi::cluster
