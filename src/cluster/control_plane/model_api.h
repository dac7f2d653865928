// The model registry's routes (ApiServer::add_resource), under /apis/v1/namespaces/{ns}/:
//
//   GET  models                              list (kind ModelList)
//   GET  models/{name}[?at=TIME]             one Model; with ?at, status.aliasesAt: which
//                                            version each alias pointed at, at that time
//   GET  models/{name}/versions              its versions, oldest first
//   POST models/{name}/versions              register one (model_register.h): 201 + the
//                                            ModelVersion; the Model is created at version 1
//   GET  models/{name}/versions/{N}          one version
//   GET  models/{name}/aliases/{alias}[?at=TIME]   {alias, version[, at]}
//   PUT  models/{name}/aliases/{alias}       {version[, resourceVersion]} moves it
//                                            (?resourceVersion=N works too): 409 if stale
//   GET  modelversions[?model=M]             every ModelVersion of the namespace
//   GET  modelversions/{model}-v{N}          one
// and GET /apis/v1/models, /apis/v1/modelversions for admins (every namespace). Errors name
// the field (400), the object (404: "model x not found in namespace y", as another tenant's
// does), or the conflict (409).
#pragma once

#include "cluster/control_plane/api.h"
#include "cluster/control_plane/model_register.h"

namespace koi::cluster {

ResourceHandler models_resource(ModelRegistry& registry, StateStore& store);
ResourceHandler modelversions_resource(StateStore& store);

}  // namespace koi::cluster
