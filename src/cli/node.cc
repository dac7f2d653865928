// koi node list: the executor's inventory (the declared nodes for the local executor, Slurm's
// for the slurm executor), with topology labels and whether each node takes work.
#include <fmt/format.h>

#include <boost/json.hpp>

#include "cli/cluster_cli.h"
#include "cli/command.h"

namespace koi::cli {
namespace {
namespace json = boost::json;

int run_node_list(const ClusterFlags& f) {
  auto client = cluster_client(f);
  if (!client.ok()) return fail(client.status().message());
  auto list = client->call("GET", "/apis/v1/nodes");
  if (!list.ok()) return fail(list.status().message());
  if (*print_structured(*list, f.output)) return 0;
  std::vector<std::vector<std::string>> rows{{"NAME", "CPU(USED/ALL)", "MEMORY(MiB)", "GPUS(USED/ALL)", "GPU TYPE", "GPUS IN USE",
                                              "TOPOLOGY", "STATE"}};
  for (const json::value& n : list->at("items").as_array()) {
    const json::object& spec = n.at("spec").as_object();
    const json::value* gpus = spec.if_contains("gpus");
    double cpu = 0;
    int64_t memory = 0;
    std::string in_use;
    size_t used = 0;
    if (const json::value* st = n.as_object().if_contains("status")) {
      const json::object& a = st->at("allocated").as_object();
      cpu = a.at("cpu").to_number<double>();
      memory = a.at("memoryMiB").to_number<int64_t>();
      for (const json::value& g : a.at("gpus").as_array()) in_use += (in_use.empty() ? "" : ",") + std::to_string(g.to_number<int64_t>());
      used = a.at("gpus").as_array().size();
    }
    std::string topology;
    if (const json::value* t = spec.if_contains("topology")) {
      for (const char* level : {"nvlinkDomain", "leafSwitch", "spine"}) {
        if (const json::value* v = t->as_object().if_contains(level)) {
          topology += (topology.empty() ? "" : "/") + std::string(v->as_string());
        }
      }
    }
    const json::value* unschedulable = spec.if_contains("unschedulable");
    rows.push_back({std::string(n.at("metadata").at("name").as_string()),
                    fmt::format("{:g}/{:g}", cpu, spec.at("cpu").to_number<double>()),
                    fmt::format("{}/{}", memory, spec.at("memoryMiB").to_number<int64_t>()),
                    fmt::format("{}/{}", used, gpus ? gpus->at("count").to_number<int64_t>() : 0),
                    gpus ? std::string(gpus->at("type").as_string()) : "-", in_use.empty() ? "-" : in_use,
                    topology.empty() ? "-" : topology,
                    unschedulable ? std::string(unschedulable->as_string()) : "ready"});
  }
  print_table(rows);
  return 0;
}

Runner setup_node(CLI::App* app) {
  app->require_subcommand(1);
  return {};
}

Runner setup_node_list(CLI::App* app) {
  auto f = std::make_shared<ClusterFlags>();
  add_cluster_flags(app, f.get());
  return [f] { return run_node_list(*f); };
}

}  // namespace
KOI_COMMAND(node, "nodes of the control plane's executor", setup_node);
KOI_SUBCOMMAND(node, list, "the inventory: CPUs, memory and GPUs per node", setup_node_list);
}  // namespace koi::cli
