#include "cluster/control_plane/config.h"

#include <openssl/evp.h>

#include <cmath>
#include <set>

#include "base/file.h"
#include "cluster/control_plane/object.h"
#include "cluster/control_plane/yaml_reader.h"

namespace koi::cluster {

std::string sha256_hex(std::string_view text) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(text.data(), text.size(), digest, &len, EVP_sha256(), nullptr);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < len; ++i) {
    out += kHex[digest[i] >> 4];
    out += kHex[digest[i] & 15];
  }
  return out;
}

namespace {

void parse_token(YamlReader& r, bool admin, ControlPlaneConfig* c) {
  TokenEntry t;
  t.principal.name = r.str("name");
  t.principal.admin = admin;
  if (!valid_name(t.principal.name)) r.fail(r.field("name"), "is required: 1-63 of a-z, 0-9, '-'");
  const std::string token = r.str("token"), hash = r.str("tokenSha256");
  if (token.empty() == hash.empty()) {
    r.fail(r.field("token"), "give exactly one of token or tokenSha256");
  } else if (!token.empty()) {
    if (token.size() < 8) r.fail(r.field("token"), "must be at least 8 characters");
    t.sha256_hex = sha256_hex(token);
  } else {
    if (hash.size() != 64 || hash.find_first_not_of("0123456789abcdef") != std::string::npos) {
      r.fail(r.field("tokenSha256"), "must be 64 lower-case hex digits");
    }
    t.sha256_hex = hash;
  }
  for (const TokenEntry& e : c->tokens) {
    if (e.sha256_hex == t.sha256_hex) r.fail(r.field("token"), "is already used by " + e.principal.name);
  }
  c->tokens.push_back(t);
  if (!admin) c->tenants.push_back(t.principal.name);
}

// tenant, cohort, priority and quota of a queue, from a config entry or a manifest's spec.
void parse_queue_fields(YamlReader& q, const std::vector<std::string>& tenants, QueueSpec* s) {
  s->tenant = q.str("tenant");
  bool known = false;
  for (const std::string& t : tenants) known |= t == s->tenant;
  if (!known) q.fail(q.field("tenant"), "'" + s->tenant + "' is not one of the tenants");
  s->cohort = q.str("cohort");
  s->priority = static_cast<int>(q.int64("priority", -1000000, 1000000).value_or(0));
  YamlReader quota = q.child("quota");
  for (const std::string& resource : quota.keys()) {
    YamlReader f = quota.child(resource.c_str());
    if (resource != "cpu" && resource != "memory" && resource != "gpu" && !resource.starts_with("gpu/")) {
      quota.fail(quota.field(resource.c_str()), "unknown resource; use cpu, memory, gpu or gpu/<TYPE>");
      continue;
    }
    const double scale = resource == "memory" ? 1.0 : 1000.0;  // GPUs and CPUs in milli
    auto amount = [&](const char* key) -> int64_t {
      auto v = f.number(key, 0, 1e12);
      return v ? static_cast<int64_t>(std::llround(*v * scale)) : -1;
    };
    Quota qt{.nominal = amount("nominal"), .borrowing_limit = amount("borrowingLimit"), .lending_limit = amount("lendingLimit")};
    if (!f.has("nominal")) f.fail(f.field("nominal"), "is required");
    s->quota[resource] = qt;
  }
}

}  // namespace

Result<ControlPlaneConfig> parse_control_plane_config(const std::string& text, const std::string& origin) {
  KOI_ASSIGN_OR_RETURN(YAML::Node doc, parse_yaml(text, origin));
  YamlReader top(doc, "");
  ControlPlaneConfig c;
  c.policy = top.str("policy", "koi");
  if (auto p = policy_by_name(c.policy); !p.ok()) top.fail("policy", p.status().message());
  c.reconcile_interval_seconds = top.number("reconcileIntervalSeconds", 0.01, 60).value_or(0.2);
  YamlReader ex = top.child("executor");
  c.executor.type = ex.str("type", "local");
  if (c.executor.type != "local" && c.executor.type != "slurm") ex.fail(ex.field("type"), "must be local or slurm");
  if (c.executor.type == "slurm") {
    c.executor.partition = ex.str("partition");
    c.executor.mpi = ex.str("mpi", "pmix");
    c.executor.command_timeout_seconds = ex.number("commandTimeoutSeconds", 0.1, 600).value_or(10);
  }
  std::set<std::string> names;
  for (YamlReader& n : top.children("nodes")) {
    NodeSpec s;
    s.name = n.str("name");
    if (!valid_name(s.name)) n.fail(n.field("name"), "is required: 1-63 of a-z, 0-9, '-'");
    if (!names.insert(s.name).second) n.fail(n.field("name"), "'" + s.name + "' is declared twice");
    s.cpu_milli = static_cast<int64_t>(std::llround(n.number("cpu", 0.001, 1e6).value_or(0) * 1000));
    if (!n.has("cpu")) n.fail(n.field("cpu"), "is required (cores)");
    s.memory_mib = n.int64("memoryMiB", 1, int64_t{1} << 40).value_or(0);
    if (!n.has("memoryMiB")) n.fail(n.field("memoryMiB"), "is required");
    YamlReader g = n.child("gpus");
    s.gpu_count = static_cast<int>(g.int64("count", 0, kMaxGpusPerNode).value_or(0));
    s.gpu_type = g.str("type");
    s.gpu_memory_mib = g.int64("memoryMiB", 0, int64_t{1} << 30).value_or(0);
    if (s.gpu_count > 0 && s.gpu_type.empty()) g.fail(g.field("type"), "is required when count > 0");
    YamlReader t = n.child("topology");
    s.nvlink_domain = t.str("nvlinkDomain");
    s.leaf_switch = t.str("leafSwitch");
    s.spine = t.str("spine");
    c.nodes.push_back(std::move(s));
  }
  std::vector<YamlReader> tenants = top.children("tenants"), admins = top.children("admins");
  for (YamlReader& t : tenants) parse_token(t, false, &c);
  for (YamlReader& t : admins) parse_token(t, true, &c);
  std::set<std::string> queue_names;
  std::vector<YamlReader> queues = top.children("queues");
  for (YamlReader& q : queues) {
    QueueSpec s;
    s.name = q.str("name");
    if (!valid_name(s.name)) q.fail(q.field("name"), "is required: 1-63 of a-z, 0-9, '-'");
    if (!queue_names.insert(s.name).second) q.fail(q.field("name"), "'" + s.name + "' is declared twice");
    parse_queue_fields(q, c.tenants, &s);
    c.queues.push_back(std::move(s));
  }
  if (top.has("gateway")) {
    YamlReader g = top.child("gateway");
    c.gateway.admin_url = g.str("adminUrl");
    c.gateway.admin_key = g.str("adminKey");
    if (!c.gateway.admin_url.starts_with("http://")) {
      g.fail(g.field("adminUrl"), "is required: the koi gateway's admin API as http://HOST:PORT");
    }
    if (c.gateway.admin_key.empty()) g.fail(g.field("adminKey"), "is required: the gateway's admin.key");
  }
  KOI_RETURN_IF_ERROR(top.finish().with_prefix(origin));
  const bool slurm = c.executor.type == "slurm";
  if (slurm && !c.nodes.empty()) {
    return Status::invalid_argument(origin + ": nodes: the slurm executor takes its nodes from Slurm; remove nodes");
  }
  if (!slurm && c.nodes.empty()) {
    return Status::invalid_argument(origin + ": nodes: declare at least one node (the local executor's inventory)");
  }
  if (c.queues.empty()) return Status::invalid_argument(origin + ": queues: declare at least one queue");
  return c;
}

Result<ControlPlaneConfig> load_control_plane_config(const std::string& path) {
  KOI_ASSIGN_OR_RETURN(std::string text, read_file(path));
  return parse_control_plane_config(text, path);
}

}  // namespace koi::cluster

namespace koi::cluster {

Result<QueueSpec> parse_queue_manifest(const std::string& text, const std::string& name,
                                       const std::vector<std::string>& tenants) {
  KOI_ASSIGN_OR_RETURN(YAML::Node doc, parse_yaml(text, "queue manifest"));
  if (!doc || !doc.IsMap()) return Status::invalid_argument("queue manifest: must be a map with apiVersion, kind, metadata, spec");
  YamlReader top(doc, "");
  if (top.str("apiVersion") != kApiVersion) top.fail("apiVersion", "must be koi/v1");
  if (top.str("kind") != "Queue") top.fail("kind", "must be Queue");
  YamlReader meta = top.child("metadata");
  QueueSpec q;
  q.name = meta.str("name", name);
  if (q.name != name) meta.fail(meta.field("name"), "'" + q.name + "' does not match the URL's queue '" + name + "'");
  (void)meta.str("namespace");  // informational: the queue's tenant is spec.tenant
  (void)meta.str("resourceVersion");
  if (!top.has("spec")) top.fail("spec", "is required");
  YamlReader spec = top.child("spec");
  parse_queue_fields(spec, tenants, &q);
  KOI_RETURN_IF_ERROR(top.finish());
  return q;
}

}  // namespace koi::cluster
