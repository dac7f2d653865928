// The Pipeline routes (ApiServer::add_resource("pipelines")), under /apis/v1/namespaces/{ns}/:
//
//   POST   pipelines                 submit a manifest (JSON or YAML; pipeline.h) -> 201
//   GET    pipelines                 list (kind PipelineList)
//   GET    pipelines/{name}          one, with every step's status
//   GET    pipelines/{name}/events   its events (steps started and ended, gates, registrations)
//   DELETE pipelines/{name}          cancel -> 202 (?resourceVersion=N: 409 if stale); the
//                                    controller cancels the running job steps
// and GET /apis/v1/pipelines for admins. A submit or cancel wakes the reconciler, whose
// round ends with the PipelineController.
#pragma once

#include "cluster/control_plane/api.h"
#include "cluster/control_plane/pipeline.h"

namespace koi::cluster {

ResourceHandler pipelines_resource(StateStore& store, Reconciler& reconciler, PipelineContext context);

}  // namespace koi::cluster
