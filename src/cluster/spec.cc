#include "cluster/spec.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <cmath>
#include <memory>
#include <set>

#include "base/file.h"

namespace koi::cluster {
namespace {

// Reads fields of one YAML map, remembering the first error with its path.
class Fields {
 public:
  Fields(const YAML::Node& node, std::string where) : node_(node), where_(std::move(where)) {}

  template <typename T>
  T get(const char* key, T fallback) {
    const YAML::Node v = node_[key];
    if (!v || v.IsNull()) return fallback;
    try {
      return v.as<T>();
    } catch (const YAML::Exception&) {
      fail(fmt::format("{}.{}: '{}' is not a valid value", where_, key, v.IsScalar() ? v.Scalar() : "<map>"));
      return fallback;
    }
  }
  template <typename T>
  T require(const char* key) {
    if (!node_[key]) fail(fmt::format("{}.{} is required", where_, key));
    return get<T>(key, T{});
  }
  Fields child(const char* key) {
    const YAML::Node v = node_[key];
    if (v && !v.IsMap()) fail(fmt::format("{}.{} must be a map", where_, key));
    return Fields(v && v.IsMap() ? v : YAML::Node(YAML::NodeType::Map), where_ + "." + key, errors_);
  }
  const YAML::Node& node() const { return node_; }
  const std::string& where() const { return where_; }
  void fail(std::string message) {
    if (errors_->empty()) *errors_ = std::move(message);
  }
  const std::string& error() const { return *errors_; }

 private:
  Fields(const YAML::Node& node, std::string where, std::shared_ptr<std::string> errors)
      : node_(node), where_(std::move(where)), errors_(std::move(errors)) {}
  YAML::Node node_;
  std::string where_;
  std::shared_ptr<std::string> errors_ = std::make_shared<std::string>();
};

int64_t milli(double units) { return static_cast<int64_t>(std::llround(units * 1000.0)); }

void parse_node(Fields& spec, const std::string& name, Specs* out) {
  Fields gpus = spec.child("gpus");
  Fields topo = spec.child("topology");
  NodeSpec n{.name = name,
             .gpu_type = gpus.get<std::string>("type", ""),
             .gpu_count = gpus.get<int>("count", 0),
             .gpu_memory_mib = gpus.get<int64_t>("memoryMiB", 0),
             .mig_slices = gpus.get<int>("migSlices", 0),
             .cpu_milli = milli(spec.require<double>("cpu")),
             .memory_mib = spec.require<int64_t>("memoryMiB"),
             .nvlink_domain = topo.get<std::string>("nvlinkDomain", ""),
             .leaf_switch = topo.get<std::string>("leafSwitch", ""),
             .spine = topo.get<std::string>("spine", ""),
             .state = ""};
  if (n.gpu_count < 0 || n.gpu_count > kMaxGpusPerNode) {
    spec.fail(fmt::format("{}.gpus.count must be 0..{}", spec.where(), kMaxGpusPerNode));
  }
  if (n.gpu_count > 0 && n.gpu_type.empty()) spec.fail(fmt::format("{}.gpus.type is required when count > 0", spec.where()));
  if (n.mig_slices < 0 || n.mig_slices > 7) spec.fail(fmt::format("{}.gpus.migSlices must be 0..7", spec.where()));
  int replicas = spec.get<int>("replicas", 1);
  if (replicas < 1) spec.fail(fmt::format("{}.replicas must be at least 1", spec.where()));
  for (int i = 0; i < replicas; ++i) {
    NodeSpec copy = n;
    if (replicas > 1) copy.name = fmt::format("{}-{}", name, i);
    out->nodes.push_back(std::move(copy));
  }
}

void parse_queue(Fields& spec, const std::string& name, Specs* out) {
  QueueSpec q;
  q.name = name;
  q.tenant = spec.get<std::string>("tenant", "");
  q.cohort = spec.get<std::string>("cohort", "");
  q.priority = spec.get<int>("priority", 0);
  Fields quota = spec.child("quota");
  for (const auto& entry : quota.node()) {
    std::string resource = entry.first.as<std::string>();
    if (resource != "cpu" && resource != "memory" && resource != "gpu" && resource.rfind("gpu/", 0) != 0) {
      spec.fail(fmt::format("{}.quota.{}: unknown resource; use cpu, memory, gpu or gpu/<TYPE>", spec.where(), resource));
      continue;
    }
    Fields f(entry.second, spec.where() + ".quota." + resource);
    // GPUs and CPUs are given in whole units and stored in milli; memory stays in MiB.
    double scale = resource == "memory" ? 1.0 : 1000.0;
    auto amount = [&](const char* key) {
      double v = f.get<double>(key, -1.0);
      return v < 0 ? -1 : static_cast<int64_t>(std::llround(v * scale));
    };
    Quota qt{.nominal = amount("nominal"), .borrowing_limit = amount("borrowingLimit"), .lending_limit = amount("lendingLimit")};
    if (qt.nominal < 0) spec.fail(fmt::format("{}.quota.{}.nominal is required and must be >= 0", spec.where(), resource));
    if (!f.error().empty()) spec.fail(f.error());
    q.quota[resource] = qt;
  }
  out->queues.push_back(std::move(q));
}

void parse_work(Fields& spec, const std::string& name, bool deployment, Specs* out) {
  WorkSpec w;
  Job& j = w.job;
  j.name = name;
  w.queue = spec.get<std::string>("queue", "default");
  j.priority = spec.get<int>("priority", 0);
  Fields res = spec.child("resources");
  Request& r = j.request;
  r.cpu_milli = milli(res.get<double>("cpu", 0));
  r.memory_mib = res.get<int64_t>("memoryMiB", 0);
  r.gpus = res.get<int>("gpus", 0);
  r.mig_slices = res.get<int>("migSlices", 0);
  double fraction = res.get<double>("gpuFraction", 0);
  if (fraction > 0) {
    if (fraction > 1 || r.gpus > 1) spec.fail(fmt::format("{}.resources.gpuFraction must be in (0, 1] with at most 1 GPU", spec.where()));
    r.gpus = 1;
    r.gpu_milli = static_cast<int>(std::lround(fraction * kGpuMilli));
  }
  if (r.mig_slices > 0) r.gpus = 1;
  if (r.gpus < 0 || r.gpus > kMaxGpusPerNode) spec.fail(fmt::format("{}.resources.gpus must be 0..{}", spec.where(), kMaxGpusPerNode));
  int replicas = spec.get<int>("replicas", 1);
  if (deployment) {
    j.min_replicas = 1;
    j.max_replicas = replicas;
    j.preemptible = spec.get<bool>("preemptible", false);
  } else {
    j.min_replicas = spec.get<int>("minReplicas", replicas);
    j.max_replicas = spec.get<int>("maxReplicas", spec.node()["minReplicas"] ? j.min_replicas : replicas);
    j.preemptible = spec.get<bool>("preemptible", true);
    j.submit_time = spec.get<double>("submitTime", 0);
    j.duration = spec.get<double>("duration", -1);
  }
  if (j.min_replicas < 1 || j.max_replicas < j.min_replicas) {
    spec.fail(fmt::format("{}: replicas must be >= 1 and maxReplicas >= minReplicas", spec.where()));
  }
  std::string topology = spec.get<std::string>("topology", "none");
  if (topology == "none") {
    j.topology = Topology::kNone;
  } else if (topology == "nvlinkDomain") {
    j.topology = Topology::kNvlink;
  } else if (topology == "leafSwitch") {
    j.topology = Topology::kLeaf;
  } else if (topology == "spine") {
    j.topology = Topology::kSpine;
  } else {
    spec.fail(fmt::format("{}.topology: '{}' is not one of none, nvlinkDomain, leafSwitch, spine", spec.where(), topology));
  }
  const YAML::Node types = spec.node()["gpuTypes"];
  if (types && types.IsSequence()) {
    for (const auto& t : types) w.gpu_types.push_back(t.as<std::string>());
  } else if (types) {
    spec.fail(fmt::format("{}.gpuTypes must be a list", spec.where()));
  }
  out->work.push_back(std::move(w));
}

}  // namespace

Result<Specs> parse_specs(std::string_view yaml, const std::string& origin) {
  Specs out;
  std::vector<YAML::Node> docs;
  try {
    docs = YAML::LoadAll(std::string(yaml));
  } catch (const YAML::Exception& e) {
    return Status::invalid_argument(fmt::format("{}: not valid YAML: {}", origin, e.what()));
  }
  std::set<std::string> names;
  try {
    for (size_t d = 0; d < docs.size(); ++d) {
      const YAML::Node& doc = docs[d];
      if (doc.IsNull()) continue;
      std::string where = fmt::format("{}: document {}", origin, d + 1);
      if (!doc.IsMap()) return Status::invalid_argument(where + " is not a map");
      Fields top(doc, where);
      std::string api = top.get<std::string>("apiVersion", "koi/v1");
      if (api != "koi/v1") return Status::invalid_argument(fmt::format("{}: apiVersion '{}' is not supported; use koi/v1", where, api));
      std::string kind = top.require<std::string>("kind");
      std::string name = top.child("metadata").require<std::string>("name");
      if (!top.error().empty()) return Status::invalid_argument(top.error());
      where = fmt::format("{}: {} '{}'", origin, kind, name);
      if (!names.insert(kind + "/" + name).second) {
        return Status::invalid_argument(fmt::format("{} is defined twice; object names must be unique per kind", where));
      }
      Fields spec(doc["spec"] ? doc["spec"] : YAML::Node(YAML::NodeType::Map), where + " spec");
      if (kind == "Node") {
        parse_node(spec, name, &out);
      } else if (kind == "Queue") {
        parse_queue(spec, name, &out);
      } else if (kind == "Job" || kind == "Deployment") {
        parse_work(spec, name, kind == "Deployment", &out);
      } else {
        return Status::invalid_argument(fmt::format("{}: unknown kind '{}'; use Node, Queue, Job or Deployment", where, kind));
      }
      if (!spec.error().empty()) return Status::invalid_argument(spec.error());
    }
  } catch (const YAML::Exception& e) {
    return Status::invalid_argument(fmt::format("{}: {}", origin, e.what()));
  }
  return out;
}

Result<Specs> load_specs(const std::string& path) {
  KOI_ASSIGN_OR_RETURN(std::string text, read_file(path));
  return parse_specs(text, path);
}

Result<std::vector<Job>> bind_work(const Cluster& cluster, const std::vector<WorkSpec>& work) {
  std::vector<Job> jobs;
  for (const WorkSpec& w : work) {
    Job j = w.job;
    j.id = static_cast<int>(jobs.size());
    j.queue = cluster.queue_id(w.queue);
    if (j.queue == kNone) {
      return Status::invalid_argument(fmt::format("job '{}' names queue '{}', which is not defined; add a Queue with that name",
                                                  j.name, w.queue));
    }
    for (const std::string& t : w.gpu_types) j.gpu_types.push_back(cluster.gpu_type_id(t));
    jobs.push_back(std::move(j));
  }
  return jobs;
}

}  // namespace koi::cluster
