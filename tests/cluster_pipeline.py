"""koi cluster pipelines and the model registry, through the CLI: a pipeline trains a tiny model,
exports it, evaluates it, passes its gate, registers a version (lineage: job, step, recipe,
data; its SHA-256 is the file's) and promotes it to production, surviving a kill -9 of the
control plane in the middle; a failing gate stops a pipeline with the reason; cancelling a
pipeline cancels its running job; alias history answers which version held production when."""
import hashlib
import json
import os
import time

from cluster_harness import KOI, check, fail, one_tenant_config, run_test, tiny_recipe, write

A = "alpha-token"


def pipeline_yaml(name, recipe, valid, gate):
    return """apiVersion: koi/v1
kind: Pipeline
metadata: {name: %s}
spec:
  steps:
    - name: train
      job: {kind: train, recipe: %s, args: [--threads, "1"], resources: {cpu: 1}}
    - name: export
      job: {command: ["${koi}", train, export, "${steps.train.checkpointDir}", -o, "${dir}/model.gguf"]}
    - name: eval
      job: {kind: eval, args: [-m, "${dir}/model.gguf", -d, %s, --threads, "1"]}
    - name: quality
      gate: {metricsFrom: eval, condition: "%s"}
    - name: register
      register: {model: tiny, from: train, artifact: "${dir}/model.gguf", metricsFrom: eval}
    - name: promote
      promote: {alias: production}
""" % (name, recipe, valid, gate)


def wait_pipeline(cp, name, phases, deadline_s=60):
    end = time.time() + deadline_s
    while time.time() < end:
        p = cp.koi_json(A, "pipeline", "describe", name)["pipeline"]
        if p["status"]["phase"] in phases:
            return p
        time.sleep(0.2)
    fail("pipeline %s did not reach %s: %s" % (name, phases, json.dumps(p["status"])))


def wait_step(cp, name, step, phases, deadline_s=60):
    end = time.time() + deadline_s
    while time.time() < end:
        p = cp.koi_json(A, "pipeline", "describe", name)["pipeline"]
        s = [x for x in p["status"]["steps"] if x["name"] == step][0]
        if s["phase"] in phases:
            return p
        time.sleep(0.1)
    fail("step %s of %s did not reach %s: %s" % (step, name, phases, json.dumps(p["status"])))


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        h.update(f.read())
    return h.hexdigest()


def run(cp):
    recipe = tiny_recipe(cp.root, 1500, interval=500)
    valid = write(cp.root, "valid.txt", open(os.path.join(cp.root, "corpus.txt")).read()[:4000])

    # The good pipeline; the control plane is killed once its training step runs, and restarted.
    path = write(cp.root, "good.yaml", pipeline_yaml("good", recipe, valid, "perplexity <= 1000 && loss < 10"))
    out = cp.koi(A, "pipeline", "submit", "-f", path).stdout
    check("pipeline/good submitted to alpha (6 steps)" in out, out)
    wait_step(cp, "good", "train", ["Running"])
    cp.kill9()
    cp.start()
    p = wait_pipeline(cp, "good", ["Succeeded", "Failed"])
    check(p["status"]["phase"] == "Succeeded", json.dumps(p["status"]))
    steps = {s["name"]: s for s in p["status"]["steps"]}
    check(steps["eval"]["metrics"]["perplexity"] > 1 and "tokens" in steps["eval"]["metrics"], str(steps["eval"]))
    check(steps["train"]["metrics"]["step"] == 1500, str(steps["train"]))
    check(steps["register"]["version"] == 1 and steps["promote"]["version"] == 1, str(steps))
    jobs = {j["metadata"]["name"]: j for j in cp.koi_json(A, "job", "list")["items"]}
    for j in ("good-train", "good-export", "good-eval"):
        check(jobs[j]["status"]["phase"] == "Succeeded" and jobs[j]["metadata"]["labels"]["pipeline"] == "good", j)
        check(jobs[j]["status"]["attempts"] == 1, "%s ran %d times" % (j, jobs[j]["status"]["attempts"]))

    # The version: the file's size and SHA-256, lineage back to the training job, eval metrics.
    described = cp.koi_json(A, "model", "describe", "tiny")
    versions = described["versions"]
    check(len(versions) == 1, "%d versions after one pipeline (and a control-plane restart)" % len(versions))
    v1 = versions[0]["spec"]
    gguf = os.path.join(cp.work, "alpha", "good.pipeline", "model.gguf")
    check(v1["artifact"]["path"] == gguf and v1["artifact"]["format"] == "gguf", json.dumps(v1["artifact"]))
    check(v1["artifact"]["sha256"] == sha256(gguf), "sha256 %s is not the file's" % v1["artifact"]["sha256"])
    check(v1["artifact"]["sizeBytes"] == os.path.getsize(gguf), "size")
    lineage = v1["lineage"]
    check(lineage["job"] == "good-train" and lineage["jobUid"] == jobs["good-train"]["metadata"]["uid"], json.dumps(lineage))
    check(lineage["step"] == 1500 and lineage["checkpoint"].endswith("ckpt-00001500"), json.dumps(lineage))
    check(lineage["config"] == recipe and lineage["configSha256"] == sha256(recipe), json.dumps(lineage))
    check(lineage["data"]["text"] == os.path.join(cp.root, "corpus.txt") and lineage["evalJob"] == "good-eval", json.dumps(lineage))
    check(lineage["pipeline"]["name"] == "good" and lineage["pipeline"]["step"] == "register", json.dumps(lineage))
    check(v1["metrics"] == steps["eval"]["metrics"], "metrics %s vs %s" % (v1["metrics"], steps["eval"]["metrics"]))
    check(described["model"]["status"]["aliases"] == {"production": 1}, json.dumps(described["model"]["status"]))
    reasons = [e["reason"] for e in cp.koi_json(A, "pipeline", "describe", "good")["events"]]
    for r in ("Submitted", "Started", "StepStarted", "StepSucceeded", "GatePassed", "Registered", "Promoted", "Succeeded"):
        check(r in reasons, "%s missing from %s" % (r, reasons))

    # A failing gate stops the pipeline with the reason; nothing after it runs.
    path = write(cp.root, "bad.yaml", """apiVersion: koi/v1
kind: Pipeline
metadata: {name: gated}
spec:
  steps:
    - name: eval
      job: {command: [sh, -c, 'echo "tokens 100 | loss 5.01 | perplexity 150.2"']}
    - name: quality
      gate: {condition: "perplexity <= 12.5"}
    - name: register
      register: {model: tiny, from: eval, artifact: %s}
""" % gguf)
    cp.koi(A, "pipeline", "submit", "-f", path)
    p = wait_pipeline(cp, "gated", ["Succeeded", "Failed"])
    st = p["status"]
    check(st["phase"] == "Failed" and st["reason"] == "GateFailed", json.dumps(st))
    check("perplexity of step eval is 150.2, which fails 'perplexity <= 12.5'" in st["message"], st["message"])
    check([s["phase"] for s in st["steps"]] == ["Succeeded", "Failed", "Skipped"], json.dumps(st["steps"]))
    warnings = [e for e in cp.koi_json(A, "pipeline", "describe", "gated")["events"] if e["type"] == "Warning"]
    check(len(warnings) == 1 and warnings[0]["reason"] == "GateFailed" and "150.2" in warnings[0]["message"], str(warnings))
    table = cp.koi(A, "pipeline", "list").stdout
    check("gated   Failed" in table and "good    Succeeded   6/6" in table, table)
    check(len(cp.koi_json(A, "model", "describe", "tiny")["versions"]) == 1, "the gated pipeline registered a version")

    # Cancel: the running job step is cancelled, the rest never runs.
    path = write(cp.root, "slow.yaml", "apiVersion: koi/v1\nkind: Pipeline\nmetadata: {name: slow}\nspec:\n  steps:\n"
                 "    - {name: sleep, job: {command: [sleep, '600'], terminationGracePeriodSeconds: 1}}\n"
                 "    - {name: after, job: {command: ['true']}}\n")
    cp.koi(A, "pipeline", "submit", "-f", path)
    cp.wait_phase(A, "slow-sleep", ["Running"])
    check("pipeline/slow cancelling" in cp.koi(A, "pipeline", "cancel", "slow").stdout, "cancel")
    p = wait_pipeline(cp, "slow", ["Cancelled"])
    check([s["phase"] for s in p["status"]["steps"]] == ["Cancelled", "Cancelled"], json.dumps(p["status"]["steps"]))
    check(cp.job(A, "slow-sleep")["status"]["phase"] == "Cancelled", "slow-sleep was not cancelled")
    check("slow-after" not in [j["metadata"]["name"] for j in cp.koi_json(A, "job", "list")["items"]], "slow-after ran")

    # Alias history: register version 2 by hand (the training checkpoint), move production to it.
    out = cp.koi(A, "model", "register", "tiny", "--from-job", "good-train").stdout
    check("model/tiny version 2 registered (koi," in out, out)
    t_between = time.time()
    time.sleep(1.1)
    v2 = cp.koi_json(A, "model", "describe", "tiny")["versions"][1]["spec"]
    check(v2["artifact"]["format"] == "koi" and v2["lineage"]["step"] == 1500 and v2["metrics"]["step"] == 1500, json.dumps(v2))
    rv = cp.koi_json(A, "model", "describe", "tiny")["model"]["metadata"]["resourceVersion"]
    r = cp.koi(A, "model", "alias", "tiny", "production", "2", "--resource-version", str(int(rv) - 1), expect_ok=False)
    check(r.returncode != 0 and "conflict: model tiny is at resourceVersion" in r.stderr, r.stderr)
    check("model/tiny alias production -> version 2" in cp.koi(A, "model", "alias", "tiny", "production", "2",
                                                                 "--resource-version", rv).stdout, "alias move")
    t_after = time.time()
    history = cp.koi_json(A, "model", "describe", "tiny")["model"]["status"]["aliasHistory"]
    check([(h["alias"], h["version"], h["previous"], h["by"]) for h in history] ==
          [("production", 1, 0, "pipeline/good"), ("production", 2, 1, "alpha")], json.dumps(history))
    for t, want in ((t_between, 1), (t_after, 2)):
        code, body = cp.http("GET", "/apis/v1/namespaces/alpha/models/tiny/aliases/production?at=%.3f" % t, A)
        check(code == 200 and json.loads(body)["version"] == want, "production at %f: %s" % (t, body))
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(int(t_between)))
    describe = cp.koi(A, "model", "describe", "tiny", "--at", at).stdout
    check("Aliases at %s: production=1" % at in describe and "Aliases:      production=2" in describe, describe)
    code, body = cp.http("GET", "/apis/v1/namespaces/alpha/models/tiny/aliases/production?at=1000", A)
    check(code == 404 and "pointed at no version" in body, body)
    table = cp.koi(A, "model", "list").stdout
    check("tiny   2        production=2" in table, table)

    # The fortunes example is a valid pipeline (it trains for minutes: submitted, then cancelled).
    example = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs", "examples", "pipeline-fortunes.yaml")
    p = cp.koi_json(A, "pipeline", "submit", "-f", example)
    steps = p["spec"]["steps"]
    check([s["name"] for s in steps] == ["data", "train", "export", "eval", "quality", "register", "promote", "serve"], str(steps))
    pdir = os.path.join(cp.work, "alpha", "fortunes.pipeline")
    check(steps[1]["job"]["recipe"] == pdir + "/fortunes.yaml" and "${" not in json.dumps(p), json.dumps(steps[1]))
    cp.koi(A, "pipeline", "cancel", "fortunes")
    wait_pipeline(cp, "fortunes", ["Cancelled"])


if __name__ == "__main__":
    run_test(one_tenant_config(), run)
