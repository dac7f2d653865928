// koi cluster pause | resume | admission: an admin stops and restarts admissions on a running
// control plane (cluster/control_plane/admission.h); running work goes on meanwhile.
#include <fmt/format.h>

#include <boost/json.hpp>

#include "cluster/control_plane/object.h"
#include "cli/cluster_cli.h"
#include "cli/command.h"

namespace koi::cli {
namespace {
namespace json = boost::json;

struct AdmissionFlags {
  ClusterFlags cluster;
  std::string reason;
};

int print_admission(const json::value& v, const std::string& output) {
  if (*print_structured(v, output)) return 0;
  const bool paused = v.at("paused").as_bool();
  std::string line = paused ? "admission paused" : "admitting";
  if (paused) {
    const std::string by = json_text(v, {"by"}), reason = json_text(v, {"reason"});
    if (!by.empty()) line += " by " + by;
    if (const double since = json_number(v, {"since"}); since > 0) line += " " + age_of(since, cluster::wall_seconds()) + " ago";
    if (!reason.empty()) line += ": " + reason;
  }
  std::printf("%s (reconcile rounds so far: %s)\n", line.c_str(), json_text(v, {"rounds"}).c_str());
  return 0;
}

int run_admission(const AdmissionFlags& f, const char* method, std::optional<bool> paused) {
  auto client = cluster_client(f.cluster);
  if (!client.ok()) return fail(client.status().message());
  std::string body;
  if (paused) body = json::serialize(json::object{{"paused", *paused}, {"reason", f.reason}});
  auto r = client->call(method, "/apis/v1/admission", body);
  if (!r.ok()) return fail(r.status().message());
  return print_admission(*r, f.cluster.output);
}

Runner setup_change(CLI::App* app, bool paused) {
  auto f = std::make_shared<AdmissionFlags>();
  add_cluster_flags(app, &f->cluster);
  if (paused) app->add_option("--reason", f->reason, "why (shown to every waiting job's owner and in the event)");
  return [f, paused] { return run_admission(*f, "PUT", paused); };
}

Runner setup_pause(CLI::App* app) {
  app->description("Stop admitting and preempting jobs (admins). Running work goes on; exits are recorded;\n"
                   "waiting jobs say AdmissionPaused. Survives a control-plane restart.");
  return setup_change(app, true);
}

Runner setup_resume(CLI::App* app) {
  app->description("Admit again (admins): the next round plans everything that arrived or ended meanwhile.");
  return setup_change(app, false);
}

Runner setup_show(CLI::App* app) {
  auto f = std::make_shared<AdmissionFlags>();
  add_cluster_flags(app, &f->cluster);
  return [f] { return run_admission(*f, "GET", std::nullopt); };
}

}  // namespace
KOI_SUBCOMMAND(cluster, pause, "pause admissions on a running control plane (admins)", setup_pause);
KOI_SUBCOMMAND(cluster, resume, "resume admissions", setup_resume);
KOI_SUBCOMMAND(cluster, admission, "show whether admissions are paused, and the reconcile rounds so far", setup_show);
}  // namespace koi::cli
