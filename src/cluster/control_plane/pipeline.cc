#include "cluster/control_plane/pipeline.h"

#include "cluster/control_plane/pipeline_deploy.h"

#include <fmt/format.h>

#include <boost/json.hpp>
#include <charconv>
#include <set>

#include "base/file.h"
#include "cluster/control_plane/reconciler.h"
#include "cluster/control_plane/yaml_reader.h"

namespace koi::cluster {
namespace json = boost::json;

namespace {

constexpr const char* kStepKinds[] = {"job", "gate", "register", "promote", "deploy"};
constexpr const char* kPipelinePhases[] = {"Pending", "Running", "Succeeded", "Failed", "Cancelled"};
constexpr const char* kStepPhases[] = {"Pending", "Running", "Succeeded", "Failed", "Cancelled", "Skipped"};
constexpr const char* kOps[] = {"<=", ">=", "==", "!=", "<", ">"};  // two-character ones first

std::string trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return std::string(s);
}

bool metric_name(std::string_view s) {
  if (s.empty() || !std::isalpha(static_cast<unsigned char>(s[0]))) return false;
  for (char c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  return true;
}

// --- substitutions (at submit) ---

using Vars = std::map<std::string, std::string>;

Status substitute_text(std::string* text, const std::string& path, const Vars& vars) {
  std::string out;
  size_t i = 0;
  while (i < text->size()) {
    const size_t open = text->find("${", i);
    if (open == std::string::npos) break;
    const size_t close = text->find('}', open);
    if (close == std::string::npos) return Status::invalid_argument(path + ": '${' without its closing '}'");
    const std::string name = text->substr(open + 2, close - open - 2);
    auto it = vars.find(name);
    if (it == vars.end()) {
      return Status::invalid_argument(fmt::format(
          "{}: unknown substitution ${{{}}} (known: ${{koi}}, ${{dir}}, ${{steps.STEP.checkpointDir}} and "
          "${{steps.STEP.job}} of a job step)", path, name));
    }
    out += text->substr(i, open - i) + it->second;
    i = close + 1;
  }
  if (i == 0) return ok_status();
  *text = out + text->substr(i);
  return ok_status();
}

Status substitute(YAML::Node node, const std::string& path, const Vars& vars) {
  if (node.IsScalar()) {
    std::string text = node.Scalar();
    if (text.find("${") == std::string::npos) return ok_status();
    KOI_RETURN_IF_ERROR(substitute_text(&text, path, vars));
    node = text;
  } else if (node.IsSequence()) {
    for (size_t i = 0; i < node.size(); ++i) KOI_RETURN_IF_ERROR(substitute(node[i], fmt::format("{}[{}]", path, i), vars));
  } else if (node.IsMap()) {
    for (auto kv : node) {
      const std::string key = kv.first.Scalar();
      KOI_RETURN_IF_ERROR(substitute(node[key], path + "." + key, vars));
    }
  }
  return ok_status();
}

// ${koi}, ${dir}, then every job step's run directory (made explicit in its spec) and job name.
Status substitute_steps(YAML::Node steps, const std::string& ns, const std::string& pipeline, const PipelineContext& ctx) {
  Vars vars{{"koi", ctx.koi_binary}, {"dir", pipeline_dir(ctx.work_dir, ns, pipeline)}};
  const Vars base = vars;
  for (size_t i = 0; i < steps.size(); ++i) {
    YAML::Node step = steps[i];
    if (!step.IsMap() || !step["job"] || !step["job"].IsMap() || !step["name"] || !step["name"].IsScalar()) continue;
    const std::string name = step["name"].Scalar();
    YAML::Node job = step["job"];
    JobObject j;
    j.metadata.ns = ns, j.metadata.name = step_job_name(pipeline, name);
    if (job["checkpointDir"] && job["checkpointDir"].IsScalar()) {
      std::string dir = job["checkpointDir"].Scalar();
      KOI_RETURN_IF_ERROR(substitute_text(&dir, fmt::format("spec.steps[{}].job.checkpointDir", i), base));
      j.spec.checkpoint_dir = dir;
    }
    job["checkpointDir"] = job_checkpoint_dir(ctx.work_dir, j);
    vars["steps." + name + ".checkpointDir"] = job["checkpointDir"].Scalar();
    vars["steps." + name + ".job"] = j.metadata.name;
  }
  return substitute(steps, "spec.steps", vars);
}

// --- parsing ---

json::value yaml_json(const YAML::Node& n) {
  if (n.IsMap()) {
    json::object o;
    for (const auto& kv : n) o[kv.first.Scalar()] = yaml_json(kv.second);
    return o;
  }
  if (n.IsSequence()) {
    json::array a;
    for (const auto& x : n) a.push_back(yaml_json(x));
    return a;
  }
  if (n.IsScalar()) return json::string(n.Scalar());
  return nullptr;
}

struct Parsed {
  std::vector<PipelineStep> steps;
  std::vector<std::set<std::string>> ancestors;
  int index(const std::string& name) const {
    for (size_t i = 0; i < steps.size(); ++i) {
      if (steps[i].name == name) return static_cast<int>(i);
    }
    return -1;
  }
};

// `name`, or when empty the nearest ancestor that `fits`; must be an ancestor that fits.
std::string step_ref(YamlReader& r, const char* key, const Parsed& p, const std::set<std::string>& ancestors,
                     const std::function<bool(const PipelineStep&)>& fits, const std::string& what, bool required) {
  std::string name = r.str(key);
  if (name.empty()) {
    for (int i = static_cast<int>(p.steps.size()) - 1; i >= 0 && required; --i) {
      if (ancestors.count(p.steps[i].name) && fits(p.steps[i])) return p.steps[i].name;
    }
    if (required) r.fail(r.field(key), "is required: no earlier step this one depends on is " + what);
    return "";
  }
  const int i = p.index(name);
  if (i < 0 || !ancestors.count(name)) {
    r.fail(r.field(key), "'" + name + "' is not a step this one depends on (directly or through dependsOn)");
  } else if (!fits(p.steps[i])) {
    r.fail(r.field(key), "step '" + name + "' is not " + what);
  }
  return name;
}

void parse_gate(YamlReader& g, const Parsed& p, const std::set<std::string>& ancestors, PipelineStep* s) {
  const auto is_job = [](const PipelineStep& x) { return x.kind == StepKind::kJob; };
  s->metrics_from = step_ref(g, "metricsFrom", p, ancestors, is_job, "a job step", true);
  s->condition = g.str("condition");
  if (s->condition.empty()) {
    g.fail(g.field("condition"), "is required (for example \"perplexity <= 12.5\")");
    return;
  }
  auto c = parse_gate_condition(s->condition, g.field("condition"));
  if (!c.ok()) {
    g.fail(g.field("condition"), c.status().message().substr(g.field("condition").size() + 2));
  } else {
    s->conditions = *c;
  }
}

void parse_register(YamlReader& r, const Parsed& p, const std::set<std::string>& ancestors, PipelineStep* s) {
  s->model = r.str("model");
  if (s->model.empty()) r.fail(r.field("model"), "is required (the model's name)");
  else if (!valid_name(s->model)) r.fail(r.field("model"), "must be 1-63 characters of a-z, 0-9 and '-'");
  const auto trains = [](const PipelineStep& x) {
    return x.kind == StepKind::kJob && (x.job.kind == JobKind::kTrain || x.job.kind == JobKind::kFinetune);
  };
  const auto is_job = [](const PipelineStep& x) { return x.kind == StepKind::kJob; };
  s->from = r.has("from") ? step_ref(r, "from", p, ancestors, is_job, "a job step", true)
                          : step_ref(r, "from", p, ancestors, trains, "a train or finetune job", true);
  s->artifact = r.str("artifact");
  if (!s->artifact.empty() && s->artifact[0] != '/') r.fail(r.field("artifact"), "must be an absolute path");
  s->checkpoint = r.str("checkpoint");
  if (!s->artifact.empty() && !s->checkpoint.empty()) r.fail(r.field("checkpoint"), "give a checkpoint or an artifact, not both");
  s->format = r.str("format");
  if (!s->format.empty() && s->format != "gguf" && s->format != "hf" && s->format != "koi") {
    r.fail(r.field("format"), "must be gguf, hf or koi (got '" + s->format + "')");
  }
  s->metrics_from = step_ref(r, "metricsFrom", p, ancestors, is_job, "a job step", false);
}

void parse_promote(YamlReader& r, const Parsed& p, const std::set<std::string>& ancestors, PipelineStep* s) {
  s->alias = r.str("alias");
  if (s->alias.empty()) r.fail(r.field("alias"), "is required (production, canary, ...)");
  else if (!valid_name(s->alias) || s->alias == "latest") {
    r.fail(r.field("alias"), "must be 1-63 characters of a-z, 0-9 and '-', and not 'latest'");
  }
  const auto registers = [](const PipelineStep& x) { return x.kind == StepKind::kRegister; };
  s->from = step_ref(r, "from", p, ancestors, registers, "a register step", true);
  if (const int i = p.index(s->from); i >= 0) s->model = p.steps[i].model;
}

void parse_step(YamlReader& r, const std::string& pipeline, const PipelineContext& ctx, Parsed* p) {
  PipelineStep s;
  s.name = r.str("name");
  if (s.name.empty()) r.fail(r.field("name"), "is required");
  else if (!valid_name(s.name)) r.fail(r.field("name"), "must be 1-63 characters of a-z, 0-9 and '-'");
  else if (p->index(s.name) >= 0) r.fail(r.field("name"), "'" + s.name + "' names two steps");
  std::set<std::string> ancestors;
  if (r.has("dependsOn")) {
    s.depends_on = r.strings("dependsOn");
  } else if (!p->steps.empty()) {
    s.depends_on = {p->steps.back().name};
  }
  for (size_t i = 0; i < s.depends_on.size(); ++i) {
    const int d = p->index(s.depends_on[i]);
    if (d < 0) {
      r.fail(fmt::format("{}[{}]", r.field("dependsOn"), i), "'" + s.depends_on[i] + "' is not an earlier step");
      continue;
    }
    ancestors.insert(s.depends_on[i]);
    ancestors.insert(p->ancestors[d].begin(), p->ancestors[d].end());
  }
  int kinds = 0;
  for (int k = 0; k < 5; ++k) {
    if (!r.has(kStepKinds[k])) continue;
    if (kinds++ == 0) s.kind = static_cast<StepKind>(k);
    else r.fail(r.field(kStepKinds[k]), fmt::format("a step does one thing; this one is already a {} step", kStepKinds[static_cast<int>(s.kind)]));
  }
  if (kinds == 0) r.fail(r.path(), "needs one of job, gate, register, promote, deploy");
  switch (s.kind) {
    case StepKind::kJob: {
      if (!valid_name(step_job_name(pipeline, s.name)) && valid_name(s.name)) {
        r.fail(r.field("name"), "the step's job name '" + step_job_name(pipeline, s.name) + "' is over 63 characters");
      }
      YamlReader job = r.child("job");
      parse_job_spec(job, &s.job);
      break;
    }
    case StepKind::kGate: { YamlReader g = r.child("gate"); parse_gate(g, *p, ancestors, &s); break; }
    case StepKind::kRegister: { YamlReader g = r.child("register"); parse_register(g, *p, ancestors, &s); break; }
    case StepKind::kPromote: { YamlReader g = r.child("promote"); parse_promote(g, *p, ancestors, &s); break; }
    case StepKind::kDeploy: {
      const YAML::Node d = r.raw("deploy");
      if (!ctx.deploy_available) {
        r.fail(r.field("deploy"), "deploy steps are not connected in this control plane yet (no deployment controller); "
                                  "deploy the registered model with a Deployment once it is");
      } else if (!d.IsMap()) {
        r.fail(r.field("deploy"), "must be a map");
      } else {
        s.deploy = yaml_json(d).as_object();
        if (Status st = check_deploy_step(s.deploy, r.field("deploy")); !st.ok()) {
          const std::string& m = st.message();  // "PATH: what is wrong"
          const size_t colon = m.find(": ");
          r.fail(m.substr(0, colon), colon == std::string::npos ? m : m.substr(colon + 2));
        }
      }
      break;
    }
  }
  p->steps.push_back(std::move(s));
  p->ancestors.push_back(std::move(ancestors));
}

// The spec as JSON: steps with explicit dependsOn, job steps in the Job spec's own form.
json::object spec_json(const PipelineSpec& spec) {
  json::array steps;
  for (const PipelineStep& s : spec.steps) {
    json::array deps;
    for (const auto& d : s.depends_on) deps.emplace_back(d);
    json::object o{{"name", s.name}, {"dependsOn", std::move(deps)}};
    switch (s.kind) {
      case StepKind::kJob: {
        JobObject j;
        j.spec = s.job;
        o["job"] = to_json(j).as_object().at("spec");
        break;
      }
      case StepKind::kGate: o["gate"] = json::object{{"metricsFrom", s.metrics_from}, {"condition", s.condition}}; break;
      case StepKind::kRegister: {
        json::object r{{"model", s.model}, {"from", s.from}};
        if (!s.artifact.empty()) r["artifact"] = s.artifact;
        if (!s.checkpoint.empty()) r["checkpoint"] = s.checkpoint;
        if (!s.format.empty()) r["format"] = s.format;
        if (!s.metrics_from.empty()) r["metricsFrom"] = s.metrics_from;
        o["register"] = std::move(r);
        break;
      }
      case StepKind::kPromote: o["promote"] = json::object{{"alias", s.alias}, {"from", s.from}}; break;
      case StepKind::kDeploy: o["deploy"] = s.deploy; break;
    }
    steps.push_back(std::move(o));
  }
  return json::object{{"steps", std::move(steps)}};
}

Result<PipelineSpec> parse_spec_node(YAML::Node spec_node, const std::string& pipeline, const PipelineContext& ctx) {
  YamlReader spec(spec_node, "spec");
  std::vector<YamlReader> steps = spec.children("steps");
  if (spec.ok() && steps.empty()) spec.fail("spec.steps", "is required (a list of steps)");
  Parsed p;
  for (YamlReader& s : steps) parse_step(s, pipeline, ctx, &p);
  KOI_RETURN_IF_ERROR(spec.finish());
  PipelineSpec out;
  out.steps = std::move(p.steps);
  return out;
}

double num_at(const json::object& o, std::string_view k) {
  const json::value* v = o.if_contains(k);
  return v && v->is_number() ? v->to_number<double>() : 0;
}
std::string str_at(const json::object& o, std::string_view k) {
  const json::value* v = o.if_contains(k);
  return v && v->is_string() ? std::string(v->as_string()) : "";
}

json::object status_json(const PipelineStatus& st) {
  json::array steps;
  for (const StepStatus& s : st.steps) {
    json::object o{{"name", s.name}, {"phase", step_phase_name(s.phase)}, {"message", s.message}};
    if (!s.job.empty()) o["job"] = s.job;
    if (!s.metrics.empty()) o["metrics"] = s.metrics;
    if (!s.model.empty()) o["model"] = s.model;
    if (s.version > 0) o["version"] = s.version;
    if (s.start_time > 0) o["startTime"] = s.start_time;
    if (s.finish_time > 0) o["finishTime"] = s.finish_time;
    steps.push_back(std::move(o));
  }
  json::object o{{"phase", pipeline_phase_name(st.phase)}, {"reason", st.reason}, {"message", st.message},
                 {"steps", std::move(steps)}};
  if (st.start_time > 0) o["startTime"] = st.start_time;
  if (st.finish_time > 0) o["finishTime"] = st.finish_time;
  return o;
}

template <typename E, size_t N>
E enum_of(const char* const (&names)[N], const std::string& s) {
  for (size_t i = 0; i < N; ++i) {
    if (s == names[i]) return static_cast<E>(i);
  }
  return static_cast<E>(0);
}

PipelineStatus status_from_json(const json::object& o) {
  PipelineStatus st;
  st.phase = enum_of<PipelinePhase>(kPipelinePhases, str_at(o, "phase"));
  st.reason = str_at(o, "reason");
  st.message = str_at(o, "message");
  st.start_time = num_at(o, "startTime");
  st.finish_time = num_at(o, "finishTime");
  if (const json::value* steps = o.if_contains("steps"); steps && steps->is_array()) {
    for (const json::value& v : steps->as_array()) {
      if (!v.is_object()) continue;
      const json::object& so = v.as_object();
      StepStatus s;
      s.name = str_at(so, "name");
      s.phase = enum_of<StepPhase>(kStepPhases, str_at(so, "phase"));
      s.job = str_at(so, "job");
      s.message = str_at(so, "message");
      if (const json::value* m = so.if_contains("metrics"); m && m->is_object()) s.metrics = m->as_object();
      s.model = str_at(so, "model");
      s.version = static_cast<int>(num_at(so, "version"));
      s.start_time = num_at(so, "startTime");
      s.finish_time = num_at(so, "finishTime");
      st.steps.push_back(std::move(s));
    }
  }
  return st;
}

}  // namespace

std::string_view step_kind_name(StepKind k) { return kStepKinds[static_cast<int>(k)]; }
std::string_view pipeline_phase_name(PipelinePhase p) { return kPipelinePhases[static_cast<int>(p)]; }
std::string_view step_phase_name(StepPhase p) { return kStepPhases[static_cast<int>(p)]; }
bool is_terminal(PipelinePhase p) {
  return p == PipelinePhase::kSucceeded || p == PipelinePhase::kFailed || p == PipelinePhase::kCancelled;
}

bool GateCondition::holds(double x) const {
  if (op == "<=") return x <= value;
  if (op == "<") return x < value;
  if (op == ">=") return x >= value;
  if (op == ">") return x > value;
  if (op == "==") return x == value;
  return x != value;
}

const PipelineStep* PipelineSpec::step(const std::string& name) const {
  for (const PipelineStep& s : steps) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

std::string pipeline_dir(const std::string& work_dir, const std::string& ns, const std::string& name) {
  return path_join(path_join(work_dir, ns), name + ".pipeline");
}

std::string step_job_name(const std::string& pipeline, const std::string& step) { return pipeline + "-" + step; }

Result<std::vector<GateCondition>> parse_gate_condition(const std::string& text, const std::string& field) {
  std::vector<GateCondition> out;
  std::string_view rest = text;
  for (;;) {
    const size_t amp = rest.find("&&");
    const std::string part = trim(rest.substr(0, amp));
    GateCondition c;
    size_t at = std::string::npos;
    for (const char* op : kOps) {
      if ((at = part.find(op)) != std::string::npos) {
        c.op = op;
        break;
      }
    }
    const auto bad = [&] {
      return Status::invalid_argument(fmt::format(
          "{}: '{}' is not a comparison; write METRIC OP NUMBER (OP one of <= < >= > == !=), several joined by &&", field,
          part));
    };
    if (at == std::string::npos) return bad();
    c.metric = trim(part.substr(0, at));
    const std::string value = trim(part.substr(at + c.op.size()));
    auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), c.value);
    if (!metric_name(c.metric) || value.empty() || ec != std::errc() || end != value.data() + value.size()) return bad();
    out.push_back(c);
    if (amp == std::string_view::npos) break;
    rest.remove_prefix(amp + 2);
  }
  return out;
}

Result<PipelineObject> parse_pipeline_manifest(const std::string& text, const std::string& ns, const PipelineContext& ctx) {
  KOI_ASSIGN_OR_RETURN(YAML::Node doc, manifest_document(text, "pipeline manifest"));
  YamlReader top(doc, "");
  PipelineObject p;
  read_manifest_header(top, "Pipeline", ns, &p.metadata);
  if (!top.has("spec")) top.fail("spec", "is required");
  const YAML::Node spec = top.raw("spec");
  KOI_RETURN_IF_ERROR(top.finish());
  if (!spec.IsMap()) return Status::invalid_argument("spec: must be a map with steps");
  if (spec["steps"] && spec["steps"].IsSequence()) KOI_RETURN_IF_ERROR(substitute_steps(spec["steps"], ns, p.metadata.name, ctx));
  KOI_ASSIGN_OR_RETURN(p.spec, parse_spec_node(spec, p.metadata.name, ctx));
  for (const PipelineStep& s : p.spec.steps) {
    StepStatus st;
    st.name = s.name;
    if (s.kind == StepKind::kJob) st.job = step_job_name(p.metadata.name, s.name);
    if (s.kind == StepKind::kRegister || s.kind == StepKind::kPromote) st.model = s.model;
    p.status.steps.push_back(std::move(st));
  }
  p.status.message = "waiting for the pipeline controller";
  return p;
}

StoredObject to_stored(const PipelineObject& p) {
  StoredObject o;
  o.kind = "Pipeline";
  o.metadata = p.metadata;
  o.body["spec"] = spec_json(p.spec);
  o.body["status"] = status_json(p.status);
  o.phase = std::string(pipeline_phase_name(p.status.phase));
  return o;
}

Result<PipelineObject> pipeline_from_stored(const StoredObject& o) {
  PipelineObject p;
  p.metadata = o.metadata;
  const json::value* spec = o.body.if_contains("spec");
  if (!spec || !spec->is_object()) return Status::corrupt("pipeline " + o.metadata.name + " has no spec");
  // The stored spec is in the manifest's own form: the one parser reads it back (no
  // substitutions are left in it), with deploy steps allowed as they were at submit.
  KOI_ASSIGN_OR_RETURN(YAML::Node node, parse_yaml(json::serialize(*spec), "stored pipeline " + o.metadata.name));
  PipelineContext ctx;
  ctx.deploy_available = true;
  auto parsed = parse_spec_node(node, o.metadata.name, ctx);
  if (!parsed.ok()) return Status::corrupt("stored pipeline " + o.metadata.name + ": " + parsed.status().message());
  p.spec = std::move(*parsed);
  const json::value* st = o.body.if_contains("status");
  if (st && st->is_object()) p.status = status_from_json(st->as_object());
  if (p.status.steps.size() != p.spec.steps.size()) return Status::corrupt("pipeline " + o.metadata.name + ": steps and status differ");
  return p;
}

}  // namespace koi::cluster
