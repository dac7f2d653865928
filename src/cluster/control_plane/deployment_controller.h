// DeploymentController: makes every Deployment (deployment.h) converge, once per reconcile
// round on the reconciler's thread (reconciler.h: Controller).
//
// Replicas are Jobs: kind command running `koi serve --model ARTIFACT --port P ...`, made
// through submit_job() and labelled {deployment, version, port}, so plan() admits and places
// them within the queue's quota and the reconciler launches, heals and restarts them as any
// job; a replica the queue cannot admit waits, and plan()'s reason shows in the deployment's
// status. A replica is ready when its /health answers 200; then it is registered with the
// gateway (POST /admin/replicas {model: route, version: vN, url}); it is deregistered when
// its job stops running. Retiring a replica (scale-down, the end of a rollout, a rollback, a
// delete) drains it: deregister, wait until its own /metrics shows no running or waiting
// request (at least one second, at most rollout.drainTimeoutSeconds), then cancel its job.
//
// Each round, per deployment: resolve spec.model to a version; when it differs from the live
// one (and is not the version last rolled back from) a rollout starts and decide_rollout()
// (rollout.h) drives it; otherwise decide_scale() (autoscale.h) sets the replica count. The
// SLO window of a canary step is measured from the new replicas' /metrics (counter deltas
// since the step's weight was set) and the gateway's /admin/stats for the new version.
// `status.rollbackRequested` (POST .../deployments/NAME/rollback) aborts a rollout in
// progress, or else rolls back to the previous version (one 100% step).
//
// The replica jobs in the store are the truth: a job labelled with the deployment that the
// status does not list (a write lost to a conflict or a control-plane crash) is adopted.
// Status writes use the resourceVersion read in the same round; a conflict (the API applied
// a new spec meanwhile) is retried in the next round. The same scrapes give a TrafficPoint a
// second per deployment to `traffic` (the console's QPS and latency charts).
#pragma once

#include <deque>
#include <map>
#include <string>

#include "cluster/control_plane/config.h"
#include "cluster/control_plane/deployment.h"
#include "cluster/control_plane/deployment_traffic.h"
#include "cluster/control_plane/gateway_admin.h"
#include "cluster/control_plane/reconciler.h"
#include "cluster/control_plane/rollout.h"
#include "cluster/control_plane/serve_probe.h"

namespace koi::cluster {

class DeploymentController : public Controller {
 public:
  // `reconciler` gives the cluster (queues) and wake(); it, `store` and `traffic` must outlive this.
  DeploymentController(StateStore& store, Reconciler& reconciler, TrafficHistory& traffic, GatewayLink gateway,
                       std::string koi_binary);

  std::string name() const override { return "deployments"; }
  Status reconcile(double now) override;

 private:
  struct Work;  // one deployment's round
  // What the controller remembers between rounds (lost on restart, rebuilt from scratch).
  struct Memory {
    std::map<std::string, std::deque<std::pair<double, ServeSample>>> samples;  // job -> recent scrapes
    double window_since = 0;                                                    // the SLO window
    std::map<std::string, ServeSample> window_base;                             // job -> counters then
    GatewayVersionStats gateway_base;
    bool gateway_base_set = false;
    double last_write = 0;  // when the status was last written
    std::map<std::string, ServeSample> traffic_base;  // job -> counters at the last TrafficPoint
    double traffic_since = 0;                         // when it was taken
  };

  Status reconcile_one(StoredObject& obj, const std::vector<JobObject>& jobs, double now);
  void observe(Work& w);
  void record_traffic(Work& w);
  void drain(Work& w);
  Status roll(Work& w);
  Status scale(Work& w);
  Status start_replica(Work& w, int version, const std::string& artifact);
  void retire(Work& w, size_t index, const std::string& why);
  Status set_weights(Work& w, const std::map<int, double>& weights);
  SloWindow slo_window(Work& w, int version);
  std::optional<double> scale_metric(Work& w);
  void finish_status(Work& w);

  StateStore& store_;
  Reconciler& reconciler_;
  TrafficHistory& traffic_;
  GatewayAdmin gateway_;
  const std::string koi_binary_;
  std::map<std::string, Memory> memory_;  // by deployment uid
};

}  // namespace koi::cluster
