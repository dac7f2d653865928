// Admission pause: an admin stops plan() from admitting or preempting anything while the
// running work goes on (a maintenance window, an incident; Slurm's partition state DOWN and
// Kueue's ClusterQueue stopPolicy Hold do the same). Exits, stops and healing are still
// recorded; waiting jobs say AdmissionPaused; resuming plans everything that arrived or ended
// meanwhile in one round.
//
//   GET /apis/v1/admission   {paused, reason, by, since, rounds}   any token
//   PUT /apis/v1/admission   {paused: bool, reason?: text}         admins (403 for tenants)
//
// `rounds` counts the reconcile rounds completed, so a caller can tell the loop has caught up
// (two more rounds after a change have seen it). The setting is kept in the store (kind
// Admission, name "cluster") and restored at start: a paused control plane that restarts
// stays paused.
#pragma once

#include "base/status.h"
#include "cluster/control_plane/api.h"
#include "cluster/control_plane/reconciler.h"
#include "cluster/control_plane/state_store.h"

namespace koi::cluster {

struct AdmissionRequest {
  bool paused = false;
  std::string reason;
};
// The PUT body; unknown fields and a missing `paused` are errors naming the field.
Result<AdmissionRequest> parse_admission_request(const std::string& text);

// At start: the stored setting into the reconciler (none stored: admitting).
Status restore_admission(StateStore& store, Reconciler& reconciler);

// GET and PUT /apis/v1/admission.
Reply admission_route(const Principal& who, boost::beast::http::verb method, const std::string& body,
                      StateStore& store, Reconciler& reconciler);

}  // namespace koi::cluster
