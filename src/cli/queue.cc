// koi queue list: the queues a token may see, their usage against quota and whether they
// borrow from their cohort.
#include <fmt/format.h>

#include <yaml-cpp/yaml.h>

#include <boost/json.hpp>

#include "base/file.h"

#include "cli/cluster_cli.h"
#include "cli/command.h"

namespace koi::cli {
namespace {
namespace json = boost::json;

std::string amount(const json::object& o, const char* k) {
  const json::value* v = o.if_contains(k);
  if (!v || !v->is_number()) return "";
  return fmt::format("{:g}", v->to_number<double>());
}

int run_queue_list(const ClusterFlags& f) {
  auto client = cluster_client(f);
  if (!client.ok()) return fail(client.status().message());
  auto list = client->call("GET", "/apis/v1/queues");
  if (!list.ok()) return fail(list.status().message());
  if (*print_structured(*list, f.output)) return 0;
  std::vector<std::vector<std::string>> rows{{"NAME", "TENANT", "COHORT", "PRIORITY", "PENDING", "RUNNING", "GPU", "CPU",
                                              "MEMORY(MiB)", "BORROWING"}};
  for (const json::value& q : list->at("items").as_array()) {
    const json::object& spec = q.at("spec").as_object();
    const json::object& status = q.at("status").as_object();
    const json::object& used = status.at("used").as_object();
    const json::object& quota = spec.at("quota").as_object();
    auto cell = [&](const char* r) {
      std::string s = amount(used, r);
      if (const json::value* qt = quota.if_contains(r)) {
        s += "/" + amount(qt->as_object(), "nominal");
        if (qt->as_object().if_contains("borrowingLimit")) s += "(+" + amount(qt->as_object(), "borrowingLimit") + ")";
      }
      return s;
    };
    rows.push_back({std::string(q.at("metadata").at("name").as_string()), std::string(spec.at("tenant").as_string()),
                    std::string(spec.at("cohort").as_string()), std::to_string(spec.at("priority").to_number<int64_t>()),
                    std::to_string(status.at("pendingJobs").to_number<int64_t>()),
                    std::to_string(status.at("runningJobs").to_number<int64_t>()), cell("gpu"), cell("cpu"), cell("memory"),
                    status.at("borrowing").as_bool() ? "yes" : "no"});
  }
  print_table(rows);
  return 0;
}

int run_queue_apply(const ClusterFlags& f, const std::string& file) {
  auto text = read_file(file);
  if (!text.ok()) return fail(text.status().message());
  std::string name;
  try {
    name = YAML::Load(*text)["metadata"]["name"].as<std::string>("");
  } catch (const YAML::Exception& e) {
    return fail(file + ": not valid YAML: " + e.what());
  }
  if (name.empty()) return fail(file + ": metadata.name is required");
  auto client = cluster_client(f);
  if (!client.ok()) return fail(client.status().message());
  auto q = client->call("PUT", "/apis/v1/queues/" + name, *text);
  if (!q.ok()) return fail(file + ": " + q.status().message());
  if (*print_structured(*q, f.output)) return 0;
  std::printf("queue/%s configured\n", name.c_str());
  return 0;
}

Runner setup_queue(CLI::App* app) {
  app->require_subcommand(1);
  return {};
}

Runner setup_queue_list(CLI::App* app) {
  auto f = std::make_shared<ClusterFlags>();
  add_cluster_flags(app, f.get());
  return [f] { return run_queue_list(*f); };
}

Runner setup_queue_apply(CLI::App* app) {
  auto f = std::make_shared<ClusterFlags>();
  auto file = std::make_shared<std::string>();
  add_cluster_flags(app, f.get());
  app->add_option("-f,--filename", *file, "a Queue object (YAML or JSON)")->required();
  return [f, file] { return run_queue_apply(*f, *file); };
}

}  // namespace
KOI_COMMAND(queue, "queues on the control plane", setup_queue);
KOI_SUBCOMMAND(queue, apply, "change or add a queue (admin): quota, borrowing, priority, cohort", setup_queue_apply);
KOI_SUBCOMMAND(queue, list, "queues with usage against quota (used/nominal(+borrowing limit)) and borrowing", setup_queue_list);
}  // namespace koi::cli
