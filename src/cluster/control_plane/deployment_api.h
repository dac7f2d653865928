// The Deployment routes of the control plane's API (api.h: add_resource("deployments")):
//
//   POST   /apis/v1/namespaces/{ns}/deployments               apply: create or replace the spec
//                                                            (YAML or JSON; 201 created, 200 updated)
//   GET    /apis/v1/namespaces/{ns}/deployments               list
//   GET    /apis/v1/namespaces/{ns}/deployments/{name}        one, with its status
//   GET    /apis/v1/namespaces/{ns}/deployments/{name}/status its status alone
//   GET    /apis/v1/namespaces/{ns}/deployments/{name}/events its events, oldest first
//   GET    /apis/v1/namespaces/{ns}/deployments/{name}/metrics
//              its recent traffic, a point a second, oldest first (deployment_traffic.h):
//              {kind: DeploymentMetrics, points: [{time, replicas, qps, errorsPerSecond,
//              ttftP50Ms, ttftP99Ms, e2eP50Ms, e2eP99Ms, itlP50Ms, itlP99Ms, tokensPerSecond,
//              running, waiting, kvCacheUsage}]}
//   POST   /apis/v1/namespaces/{ns}/deployments/{name}/rollback
//              abort the rollout in progress, or go back to the previous version (202;
//              409 when there is neither)
//   DELETE /apis/v1/namespaces/{ns}/deployments/{name}        drain and stop every replica,
//              then remove the object (202)
//   GET    /apis/v1/deployments                               every namespace (admins)
// A tenant reaches only its own namespace (the ApiServer checks it before the handler runs).
#pragma once

#include "cluster/control_plane/api.h"
#include "cluster/control_plane/deployment_traffic.h"

namespace koi::cluster {

// Registers the routes on `api` (before it serves). `gateway_configured` false makes apply
// a 409 that says to configure the gateway. `traffic` is what the DeploymentController records.
void add_deployment_routes(ApiServer& api, StateStore& store, Reconciler& reconciler, const TrafficHistory& traffic,
                           bool gateway_configured);

}  // namespace koi::cluster
