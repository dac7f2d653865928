// koi sim: replays a GPU-cluster trace through the scheduler (src/cluster) and reports job
// completion times, queueing, GPU allocation and fairness. See docs/cluster.md.
#include <fmt/format.h>

#include <cstdio>
#include <set>

#include "base/file.h"
#include "cli/command.h"
#include "cluster/simulator.h"
#include "cluster/spec.h"
#include "cluster/trace.h"

namespace koi::cli {
namespace {

using namespace koi::cluster;

struct SimFlags {
  std::string nodes, trace, policy = "koi", mode = "replay", json, svg, decisions;
  double arrival_scale = 1.0, fill_limit = 1.3;
  uint64_t seed = 1;
  int limit = 0, max_nodes_scored = 0, repeat = 1;
};

bool is_yaml(const std::string& path) {
  return path.ends_with(".yaml") || path.ends_with(".yml");
}

Result<Specs> load_nodes(const std::string& path) {
  if (is_yaml(path)) return load_specs(path);
  KOI_ASSIGN_OR_RETURN(std::vector<NodeSpec> nodes, read_alibaba_nodes(path));
  Specs s;
  s.nodes = std::move(nodes);
  return s;
}

Result<Trace> load_trace(const std::string& path) {
  if (!is_yaml(path)) return read_trace(path);
  KOI_ASSIGN_OR_RETURN(Specs specs, load_specs(path));
  Trace t;
  t.work = std::move(specs.work);
  t.rows = static_cast<int>(t.work.size());
  return t;
}

int run_sim(const SimFlags& f) {
  Result<Policy> policy = policy_by_name(f.policy);
  if (!policy.ok()) return fail("--policy: " + policy.status().message());
  if (f.mode != "replay" && f.mode != "fill") return fail("--mode must be replay or fill, got '" + f.mode + "'");
  if (f.arrival_scale <= 0) return fail("--arrival-scale must be > 0");
  if (f.fill_limit <= 0) return fail("--fill-limit must be > 0");
  if (f.repeat < 1) return fail("--repeat must be >= 1");
  Result<Specs> specs = load_nodes(f.nodes);
  if (!specs.ok()) return fail(specs.status().message());
  if (specs->nodes.empty()) return fail(f.nodes + ": defines no nodes");
  Result<Trace> trace = load_trace(f.trace);
  if (!trace.ok()) return fail(trace.status().message());
  if (f.limit > 0 && trace->work.size() > static_cast<size_t>(f.limit)) trace->work.resize(f.limit);
  if (f.mode == "replay" && !trace->has_times) {
    return fail(f.trace + ": has no creation/deletion/scheduled times, so it cannot be replayed; use --mode fill");
  }
  // Without Queue objects, every queue a trace names is an unlimited queue of its own.
  std::vector<QueueSpec> queues = specs->queues;
  if (queues.empty()) {
    std::set<std::string> seen;
    for (const WorkSpec& w : trace->work) {
      if (!seen.insert(w.queue).second) continue;
      QueueSpec q;
      q.name = w.queue;
      queues.push_back(std::move(q));
    }
  }
  Cluster cluster = make_cluster(std::move(specs->nodes), std::move(queues));
  Result<std::vector<Job>> jobs = bind_work(cluster, trace->work);
  if (!jobs.ok()) return fail(f.trace + ": " + jobs.status().message());
  std::string skipped;
  for (const auto& [reason, n] : trace->skipped_by_reason) skipped += fmt::format("{}{}: {}", skipped.empty() ? "" : ", ", reason, n);
  std::printf("trace %s: %d rows, %d skipped%s%s%s\n", f.trace.c_str(), trace->rows, trace->skipped,
              skipped.empty() ? "" : " (", skipped.c_str(), skipped.empty() ? "" : ")");

  SimOptions o;
  o.policy = std::move(*policy);
  o.policy.max_nodes_scored = f.max_nodes_scored;
  o.mode = f.mode == "fill" ? SimMode::kFill : SimMode::kReplay;
  o.arrival_scale = f.arrival_scale;
  o.repeat = f.repeat;
  o.seed = f.seed;
  o.fill_limit = f.fill_limit;
  o.record_decisions = !f.decisions.empty();
  if (o.record_decisions && o.mode != SimMode::kReplay) return fail("--decisions: only a replay admits and preempts");
  Result<SimResult> r = simulate(cluster, *jobs, o);
  if (!r.ok()) return fail(r.status().message());
  std::printf("cluster: %zu nodes, %.0f GPUs; policy %s, mode %s\n", cluster.nodes.size(),
              static_cast<double>(cluster.total_gpu_milli()) / kGpuMilli, r->policy.c_str(), r->mode.c_str());
  std::printf("jobs %d, unschedulable on an empty cluster %d\n", r->jobs, r->unschedulable);
  if (o.mode == SimMode::kReplay) {
    std::printf("finished %d, unfinished %d, preemptions %d\n", r->finished, r->unfinished, r->preemptions);
    if (r->unstable_instants > 0) {
      std::printf("warning: at %d instants the plans kept deciding for 64 rounds (a preemption cycle)\n",
                  r->unstable_instants);
    }
    std::printf("JCT avg %.0f s, p99 %.0f s; queueing avg %.0f s, p99 %.0f s; makespan %.0f s\n", r->avg_jct, r->p99_jct,
                r->avg_queueing, r->p99_queueing, r->makespan);
    std::printf("GPU allocation avg %.1f%%; unallocated GPUs while saturated %.1f%% (saturated %.0f s)\n",
                100 * r->avg_allocation, 100 * r->unallocated_at_saturation, r->saturated_seconds);
  } else {
    std::printf("placed %d, failed %d, first failure at %.1f%% arrived\n", r->finished, r->failed,
                100 * r->first_failure_arrived);
    std::printf("unallocated GPUs at 100%% arrived %.1f%%; allocation at end %.1f%%\n", 100 * r->unallocated_at_full,
                100 * r->allocation_at_end);
  }
  for (const QueueResult& q : r->queues) {
    if (o.mode == SimMode::kReplay) {
      std::printf("queue %-10s share %5.1f%%  finished %6d  avg JCT %9.0f s  finish-time fairness avg %.2f max %.2f\n",
                  q.name.c_str(), 100 * q.share, q.finished, q.avg_jct, q.avg_ftf, q.max_ftf);
    } else {  // fill mode places jobs and never runs them: no completion times to report
      std::printf("queue %-10s share %5.1f%%  placed %6d  GPUs at end %.1f\n", q.name.c_str(), 100 * q.share, q.finished,
                  q.gpu_seconds);
    }
  }
  if (!f.json.empty()) {
    Status s = write_file_atomic(f.json, sim_json(*r));
    if (!s.ok()) return fail("--json: " + s.message());
  }
  if (!f.decisions.empty()) {
    Status s = write_file_atomic(f.decisions, sim_decisions_json(*r));
    if (!s.ok()) return fail("--decisions: " + s.message());
  }
  if (!f.svg.empty()) {
    Status s = write_file_atomic(f.svg, sim_svg(*r));
    if (!s.ok()) return fail("--svg: " + s.message());
  }
  return 0;
}

Runner setup_sim(CLI::App* app) {
  auto f = std::make_shared<SimFlags>();
  app->description(
      "Replay a GPU-cluster trace through Koi's scheduler (deterministic, event-driven).\n"
      "Replay mode: jobs arrive at their submit times and run for their durations; reports JCT, queueing\n"
      "delay, makespan, GPU allocation over time, unallocated GPUs while saturated, per-queue share and\n"
      "finish-time fairness. Fill mode (the FGD paper's method): tasks sampled from the trace arrive and\n"
      "never leave until the arrived GPU demand reaches --fill-limit x capacity; reports unallocated GPUs.");
  app->add_option("--nodes", f->nodes,
                  "node list: Alibaba openb node CSV (sn,cpu_milli,memory_mib,gpu,model) or a YAML file of Node "
                  "(and Queue) objects")
      ->required();
  app->add_option("--trace", f->trace,
                  "workload: Alibaba openb pod CSV, Koi job CSV (name,submit_time,duration,queue,priority,"
                  "min_replicas,max_replicas,gpus,gpu_milli,cpu_milli,memory_mib,gpu_types,topology,preemptible) "
                  "or a YAML file of Job/Deployment objects")
      ->required();
  app->add_option("--policy", f->policy, "scheduling policy: " + policy_names())->capture_default_str();
  app->add_option("--mode", f->mode, "replay (arrival-time replay) or fill (sample until saturation)")->capture_default_str();
  app->add_option("--arrival-scale", f->arrival_scale, "replay: multiply the arrival rate by X (2 = twice as fast)")
      ->capture_default_str();
  app->add_option("--repeat", f->repeat, "replay: run the trace N times back to back (inflates the load)")
      ->capture_default_str();
  app->add_option("--fill-limit", f->fill_limit, "fill: stop when arrived GPU demand reaches X times capacity")
      ->capture_default_str();
  app->add_option("--seed", f->seed, "fill: seed of the task sampling")->capture_default_str();
  app->add_option("--limit", f->limit, "use only the first N jobs of the trace (0 = all)")->capture_default_str();
  app->add_option("--max-nodes-scored", f->max_nodes_scored,
                  "score at most N feasible nodes per single-replica placement (0 = all)")
      ->capture_default_str();
  app->add_option("--json", f->json, "write the full result as JSON to FILE");
  app->add_option("--decisions", f->decisions,
                  "replay: write every instant's admissions and preemptions as JSON to FILE "
                  "([{time, admit: [names], preempt: [names]}])");
  app->add_option("--svg", f->svg, "write the GPU allocation curve as an SVG chart to FILE");
  return [f] { return run_sim(*f); };
}

}  // namespace
KOI_COMMAND(sim, "replay a GPU-cluster trace through the scheduler", setup_sim);
}  // namespace koi::cli
