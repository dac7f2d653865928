#include "cluster/control_plane/pipeline.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "cluster/control_plane/job_metrics.h"

namespace koi::cluster {
namespace {

const PipelineContext kCtx{"/work", "/bin/koi", false};

std::string manifest(const std::string& steps) {
  return "apiVersion: koi/v1\nkind: Pipeline\nmetadata: {name: p}\nspec:\n  steps:\n" + steps;
}

TEST(Pipeline, SubstitutesAndFillsDefaults) {
  auto p = parse_pipeline_manifest(manifest(R"(    - name: train
      job: {kind: train, recipe: /r.yaml}
    - name: export
      job: {command: ["${koi}", train, export, "${steps.train.checkpointDir}", -o, "${dir}/m.gguf"]}
    - name: eval
      job: {kind: eval, args: [-m, "${dir}/m.gguf", -d, /v.txt], checkpointDir: "${dir}/eval"}
    - name: gate
      gate: {condition: "perplexity <= 12.5 && loss < 3"}
    - name: reg
      dependsOn: [gate]
      register: {model: tiny, artifact: "${dir}/m.gguf", metricsFrom: eval}
    - name: prod
      promote: {alias: production}
)"), "alpha", kCtx);
  ASSERT_TRUE(p.ok()) << p.status().message();
  const auto& s = p->spec.steps;
  ASSERT_EQ(s.size(), 6u);
  EXPECT_TRUE(s[0].depends_on.empty());
  EXPECT_EQ(s[1].depends_on, std::vector<std::string>{"train"});
  EXPECT_EQ(s[0].job.checkpoint_dir, "/work/alpha/p-train/checkpoints");
  EXPECT_EQ(s[1].job.command, (std::vector<std::string>{"/bin/koi", "train", "export", "/work/alpha/p-train/checkpoints",
                                                        "-o", "/work/alpha/p.pipeline/m.gguf"}));
  EXPECT_EQ(s[2].job.checkpoint_dir, "/work/alpha/p.pipeline/eval");
  EXPECT_EQ(s[3].metrics_from, "eval");  // the nearest job step it depends on
  ASSERT_EQ(s[3].conditions.size(), 2u);
  EXPECT_EQ(s[3].conditions[1].metric, "loss");
  EXPECT_EQ(s[3].conditions[1].op, "<");
  EXPECT_EQ(s[4].from, "train");  // the nearest train job it depends on
  EXPECT_EQ(s[5].from, "reg");
  EXPECT_EQ(s[5].model, "tiny");
  EXPECT_EQ(p->status.steps[0].job, "p-train");

  // The stored form reads back to the same spec, status included.
  p->status.steps[3].phase = StepPhase::kFailed;
  p->status.steps[0].metrics["loss"] = 2.5;
  StoredObject o = to_stored(*p);
  auto back = pipeline_from_stored(o);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(boost::json::serialize(to_stored(*back).body), boost::json::serialize(o.body));
}

TEST(Pipeline, MalformedPipelinesNameTheField) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"    - name: a\n      job: {command: [x]}\n      gate: {condition: 'a < 1'}\n",
       "spec.steps[0].gate: a step does one thing; this one is already a job step"},
      {"    - name: a\n", "spec.steps[0]: needs one of job, gate, register, promote, deploy"},
      {"    - job: {command: [x]}\n", "spec.steps[0].name: is required"},
      {"    - {name: A, job: {command: [x]}}\n", "spec.steps[0].name: must be 1-63 characters of a-z, 0-9 and '-'"},
      {"    - {name: a, job: {command: [x]}}\n    - {name: a, job: {command: [x]}}\n", "spec.steps[1].name: 'a' names two steps"},
      {"    - {name: a, job: {command: [x]}}\n    - {name: b, dependsOn: [c], job: {command: [x]}}\n",
       "spec.steps[1].dependsOn[0]: 'c' is not an earlier step"},
      {"    - {name: a, job: {command: [x]}, colour: red}\n", "spec.steps[0].colour: unknown field"},
      {"    - {name: a, job: {replicas: 0, command: [x]}}\n", "spec.steps[0].job.replicas: must be >= 1"},
      {"    - {name: a, job: {command: ['${nope}']}}\n",
       "spec.steps[0].job.command[0]: unknown substitution ${nope} (known: ${koi}, ${dir}, ${steps.STEP.checkpointDir} "
       "and ${steps.STEP.job} of a job step)"},
      {"    - {name: a, job: {command: ['${dir']}}\n", "spec.steps[0].job.command[0]: '${' without its closing '}'"},
      {"    - {name: a, job: {command: [x]}}\n    - {name: g, gate: {condition: 'perplexity ~ 3'}}\n",
       "spec.steps[1].gate.condition: 'perplexity ~ 3' is not a comparison; write METRIC OP NUMBER (OP one of <= < >= > "
       "== !=), several joined by &&"},
      {"    - {name: a, job: {command: [x]}}\n    - {name: g, gate: {condition: 'loss < 1 && 3 > x'}}\n",
       "spec.steps[1].gate.condition: '3 > x' is not a comparison; write METRIC OP NUMBER (OP one of <= < >= > == !=), "
       "several joined by &&"},
      {"    - {name: a, job: {command: [x]}}\n    - {name: g, gate: {}}\n",
       "spec.steps[1].gate.condition: is required (for example \"perplexity <= 12.5\")"},
      {"    - {name: g, gate: {condition: 'loss < 1'}}\n",
       "spec.steps[0].gate.metricsFrom: is required: no earlier step this one depends on is a job step"},
      {"    - {name: a, job: {command: [x]}}\n    - {name: b, dependsOn: [], gate: {metricsFrom: a, condition: 'l < 1'}}\n",
       "spec.steps[1].gate.metricsFrom: 'a' is not a step this one depends on (directly or through dependsOn)"},
      {"    - {name: a, job: {command: [x]}}\n    - {name: r, register: {from: a}}\n",
       "spec.steps[1].register.model: is required (the model's name)"},
      {"    - {name: a, job: {command: [x]}}\n    - {name: r, register: {model: m}}\n",
       "spec.steps[1].register.from: is required: no earlier step this one depends on is a train or finetune job"},
      {"    - {name: a, job: {command: [x]}}\n    - {name: r, register: {model: m, from: a, artifact: rel.gguf}}\n",
       "spec.steps[1].register.artifact: must be an absolute path"},
      {"    - {name: a, job: {command: [x]}}\n    - {name: r, register: {model: m, from: a, format: onnx}}\n",
       "spec.steps[1].register.format: must be gguf, hf or koi (got 'onnx')"},
      {"    - {name: a, job: {command: [x]}}\n    - {name: p, promote: {alias: production}}\n",
       "spec.steps[1].promote.from: is required: no earlier step this one depends on is a register step"},
      {"    - {name: a, job: {command: [x]}}\n    - {name: p, promote: {alias: latest, from: a}}\n",
       "spec.steps[1].promote.alias: must be 1-63 characters of a-z, 0-9 and '-', and not 'latest'"},
      {"    - {name: a, job: {command: [x]}}\n    - {name: p, promote: {alias: prod, from: a}}\n",
       "spec.steps[1].promote.from: step 'a' is not a register step"},
      {"    - {name: a, deploy: {replicas: 1}}\n",
       "spec.steps[0].deploy: deploy steps are not connected in this control plane yet (no deployment controller); "
       "deploy the registered model with a Deployment once it is"},
      {"    - {name: a-very-long-step-name-that-makes-the-job-name-too-long-for-k8s, job: {command: [x]}}\n",
       "spec.steps[0].name: the step's job name 'p-a-very-long-step-name-that-makes-the-job-name-too-long-for-k8s' is "
       "over 63 characters"},
  };
  for (const auto& [steps, message] : cases) {
    auto p = parse_pipeline_manifest(manifest(steps), "alpha", kCtx);
    ASSERT_FALSE(p.ok()) << steps;
    EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(p.status().message(), message) << steps;
  }
  EXPECT_EQ(parse_pipeline_manifest("apiVersion: koi/v1\nkind: Job\nmetadata: {name: p}\nspec: {steps: []}\n", "a", kCtx)
                .status().message(), "kind: must be Pipeline (got 'Job')");
  EXPECT_EQ(parse_pipeline_manifest("apiVersion: koi/v1\nkind: Pipeline\nmetadata: {name: p}\nspec: {steps: []}\n", "a", kCtx)
                .status().message(), "spec.steps: is required (a list of steps)");
  EXPECT_EQ(parse_pipeline_manifest("apiVersion: koi/v1\nkind: Pipeline\nmetadata: {name: p, namespace: b}\nspec: {}\n", "a",
                                    kCtx).status().message(), "metadata.namespace: 'b' does not match the request's namespace 'a'");
}

TEST(Pipeline, GateConditionsHold) {
  auto c = parse_gate_condition("perplexity<=12.5&&loss > 1e-3 && step == 300", "gate");
  ASSERT_TRUE(c.ok());
  ASSERT_EQ(c->size(), 3u);
  EXPECT_TRUE((*c)[0].holds(12.5));
  EXPECT_FALSE((*c)[0].holds(12.51));
  EXPECT_TRUE((*c)[1].holds(0.5));
  EXPECT_FALSE((*c)[1].holds(1e-3));
  EXPECT_TRUE((*c)[2].holds(300));
  EXPECT_FALSE(parse_gate_condition("perplexity <= ", "gate").ok());
  EXPECT_FALSE(parse_gate_condition("perplexity <= 1 &&", "gate").ok());
}

TEST(JobMetrics, ReadsKoiEvalResultLinesAndMetricsJsonl) {
  const std::string log =
      "eval: 100/200 tokens (50.0%) | 1000 tok/s | perplexity 9.1 so far\n"
      "tokens 5120 | windows 79 of 128 (stride 64) | loss 1.8 | perplexity 6.05\n"
      "done in 3s\n";
  boost::json::object m = metrics_from_log(log);
  EXPECT_EQ(boost::json::serialize(m), R"({"tokens":5.12E3,"windows":7.9E1,"loss":1.8E0,"perplexity":6.05E0})");
  EXPECT_TRUE(metrics_from_log("no metrics here\n").empty());
  boost::json::object j = metrics_from_jsonl(
      "{\"step\": 1, \"loss\": 4.0}\n{\"step\": 2, \"loss\": 3.5, \"val_loss\": 3.9}\n{\"step\": 2, \"loss\": 3.4}\n{\"step\": 3, \"lo");
  EXPECT_EQ(j.at("step").to_number<double>(), 2);
  EXPECT_EQ(j.at("loss").to_number<double>(), 3.4);  // the later line wins (a resumed run logs again)
  EXPECT_EQ(j.at("val_loss").to_number<double>(), 3.9);
  EXPECT_EQ(checkpoint_step("/run/ckpt-00000300"), 300);
  EXPECT_EQ(checkpoint_step("/run/.ckpt-00000300.tmp"), -1);
}

}  // namespace
}  // namespace koi::cluster
