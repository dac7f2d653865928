// submit_job: the one way a Job enters the store, whether a user posted it (api.cc) or a
// controller made it (a Deployment's replicas, a Pipeline's steps). It completes and checks
// what needs the cluster: an empty spec.queue becomes the namespace's first queue; a queue of
// another namespace, or a GPU type no node has, is InvalidArgument naming the field. The job
// is created Pending with a "Submitted" event naming who submitted it. The caller wakes the
// reconciler.
#pragma once

#include <string>

#include "base/status.h"
#include "cluster/control_plane/object.h"
#include "cluster/control_plane/state_store.h"
#include "cluster/types.h"

namespace koi::cluster {

Status submit_job(StateStore& store, const Cluster& cluster, JobObject* job, const std::string& by);

// The cluster checks of submit_job() alone (the queue filled in): a Pipeline's job steps are
// checked at its submit, long before their jobs exist.
Status check_job_for_cluster(const Cluster& cluster, JobObject* job);

// Requests a job's cancel (metadata.deletionTimestamp, with a "CancelRequested" event naming
// `by`); the reconciler stops it. A job already ended or being cancelled is left as it is.
// FailedPrecondition when the job changed since it was read. The caller wakes the reconciler.
Status cancel_job(StateStore& store, JobObject* job, const std::string& by);

}  // namespace koi::cluster
