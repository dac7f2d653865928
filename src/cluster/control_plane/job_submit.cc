#include "cluster/control_plane/job_submit.h"

#include <fmt/format.h>

namespace koi::cluster {
namespace {

Status resolve_queue(const Cluster& cluster, JobObject* job) {
  const std::string& ns = job->metadata.ns;
  std::string queues;
  for (const QueueSpec& s : cluster.queues) {
    if (s.tenant == ns) queues += (queues.empty() ? "" : ", ") + s.name;
  }
  if (job->spec.queue.empty()) {
    for (const QueueSpec& s : cluster.queues) {
      if (s.tenant == ns) {
        job->spec.queue = s.name;
        return ok_status();
      }
    }
    return Status::invalid_argument("spec.queue: namespace " + ns + " has no queue");
  }
  const int qid = cluster.queue_id(job->spec.queue);
  if (qid < 0 || cluster.queues[qid].tenant != ns) {
    return Status::invalid_argument(fmt::format("spec.queue: no queue '{}' in namespace {} (its queues: {})",
                                                job->spec.queue, ns, queues.empty() ? "none" : queues));
  }
  return ok_status();
}

Status check_gpu_type(const Cluster& cluster, const JobObject& job) {
  const std::string& type = job.spec.resources.gpu_type;
  if (type.empty() || cluster.gpu_type_id(type) != kNone) return ok_status();
  std::string types;
  for (const std::string& t : cluster.gpu_types) types += (types.empty() ? "" : ", ") + t;
  return Status::invalid_argument(fmt::format("spec.resources.gpuType: no node has GPUs of type '{}' (types: {})", type,
                                              types.empty() ? "none" : types));
}

}  // namespace

Status check_job_for_cluster(const Cluster& cluster, JobObject* job) {
  KOI_RETURN_IF_ERROR(resolve_queue(cluster, job));
  return check_gpu_type(cluster, *job);
}

Status cancel_job(StateStore& store, JobObject* job, const std::string& by) {
  if (is_terminal(job->status.phase) || !job->metadata.deletion_timestamp.empty()) return ok_status();
  job->metadata.deletion_timestamp = rfc3339(wall_seconds());
  Event e;
  e.ns = job->metadata.ns, e.name = job->metadata.name, e.time = wall_seconds(), e.reason = "CancelRequested";
  e.message = "cancel requested by " + by;
  return store.update_job(job, {e});
}

Status submit_job(StateStore& store, const Cluster& cluster, JobObject* job, const std::string& by) {
  KOI_RETURN_IF_ERROR(check_job_for_cluster(cluster, job));
  Event e;
  e.ns = job->metadata.ns, e.name = job->metadata.name, e.time = wall_seconds(), e.reason = "Submitted";
  e.message = fmt::format("{} job, {} replica(s), queue {}, submitted by {}", job_kind_name(job->spec.kind),
                          job->spec.replicas, job->spec.queue, by);
  job->status.message = "waiting for the scheduler";
  return store.create_job(job, {e});
}

}  // namespace koi::cluster
