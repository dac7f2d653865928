// koi cluster serve: the control plane (src/cluster/control_plane, docs/cluster.md): the
// REST API, the store, the reconcile loop and the executor the config names (local or
// slurm). SIGTERM or Ctrl-C stops it and leaves the jobs running; the next start adopts them.
// koi cluster exec: the executors' replica wrapper (internal; process/replica_wrapper.h; the
// executors prefer the koi-exec binary beside koi, which runs the same code and starts faster).
// koi cluster join: its helper that enters the replica's limit group (replica_wrapper.h).
#include <signal.h>

#include <cstdio>
#include <filesystem>

#include "cli/command.h"
#include "cluster/control_plane/control_plane.h"
#include "process/replica_wrapper.h"

namespace koi::cli {
namespace {

Runner setup_cluster(CLI::App* app) {
  app->require_subcommand(1);
  return {};
}

struct ServeFlags {
  cluster::ControlPlaneOptions options;
};

int run_serve(const ServeFlags& f) {
  cluster::ControlPlaneOptions o = f.options;
  if (o.store_url.empty()) return fail("--store is required: sqlite:PATH or postgres://...");
  if (o.config_path.empty()) return fail("--config is required: the cluster.yaml with the executor, nodes, queues and tenants");
  if (std::string e = port_error("--port", o.port); !e.empty()) return fail(e);
  std::error_code ec;
  o.koi_binary = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  if (ec) return fail("cannot find this binary (/proc/self/exe): " + ec.message());
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  auto cp = cluster::ControlPlane::start(o);
  if (!cp.ok()) return fail(cp.status().message());
  std::printf("koi cluster listening on http://%s:%d (store %s, work dir %s)\n", o.host.c_str(), (*cp)->port(),
              o.store_url.c_str(), o.work_dir.c_str());
  std::fflush(stdout);
  int sig = 0;
  sigwait(&stop_signals, &sig);
  (*cp)->stop();
  std::fprintf(stderr, "koi cluster: stopped; running jobs keep running and are adopted by the next start\n");
  return 0;
}

Runner setup_serve(CLI::App* app) {
  auto f = std::make_shared<ServeFlags>();
  f->options.work_dir = "koi-cluster-work";
  app->add_option("--store", f->options.store_url, "sqlite:PATH (embedded) or postgres://...")->required();
  app->add_option("--config", f->options.config_path, "cluster.yaml: nodes, queues, tenants (docs/cluster.md)")->required();
  app->add_option("--port", f->options.port, "port (0: any free one, printed)")->capture_default_str();
  app->add_option("--host", f->options.host, "address to listen on")->capture_default_str();
  app->add_option("--work-dir", f->options.work_dir, "replicas' working directories and logs")->capture_default_str();
  app->add_option("--threads", f->options.threads, "API worker threads")->capture_default_str()->check(CLI::Range(1, 64));
  return [f] { return run_serve(*f); };
}

Runner setup_exec(CLI::App* app) {
  auto f = std::make_shared<process::WrapperOptions>();
  app->add_option("--exit-file", f->exit_file, "where to write the exit record ('exit N' or 'signal N', ...)")->required();
  app->add_option("--pid-file", f->pid_file, "where to write this wrapper's id (pid:starttime)");
  app->add_option("--memory-mib", f->memory_mib, "memory limit of the command (0: none)")->check(CLI::NonNegativeNumber);
  app->add_option("--cpu-milli", f->cpu_milli, "CPU limit in thousandths of a core (0: none)")->check(CLI::NonNegativeNumber);
  app->add_option("command", f->argv, "the replica's command line (after --)")->required();
  return [f] {
    std::error_code ec;
    f->join_command = {std::filesystem::read_symlink("/proc/self/exe", ec).string(), "cluster", "join"};
    return process::run_replica_wrapper(*f);
  };
}

struct JoinFlags {
  std::string group;
  std::vector<std::string> command;
};

Runner setup_join(CLI::App* app) {
  auto f = std::make_shared<JoinFlags>();
  app->add_option("--group", f->group, "the limit group to enter")->required();
  app->add_option("command", f->command, "the command to exec inside it (after --)")->required();
  return [f] { return process::run_join(f->group, f->command); };
}

}  // namespace
KOI_COMMAND(cluster, "the control plane: jobs, queues, quotas, placement and healing on an executor", setup_cluster);
KOI_SUBCOMMAND(cluster, serve, "run the control plane: REST API and web console (at /), store, reconcile loop, executor (config executor.type: local or slurm)", setup_serve);
KOI_SUBCOMMAND(cluster, exec, "internal: the executors' replica wrapper", setup_exec);
KOI_SUBCOMMAND(cluster, join, "internal: enter a replica's limit group, then exec its command", setup_join);
}  // namespace koi::cli
