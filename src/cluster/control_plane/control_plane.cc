#include "cluster/control_plane/control_plane.h"

#include <filesystem>

#include "base/logging.h"
#include "base/metrics.h"
#include "cluster/control_plane/admission.h"
#include "cluster/control_plane/api.h"
#include "cluster/control_plane/config.h"
#include "cluster/control_plane/deployment_api.h"
#include "cluster/control_plane/deployment_controller.h"
#include "cluster/control_plane/local_executor.h"
#include "cluster/control_plane/model_api.h"
#include "cluster/control_plane/model_register.h"
#include "cluster/control_plane/pipeline_api.h"
#include "cluster/control_plane/pipeline_controller.h"
#include "cluster/control_plane/pipeline_deploy.h"
#include "cluster/control_plane/reconciler.h"
#include "cluster/control_plane/slurm_executor.h"
#include "cluster/control_plane/state_store.h"
#include "net/server.h"

namespace koi::cluster {

struct ControlPlane::Impl {
  ControlPlaneConfig config;
  metrics::Registry registry;
  std::unique_ptr<StateStore> store;
  std::unique_ptr<Executor> executor;
  std::unique_ptr<Reconciler> reconciler;
  TrafficHistory traffic;
  std::unique_ptr<DeploymentController> deployments;
  std::unique_ptr<ModelRegistry> models;
  std::unique_ptr<PipelineController> pipelines;
  std::unique_ptr<ApiServer> api;
  std::unique_ptr<net::Server> server;
  int port = 0;
  bool stopped = false;
};

namespace {

Result<std::unique_ptr<Executor>> make_executor(const ExecutorConfig& c, const std::vector<NodeSpec>& nodes,
                                                const std::string& work_dir, const std::string& koi_binary) {
  if (c.type == "local") return std::unique_ptr<Executor>(std::make_unique<LocalExecutor>(koi_binary, nodes));
  SlurmOptions so{c.partition, c.mpi, c.command_timeout_seconds, work_dir, koi_binary};
  KOI_ASSIGN_OR_RETURN(std::unique_ptr<SlurmExecutor> slurm, SlurmExecutor::create(so));
  return std::unique_ptr<Executor>(std::move(slurm));
}

}  // namespace

ControlPlane::ControlPlane(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ControlPlane::~ControlPlane() { stop(); }
int ControlPlane::port() const { return impl_->port; }

Result<std::unique_ptr<ControlPlane>> ControlPlane::start(const ControlPlaneOptions& o) {
  auto impl = std::make_unique<Impl>();
  KOI_ASSIGN_OR_RETURN(impl->config, load_control_plane_config(o.config_path));
  KOI_ASSIGN_OR_RETURN(Policy policy, policy_by_name(impl->config.policy));
  std::error_code ec;
  std::filesystem::create_directories(o.work_dir, ec);
  if (ec) return Status::io_error("--work-dir " + o.work_dir + ": " + ec.message());
  const std::string work_dir = std::filesystem::absolute(o.work_dir).string();
  KOI_ASSIGN_OR_RETURN(impl->store, StateStore::open(o.store_url));
  KOI_ASSIGN_OR_RETURN(impl->executor, make_executor(impl->config.executor, impl->config.nodes, work_dir, o.koi_binary));
  impl->config.nodes = impl->executor->inventory();  // Slurm's nodes are the declared ones
  KOI_RETURN_IF_ERROR(impl->store->sync_config(impl->config));
  ReconcilerOptions ro{work_dir, o.koi_binary, policy, impl->config.reconcile_interval_seconds};
  impl->reconciler = std::make_unique<Reconciler>(*impl->store, *impl->executor,
                                                  make_cluster(impl->executor->inventory(), impl->config.queues),
                                                  impl->registry, ro);
  impl->deployments = std::make_unique<DeploymentController>(*impl->store, *impl->reconciler, impl->traffic,
                                                             impl->config.gateway, o.koi_binary);
  impl->reconciler->add_controller(impl->deployments.get());
  KOI_RETURN_IF_ERROR(restore_admission(*impl->store, *impl->reconciler));
  KOI_RETURN_IF_ERROR(impl->reconciler->recover(wall_seconds()));
  KOI_ASSIGN_OR_RETURN(std::vector<TokenEntry> tokens, impl->store->tokens());
  impl->api = std::make_unique<ApiServer>(*impl->store, *impl->reconciler, *impl->executor, impl->registry,
                                          std::move(tokens), work_dir);
  add_deployment_routes(*impl->api, *impl->store, *impl->reconciler, impl->traffic,
                        !impl->config.gateway.admin_url.empty());
  impl->models = std::make_unique<ModelRegistry>(*impl->store, *impl->executor, work_dir);
  impl->api->add_resource("models", models_resource(*impl->models, *impl->store));
  impl->api->add_resource("modelversions", modelversions_resource(*impl->store));
  impl->pipelines = std::make_unique<PipelineController>(*impl->store, *impl->models, *impl->executor,
                                                         *impl->reconciler, work_dir);
  impl->pipelines->set_deploy_step(make_deploy_step(*impl->store, *impl->reconciler));
  const PipelineContext pipeline_context{work_dir, o.koi_binary, impl->pipelines->deploy_available()};
  impl->api->add_resource("pipelines", pipelines_resource(*impl->store, *impl->reconciler, pipeline_context));
  impl->reconciler->add_controller(impl->pipelines.get());
  net::ServerOptions so;
  so.host = o.host;
  so.port = o.port;
  so.threads = o.threads;
  so.error_content_type = "application/json";
  so.error_body = [](int status, std::string_view message, std::string_view code) {
    return status_json(status, code, message);
  };
  impl->server = std::make_unique<net::Server>(so, impl->api->handler());
  KOI_ASSIGN_OR_RETURN(impl->port, impl->server->listen());
  impl->reconciler->start();
  impl->server->start();
  return std::unique_ptr<ControlPlane>(new ControlPlane(std::move(impl)));
}

void ControlPlane::stop() {
  if (!impl_ || impl_->stopped) return;
  impl_->stopped = true;
  impl_->server->stop();
  impl_->reconciler->stop();
  impl_->executor->detach();
}

}  // namespace koi::cluster
