#include "cluster/control_plane/model_register.h"

#include <fmt/format.h>
#include <openssl/evp.h>

#include <algorithm>
#include <boost/json.hpp>
#include <charconv>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>

#include "base/file.h"
#include "cluster/control_plane/config.h"
#include "cluster/control_plane/job_metrics.h"
#include "cluster/control_plane/reconciler.h"
#include "cluster/control_plane/yaml_reader.h"

namespace koi::cluster {
namespace json = boost::json;
namespace fs = std::filesystem;

namespace {

constexpr int kWriteRetries = 8;
constexpr size_t kHashChunk = 1 << 20;

const json::object& obj_at(const json::object& o, std::string_view key) {
  static const json::object empty;
  const json::value* v = o.if_contains(key);
  return v && v->is_object() ? v->as_object() : empty;
}

int64_t int_at(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  return v && v->is_number() ? v->to_number<int64_t>() : 0;
}

struct Sha256 {
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx{EVP_MD_CTX_new(), &EVP_MD_CTX_free};
  Sha256() { EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr); }
  void update(const void* p, size_t n) { EVP_DigestUpdate(ctx.get(), p, n); }
  std::string hex() {
    unsigned char d[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    EVP_DigestFinal_ex(ctx.get(), d, &n);
    std::string out;
    for (unsigned int i = 0; i < n; ++i) out += fmt::format("{:02x}", d[i]);
    return out;
  }
};

// Streams a file into the hash; its size.
Result<int64_t> hash_file(const std::string& path, Sha256& h) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return Status::invalid_argument("artifact: cannot read " + path);
  std::vector<char> buf(kHashChunk);
  int64_t size = 0;
  while (f) {
    f.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    const std::streamsize n = f.gcount();
    if (n <= 0) break;
    h.update(buf.data(), static_cast<size_t>(n));
    size += n;
  }
  if (f.bad()) return Status::io_error("artifact: read error in " + path);
  return size;
}

bool has_gguf_magic(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  char magic[4] = {};
  return f.read(magic, 4) && std::string_view(magic, 4) == "GGUF";
}

std::string format_of(const std::string& path) {
  if (is_directory(path)) {
    if (file_exists(path_join(path, "COMPLETE"))) return "koi";
    if (file_exists(path_join(path, "config.json"))) return "hf";
    return "";
  }
  return has_gguf_magic(path) ? "gguf" : "";
}

// The recipe's data section as lineage: data.text (a file or a list) and data.shards.
json::value recipe_data(const YAML::Node& recipe) {
  const YAML::Node data = recipe["data"];
  if (!data || !data.IsMap()) return nullptr;
  json::object out;
  if (const YAML::Node text = data["text"]; text && text.IsScalar()) {
    out["text"] = text.Scalar();
  } else if (text && text.IsSequence()) {
    json::array files;
    for (const auto& t : text) {
      if (t.IsScalar()) files.emplace_back(t.Scalar());
    }
    out["text"] = std::move(files);
  }
  if (const YAML::Node shards = data["shards"]; shards && shards.IsScalar()) out["shards"] = shards.Scalar();
  if (const YAML::Node tok = data["tokenizer"]; tok && tok.IsScalar()) out["tokenizer"] = tok.Scalar();
  return out;
}

json::array strings_json(const std::vector<std::string>& v) {
  json::array a;
  for (const auto& s : v) a.emplace_back(s);
  return a;
}

}  // namespace

Result<RegisterRequest> parse_register_request(const std::string& text) {
  KOI_ASSIGN_OR_RETURN(YAML::Node doc, parse_yaml(text, "register request"));
  if (!doc || doc.IsNull()) return Status::invalid_argument("register request is empty: send {fromJob, artifact|checkpoint, format}");
  if (!doc.IsMap()) return Status::invalid_argument("register request: must be a map {fromJob, artifact|checkpoint, format}");
  YamlReader r(doc, "");
  RegisterRequest req;
  req.from_job = r.str("fromJob");
  if (req.from_job.empty()) r.fail("fromJob", "is required (the job whose checkpoint or export this is)");
  req.checkpoint = r.str("checkpoint");
  req.artifact = r.str("artifact");
  if (!req.checkpoint.empty() && !req.artifact.empty()) r.fail("artifact", "give a checkpoint or an artifact, not both");
  if (!req.artifact.empty() && req.artifact[0] != '/') r.fail("artifact", "must be an absolute path");
  req.format = r.str("format");
  if (!req.format.empty() && req.format != "gguf" && req.format != "hf" && req.format != "koi") {
    r.fail("format", "must be gguf, hf or koi (got '" + req.format + "')");
  }
  req.eval_job = r.str("evalJob");
  YamlReader m = r.child("metrics");
  for (const std::string& k : m.keys()) {
    if (auto x = m.number(k.c_str(), -1e300, 1e300)) req.metrics[k] = *x;
  }
  req.description = r.str("description");
  KOI_RETURN_IF_ERROR(r.finish());
  return req;
}

int alias_version_at(const json::object& status, const std::string& alias, double t) {
  int version = 0;
  const json::value* h = status.if_contains("aliasHistory");
  if (!h || !h->is_array()) return 0;
  for (const json::value& e : h->as_array()) {
    if (!e.is_object()) continue;
    const json::object& o = e.as_object();
    const json::value* a = o.if_contains("alias");
    const json::value* ts = o.if_contains("timestamp");
    if (!a || !a->is_string() || a->as_string() != alias || !ts || !ts->is_number()) continue;
    if (ts->to_number<double>() > t) break;
    version = static_cast<int>(int_at(o, "version"));
  }
  return version;
}

Result<double> parse_time(const std::string& text, const std::string& field) {
  const auto bad = [&] {
    return Status::invalid_argument(fmt::format(
        "{}: '{}' is not a time; use RFC 3339 (2026-12-01T18:30:00Z, fractions allowed) or unix seconds", field, text));
  };
  double x = 0;
  if (auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), x);
      ec == std::errc() && end == text.data() + text.size()) {
    if (!std::isfinite(x) || x < 0) return bad();
    return x;
  }
  std::tm tm{};
  const char* rest = strptime(text.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
  if (!rest) return bad();
  double frac = 0;
  if (*rest == '.') {
    const char* start = rest;
    ++rest;
    while (std::isdigit(static_cast<unsigned char>(*rest))) ++rest;
    if (rest - start < 2) return bad();
    frac = std::strtod(std::string(start, rest).c_str(), nullptr);
  }
  if (std::string_view(rest) != "Z") return bad();
  return static_cast<double>(timegm(&tm)) + frac;
}

Result<ModelArtifact> read_artifact(const std::string& path, const std::string& format) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return Status::invalid_argument("artifact: " + path + " does not exist");
  ModelArtifact a;
  a.path = path;
  a.format = format.empty() ? format_of(path) : format;
  const std::string found = format_of(path);
  if (a.format.empty()) {
    return Status::invalid_argument("format: cannot tell the format of " + path +
                                    " (not a GGUF file, an HF directory or a checkpoint); name it with format");
  }
  if (a.format != found && !(a.format == "hf" && found == "koi")) {  // a checkpoint is an HF directory too
    return Status::invalid_argument(fmt::format("format: {} is not {} ({})", path, a.format,
                                                found.empty() ? "unrecognised content" : "it looks like " + found));
  }
  Sha256 h;
  if (!is_directory(path)) {
    KOI_ASSIGN_OR_RETURN(a.size_bytes, hash_file(path, h));
  } else {
    std::vector<std::string> files;
    for (auto it = fs::recursive_directory_iterator(path, ec); !ec && it != fs::recursive_directory_iterator();
         it.increment(ec)) {
      if (it->is_regular_file()) files.push_back(fs::relative(it->path(), path).string());
    }
    if (ec) return Status::io_error("artifact: cannot list " + path + ": " + ec.message());
    std::sort(files.begin(), files.end());
    for (const std::string& f : files) {
      h.update(f.data(), f.size() + 1);  // the name and its terminating NUL
      KOI_ASSIGN_OR_RETURN(int64_t n, hash_file(path_join(path, f), h));
      a.size_bytes += n;
    }
  }
  a.sha256 = h.hex();
  return a;
}

Result<JobObject> ModelRegistry::finished_job(const std::string& ns, const std::string& name, const std::string& field) {
  KOI_ASSIGN_OR_RETURN(std::optional<JobObject> job, store_.get_job(ns, name));
  if (!job) return Status::invalid_argument(fmt::format("{}: no job '{}' in namespace {}", field, name, ns));
  if (job->status.phase != JobPhase::kSucceeded) {
    return Status::invalid_argument(fmt::format("{}: job {} is {}; a version is registered from a job that has Succeeded",
                                                field, name, phase_name(job->status.phase)));
  }
  return *job;
}

Result<json::object> ModelRegistry::lineage(const JobObject& job, const std::string& checkpoint) {
  json::object l{{"job", job.metadata.name}, {"jobUid", job.metadata.uid}, {"jobKind", job_kind_name(job.spec.kind)}};
  const std::string ckpt = checkpoint.empty() ? newest_checkpoint(job_checkpoint_dir(work_dir_, job)) : checkpoint;
  if (!ckpt.empty()) {
    l["checkpoint"] = ckpt;
    l["step"] = checkpoint_step(ckpt);
  }
  if (!job.spec.recipe.empty()) {
    l["config"] = job.spec.recipe;
    if (auto text = read_file(job.spec.recipe); text.ok()) {
      l["configSha256"] = sha256_hex(*text);
      if (auto doc = parse_yaml(*text, job.spec.recipe); doc.ok()) l["data"] = recipe_data(*doc);
    }
  }
  if (!job.spec.command.empty()) l["command"] = strings_json(job.spec.command);
  if (!job.spec.args.empty()) l["args"] = strings_json(job.spec.args);
  return l;
}

Result<int> ModelRegistry::claim_version(const std::string& ns, const std::string& model, const ModelVersion& proto,
                                         const std::string& by, double now, StoredObject* out) {
  KOI_ASSIGN_OR_RETURN(std::optional<StoredObject> m, store_.get("Model", ns, model));
  int version = m ? static_cast<int>(int_at(obj_at(m->body, "status"), "latestVersion")) + 1 : 1;
  for (int attempt = 0; attempt < 1000; ++attempt, ++version) {
    ModelVersion v = proto;
    v.version = version;
    StoredObject o;
    o.kind = "ModelVersion";
    o.metadata.name = model_version_name(model, version);
    o.metadata.ns = ns;
    o.metadata.labels = {{"model", model}};
    o.body["spec"] = model_version_spec_json(v);
    o.body["status"] = json::object{{"phase", "Ready"}, {"registeredBy", by}};
    o.phase = "Ready";
    Event e;
    e.kind = "ModelVersion", e.ns = ns, e.name = o.metadata.name, e.time = now, e.reason = "Registered";
    e.message = fmt::format("version {} of {} registered by {} from job {} ({}, {} bytes, sha256 {})", version, model, by,
                            v.lineage.contains("job") ? std::string(v.lineage.at("job").as_string()) : "?",
                            v.artifact.format, v.artifact.size_bytes, v.artifact.sha256.substr(0, 12));
    Status s = store_.create(&o, {e});
    if (s.code() == StatusCode::kAlreadyExists) continue;  // a concurrent registration took it
    KOI_RETURN_IF_ERROR(s);
    *out = std::move(o);
    return version;
  }
  return Status::internal("model " + model + ": could not find a free version number");
}

Status ModelRegistry::raise_latest(const std::string& ns, const std::string& model, int version,
                                   const std::string& description, const std::string& by, double now) {
  for (int attempt = 0; attempt < kWriteRetries; ++attempt) {
    KOI_ASSIGN_OR_RETURN(std::optional<StoredObject> m, store_.get("Model", ns, model));
    Event e;
    e.kind = "Model", e.ns = ns, e.name = model, e.time = now, e.reason = "VersionRegistered";
    e.message = fmt::format("version {} registered by {}", version, by);
    Status s;
    if (!m) {
      StoredObject o;
      o.kind = "Model";
      o.metadata.name = model, o.metadata.ns = ns;
      o.body["spec"] = json::object{{"description", description}};
      o.body["status"] = json::object{{"latestVersion", version}, {"aliases", json::object{}}, {"aliasHistory", json::array{}}};
      s = store_.create(&o, {e});
      if (s.code() == StatusCode::kAlreadyExists) continue;
      return s;
    }
    json::object& status = m->body["status"].is_object() ? m->body["status"].as_object()
                                                          : m->body["status"].emplace_object();
    if (int_at(status, "latestVersion") >= version) return ok_status();
    status["latestVersion"] = version;
    s = store_.update(&*m, {e});
    if (s.code() != StatusCode::kFailedPrecondition) return s;
  }
  return Status::failed_precondition("conflict: model " + model + " changed too often to record version " +
                                     std::to_string(version) + "; retry");
}

Result<StoredObject> ModelRegistry::register_version(const std::string& ns, const std::string& model,
                                                     const RegisterRequest& req, const std::string& by, double now) {
  if (!valid_name(model)) {
    return Status::invalid_argument("model: '" + model + "' must be 1-63 characters of a-z, 0-9 and '-'");
  }
  KOI_ASSIGN_OR_RETURN(JobObject job, finished_job(ns, req.from_job, "fromJob"));
  const std::string run_dir = job_checkpoint_dir(work_dir_, job);
  std::string checkpoint, path = req.artifact;
  if (path.empty()) {
    checkpoint = req.checkpoint.empty() ? newest_checkpoint(run_dir)
                 : req.checkpoint[0] == '/' ? req.checkpoint : path_join(run_dir, req.checkpoint);
    if (checkpoint.empty()) {
      return Status::invalid_argument("checkpoint: job " + job.metadata.name + " has no complete checkpoint in " + run_dir +
                                      "; name an exported artifact instead");
    }
    if (!file_exists(path_join(checkpoint, "COMPLETE"))) {
      return Status::invalid_argument("checkpoint: " + checkpoint + " is not a complete checkpoint (no COMPLETE marker)");
    }
    path = checkpoint;
  }
  ModelVersion v;
  v.model = model;
  KOI_ASSIGN_OR_RETURN(v.artifact, read_artifact(path, req.format));
  KOI_ASSIGN_OR_RETURN(v.lineage, lineage(job, checkpoint));
  if (!req.origin.empty()) v.lineage["pipeline"] = req.origin;
  if (!req.eval_job.empty()) {
    KOI_ASSIGN_OR_RETURN(JobObject eval, finished_job(ns, req.eval_job, "evalJob"));
    KOI_ASSIGN_OR_RETURN(v.metrics, job_metrics(eval, work_dir_, executor_));
    v.lineage["evalJob"] = req.eval_job;
  } else {
    KOI_ASSIGN_OR_RETURN(v.metrics, job_metrics(job, work_dir_, executor_));
  }
  for (const auto& [k, x] : req.metrics) v.metrics[k] = x;
  StoredObject created;
  KOI_ASSIGN_OR_RETURN(int version, claim_version(ns, model, v, by, now, &created));
  KOI_RETURN_IF_ERROR(raise_latest(ns, model, version, req.description, by, now));
  return created;
}

Result<StoredObject> ModelRegistry::move_alias(const std::string& ns, const std::string& model, const std::string& alias,
                                               int version, int64_t expected_version, const std::string& by, double now) {
  if (!valid_name(alias)) {
    return Status::invalid_argument("alias: '" + alias + "' must be 1-63 characters of a-z, 0-9 and '-'");
  }
  if (alias == "latest") return Status::invalid_argument("alias: 'latest' is reserved (it always names the newest version)");
  if (version < 1) return Status::invalid_argument("version: must be >= 1");
  for (int attempt = 0; attempt < kWriteRetries; ++attempt) {
    KOI_ASSIGN_OR_RETURN(std::optional<StoredObject> m, store_.get("Model", ns, model));
    if (!m) return Status::not_found(fmt::format("model {} not found in namespace {}", model, ns));
    if (expected_version != 0 && expected_version != m->metadata.resource_version) {
      return Status::failed_precondition(fmt::format(
          "conflict: model {} is at resourceVersion {}, the request names {}; read it again and retry", model,
          m->metadata.resource_version, expected_version));
    }
    KOI_ASSIGN_OR_RETURN(std::optional<StoredObject> mv, store_.get("ModelVersion", ns, model_version_name(model, version)));
    json::object& status = m->body["status"].is_object() ? m->body["status"].as_object() : m->body["status"].emplace_object();
    if (!mv) {
      return Status::invalid_argument(fmt::format("version: model {} has no version {} (latest is {})", model, version,
                                                  int_at(status, "latestVersion")));
    }
    json::object& aliases = status["aliases"].is_object() ? status["aliases"].as_object() : status["aliases"].emplace_object();
    const int previous = static_cast<int>(int_at(aliases, alias));
    if (previous == version) return *m;  // already there: nothing moved, nothing to record
    aliases[alias] = version;
    json::array& history = status["aliasHistory"].is_array() ? status["aliasHistory"].as_array()
                                                              : status["aliasHistory"].emplace_array();
    history.push_back(json::object{{"alias", alias}, {"version", version}, {"previous", previous},
                                   {"time", rfc3339(now)}, {"timestamp", now}, {"by", by}});
    Event e;
    e.kind = "Model", e.ns = ns, e.name = model, e.time = now, e.reason = "AliasMoved";
    e.message = previous ? fmt::format("{}: version {} -> {} by {}", alias, previous, version, by)
                         : fmt::format("{}: version {} (new alias) by {}", alias, version, by);
    Status s = store_.update(&*m, {e});
    if (s.ok()) return *m;
    if (s.code() != StatusCode::kFailedPrecondition || expected_version != 0) return s;
  }
  return Status::failed_precondition("conflict: model " + model + " changed too often; retry");
}

Result<std::vector<StoredObject>> ModelRegistry::versions(const std::string& ns, const std::string& model) {
  KOI_ASSIGN_OR_RETURN(std::vector<StoredObject> all, store_.list("ModelVersion", ns));
  std::vector<StoredObject> out;
  for (StoredObject& o : all) {
    auto it = o.metadata.labels.find("model");
    if (it != o.metadata.labels.end() && it->second == model) out.push_back(std::move(o));
  }
  return out;
}

}  // namespace koi::cluster
