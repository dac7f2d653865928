"""koi cluster, tenants and bad input beyond jobs (cluster_tenants.py covers jobs per verb):
a tenant cannot read, change or cancel another tenant's models, model versions, aliases or
pipelines, per verb (each answers 404 exactly as a missing object does, and nothing changes);
admins see every namespace; 40+ malformed specs and requests (jobs, pipelines, registrations,
alias moves, query parameters) each get a 4xx whose message names the field, and the server
stays healthy."""
import json
import os
import time

from cluster_harness import two_tenant_config, check, fail, manifest, run_test, write

CONFIG = two_tenant_config(gpus=2, admins=True)
A, B, ADMIN = "alpha-token", "beta-token", "admin-token"
NS = "/apis/v1/namespaces/"


def pipeline(name, steps):
    return json.dumps({"apiVersion": "koi/v1", "kind": "Pipeline", "metadata": {"name": name}, "spec": {"steps": steps}})


def setup_alpha(cp):
    """alpha: a finished job, a model with one version and the production alias, a pipeline
    whose job step runs until cancelled."""
    gguf = write(cp.root, "m.gguf", "GGUF" + "x" * 60)
    cp.http("POST", NS + "alpha/jobs", A, manifest("done", {"command": ["true"]}))
    cp.http("POST", NS + "alpha/jobs", A, manifest("fails", {"command": ["false"], "restartPolicy": {"maxRestarts": 0}}))
    cp.wait_phase(A, "done", ["Succeeded"])
    cp.wait_phase(A, "fails", ["Failed"])
    code, body = cp.http("POST", NS + "alpha/models/tiny/versions", A, json.dumps({"fromJob": "done", "artifact": gguf}))
    check(code == 201, "register: %d %s" % (code, body))
    code, body = cp.http("PUT", NS + "alpha/models/tiny/aliases/production", A, '{"version": 1}')
    check(code == 200, "alias: %d %s" % (code, body))
    code, body = cp.http("POST", NS + "alpha/pipelines", A, pipeline("slow", [
        {"name": "sleep", "job": {"command": ["sleep", "600"], "terminationGracePeriodSeconds": 1}}]))
    check(code == 201, "pipeline: %d %s" % (code, body))
    cp.wait_phase(A, "slow-sleep", ["Running"])
    return gguf


def isolation(cp, gguf):
    def same_as_missing(method, path, missing_path, body=None, message=None):
        code, reply = cp.http(method, path, B, body)
        code_none, reply_none = cp.http(method, missing_path, B, body)
        check(code == 404 and code_none == 404, "beta %s %s: %d %s" % (method, path, code, reply))
        r, rn = json.loads(reply), json.loads(reply_none)
        check(r["reason"] == rn["reason"] == "NotFound", reply)
        if message:
            check(r["message"] == message, "beta %s %s: %s" % (method, path, r["message"]))

    # Per verb and kind: read (get, list, versions, alias, events), change (register, move an
    # alias, submit), cancel.
    same_as_missing("GET", NS + "alpha/models/tiny", NS + "alpha/models/zzz", message="model tiny not found in namespace alpha")
    same_as_missing("GET", NS + "alpha/models", NS + "gamma/models", message="namespace alpha not found")
    same_as_missing("GET", NS + "alpha/models/tiny/versions", NS + "alpha/models/zzz/versions")
    same_as_missing("GET", NS + "alpha/models/tiny/versions/1", NS + "alpha/models/zzz/versions/1")
    same_as_missing("GET", NS + "alpha/models/tiny/aliases/production", NS + "alpha/models/zzz/aliases/production")
    same_as_missing("PUT", NS + "alpha/models/tiny/aliases/production", NS + "alpha/models/zzz/aliases/production",
                    '{"version": 1}')
    same_as_missing("POST", NS + "alpha/models/tiny/versions", NS + "alpha/models/zzz/versions",
                    json.dumps({"fromJob": "done", "artifact": gguf}))
    same_as_missing("GET", NS + "alpha/modelversions", NS + "gamma/modelversions")
    same_as_missing("GET", NS + "alpha/modelversions/tiny-v1", NS + "alpha/modelversions/zzz-v1",
                    message="modelversion tiny-v1 not found in namespace alpha")
    same_as_missing("GET", NS + "alpha/pipelines", NS + "gamma/pipelines")
    same_as_missing("GET", NS + "alpha/pipelines/slow", NS + "alpha/pipelines/zzz", message="pipeline slow not found in namespace alpha")
    same_as_missing("GET", NS + "alpha/pipelines/slow/events", NS + "alpha/pipelines/zzz/events")
    same_as_missing("DELETE", NS + "alpha/pipelines/slow", NS + "alpha/pipelines/zzz")
    same_as_missing("POST", NS + "alpha/pipelines", NS + "gamma/pipelines", pipeline("intruder", [{"name": "x", "job": {"command": ["true"]}}]))
    # Through the CLI too.
    for args in (["model", "describe", "tiny"], ["model", "alias", "tiny", "production", "1"], ["pipeline", "describe", "slow"],
                 ["pipeline", "cancel", "slow"], ["model", "register", "tiny", "--from-job", "done", "--artifact", gguf]):
        r = cp.koi(B, *args, "-n", "alpha", expect_ok=False)
        check(r.returncode == 1 and "not found in namespace alpha" in r.stderr, "beta %s: %s" % (args, r.stderr))
    for args in (["model", "list"], ["pipeline", "list"]):
        r = cp.koi(B, *args, "-n", "alpha", expect_ok=False)
        check(r.returncode == 1 and "namespace alpha not found" in r.stderr, "beta %s: %s" % (args, r.stderr))
    # Nothing changed: the alias, the versions, the pipeline and its job.
    m = cp.koi_json(A, "model", "describe", "tiny")
    check(len(m["versions"]) == 1 and m["model"]["status"]["aliases"] == {"production": 1}, json.dumps(m["model"]["status"]))
    check(len(m["model"]["status"]["aliasHistory"]) == 1, "beta moved an alias")
    p = cp.koi_json(A, "pipeline", "describe", "slow")["pipeline"]
    check(p["status"]["phase"] == "Running" and "deletionTimestamp" not in p["metadata"], json.dumps(p))
    check(cp.job(A, "slow-sleep")["status"]["phase"] == "Running", "beta cancelled alpha's pipeline job")
    # beta's own namespace has none of it, and alpha's names mean nothing there.
    check(cp.koi_json(B, "model", "list")["items"] == [] and cp.koi_json(B, "pipeline", "list")["items"] == [], "beta's lists")
    code, reply = cp.http("POST", NS + "beta/models/tiny/versions", B, json.dumps({"fromJob": "done", "artifact": gguf}))
    check(code == 400 and json.loads(reply)["message"] == "fromJob: no job 'done' in namespace beta", reply)
    code, reply = cp.http("POST", NS + "beta/pipelines", B, pipeline("p", [{"name": "x", "job": {"command": ["true"], "queue": "alpha-q"}}]))
    check(code == 400 and json.loads(reply)["message"] ==
          "spec.steps[0].job.queue: no queue 'alpha-q' in namespace beta (its queues: beta-q)", reply)
    # Every namespace: admins only.
    for plural in ("models", "modelversions", "pipelines"):
        check(cp.http("GET", "/apis/v1/" + plural, B)[0] == 404, "beta lists every namespace's " + plural)
        code, reply = cp.http("GET", "/apis/v1/" + plural, ADMIN)
        check(code == 200 and len(json.loads(reply)["items"]) == 1, "admin %s: %s" % (plural, reply))
    check(cp.http("POST", "/apis/v1/pipelines", ADMIN, pipeline("x", [{"name": "x", "job": {"command": ["true"]}}]))[0] == 404,
          "a write to every namespace")
    code, stream = cp.http("GET", "/apis/v1/watch?resourceVersion=0&timeoutSeconds=1", B)
    check(code == 200 and "tiny" not in stream and "slow" not in stream, "beta's watch shows alpha's objects")
    # alpha cancels its own pipeline: the running job is cancelled.
    check(cp.http("DELETE", NS + "alpha/pipelines/slow", A)[0] == 202, "alpha cancels")
    cp.wait_phase(A, "slow-sleep", ["Cancelled"])


def malformed(cp, gguf):
    job = lambda spec, **top: json.dumps(dict({"apiVersion": "koi/v1", "kind": "Job", "metadata": {"name": "x"}, "spec": spec}, **top))
    cmd = {"command": ["true"]}
    step_job = [{"name": "a", "job": {"command": ["true"]}}]
    jobs, pipes = NS + "alpha/jobs", NS + "alpha/pipelines"
    versions, alias = NS + "alpha/models/tiny/versions", NS + "alpha/models/tiny/aliases/production"
    rv = json.loads(cp.http("GET", NS + "alpha/models/tiny", A)[1])["metadata"]["resourceVersion"]
    cases = [  # (method, path, body, expected code, the message starts with)
        ("POST", jobs, job(cmd, apiVersion="v2"), 400, "apiVersion: must be koi/v1"),
        ("POST", jobs, job(cmd, kind="Pod"), 400, "kind: must be Job"),
        ("POST", jobs, json.dumps({"apiVersion": "koi/v1", "kind": "Job", "metadata": {}, "spec": cmd}), 400, "metadata.name: is required"),
        ("POST", jobs, job(cmd, metadata={"name": "Bad_Name"}), 400, "metadata.name: must be 1-63 characters"),
        ("POST", jobs, json.dumps({"apiVersion": "koi/v1", "kind": "Job", "metadata": {"name": "x"}}), 400, "spec: is required"),
        ("POST", jobs, job({"kind": "dance"}), 400, "spec.kind: must be one of train, finetune, eval, command"),
        ("POST", jobs, job({}), 400, "spec.command: is required for kind command"),
        ("POST", jobs, job(dict(cmd, replicas="two")), 400, "spec.replicas: must be an integer"),
        ("POST", jobs, job(dict(cmd, resources={"cpu": -1})), 400, "spec.resources.cpu: must be"),
        ("POST", jobs, job(dict(cmd, resources={"gpu": 99})), 400, "spec.resources.gpu: must be"),
        ("POST", jobs, job(dict(cmd, resources={"gpuType": "H100"})), 400, "spec.resources.gpuType: is set but resources.gpu is 0"),
        ("POST", jobs, job(dict(cmd, restartPolicy={"maxRestarts": -1})), 400, "spec.restartPolicy.maxRestarts: must be"),
        ("POST", jobs, job(dict(cmd, restartPolicy={"retryExitCodes": [300]})), 400, "spec.restartPolicy.retryExitCodes[0]: must be"),
        ("POST", jobs, job(dict(cmd, env={"KOI_JOB": "x"})), 400, "spec.env.KOI_JOB: is set by the control plane"),
        ("POST", jobs, job(dict(cmd, checkpointDir="rel")), 400, "spec.checkpointDir: must be an absolute path"),
        ("POST", jobs, job({"kind": "train"}), 400, "spec.recipe: is required for kind train"),
        ("POST", jobs, job(cmd, metadata={"name": "x", "namespace": "beta"}), 400, "metadata.namespace: 'beta' does not match"),
        ("POST", jobs, "{[", 400, "job manifest: not valid YAML or JSON (line 1)"),
        ("POST", pipes, pipeline("p", step_job).replace('"Pipeline"', '"Job"'), 400, "kind: must be Pipeline (got 'Job')"),
        ("POST", pipes, pipeline("p", []), 400, "spec.steps: is required (a list of steps)"),
        ("POST", pipes, json.dumps({"apiVersion": "koi/v1", "kind": "Pipeline", "metadata": {"name": "p"}, "spec": {"steps": {"a": 1}}}),
         400, "spec.steps: must be a list"),
        ("POST", pipes, pipeline("p", [{"job": cmd}]), 400, "spec.steps[0].name: is required"),
        ("POST", pipes, pipeline("p", step_job * 2), 400, "spec.steps[1].name: 'a' names two steps"),
        ("POST", pipes, pipeline("p", step_job + [{"name": "b", "dependsOn": ["c"], "job": cmd}]), 400,
         "spec.steps[1].dependsOn[0]: 'c' is not an earlier step"),
        ("POST", pipes, pipeline("p", [{"name": "a", "job": cmd, "gate": {"condition": "x < 1"}}]), 400,
         "spec.steps[0].gate: a step does one thing"),
        ("POST", pipes, pipeline("p", [{"name": "a"}]), 400, "spec.steps[0]: needs one of job, gate, register, promote, deploy"),
        ("POST", pipes, pipeline("p", step_job + [{"name": "g", "gate": {"condition": "perplexity ~ 3"}}]), 400,
         "spec.steps[1].gate.condition: 'perplexity ~ 3' is not a comparison"),
        ("POST", pipes, pipeline("p", [{"name": "a", "job": {"command": ["${nope}"]}}]), 400,
         "spec.steps[0].job.command[0]: unknown substitution ${nope}"),
        ("POST", pipes, pipeline("p", [{"name": "a", "job": {"command": ["true"], "replicas": 0}}]), 400,
         "spec.steps[0].job.replicas: must be >= 1"),
        ("POST", pipes, pipeline("p", step_job + [{"name": "r", "register": {"from": "a"}}]), 400,
         "spec.steps[1].register.model: is required"),
        ("POST", pipes, pipeline("p", step_job + [{"name": "r", "register": {"model": "m", "from": "a", "format": "onnx"}}]), 400,
         "spec.steps[1].register.format: must be gguf, hf or koi (got 'onnx')"),
        ("POST", pipes, pipeline("p", step_job + [{"name": "r", "promote": {"alias": "prod", "from": "a"}}]), 400,
         "spec.steps[1].promote.from: step 'a' is not a register step"),
        ("POST", pipes, pipeline("p", [{"name": "a", "deploy": {"replicas": 1}}]), 400,
         "spec.steps[0].deploy.name: is required (the Deployment's name)"),
        ("POST", pipes, pipeline("p", [{"name": "a", "job": cmd, "retries": 2}]), 400, "spec.steps[0].retries: unknown field"),
        ("POST", pipes, pipeline("p", [{"name": "a", "job": {"command": ["true"], "resources": {"gpu": 1, "gpuType": "A100"}}}]),
         400, "spec.steps[0].job.resources.gpuType: no node has GPUs of type 'A100'"),
        ("POST", versions, "{}", 400, "fromJob: is required"),
        ("POST", versions, json.dumps({"fromJob": "nope", "artifact": gguf}), 400, "fromJob: no job 'nope' in namespace alpha"),
        ("POST", versions, json.dumps({"fromJob": "fails", "artifact": gguf}), 400,
         "fromJob: job fails is Failed; a version is registered from a job that has Succeeded"),
        ("POST", versions, json.dumps({"fromJob": "done", "artifact": "m.gguf"}), 400, "artifact: must be an absolute path"),
        ("POST", versions, json.dumps({"fromJob": "done", "artifact": "/nope.gguf"}), 400, "artifact: /nope.gguf does not exist"),
        ("POST", versions, json.dumps({"fromJob": "done", "artifact": gguf, "format": "onnx"}), 400, "format: must be gguf, hf or koi"),
        ("POST", versions, json.dumps({"fromJob": "done", "artifact": cp.config, "format": "gguf"}), 400,
         "format: %s is not gguf (unrecognised content)" % cp.config),
        ("POST", versions, json.dumps({"fromJob": "done", "artifact": gguf, "checkpoint": "ckpt-1"}), 400,
         "artifact: give a checkpoint or an artifact, not both"),
        ("POST", versions, json.dumps({"fromJob": "done", "artifact": gguf, "evalJob": "nope"}), 400, "evalJob: no job 'nope'"),
        ("POST", versions, json.dumps({"fromJob": "done", "artifact": gguf, "metrics": {"ppl": "low"}}), 400,
         "metrics.ppl: must be a number"),
        ("POST", versions, json.dumps({"fromJob": "done", "artifact": gguf, "colour": 1}), 400, "colour: unknown field"),
        ("POST", versions, json.dumps({"fromJob": "done"}), 400, "checkpoint: job done has no complete checkpoint"),
        ("POST", NS + "alpha/models/Bad/versions", json.dumps({"fromJob": "done", "artifact": gguf}), 400, "model: 'Bad' must be"),
        ("PUT", alias, "{}", 400, "version: is required"),
        ("PUT", alias, '{"version": 0}', 400, "version: must be >= 1"),
        ("PUT", alias, '{"version": "x"}', 400, "version: must be an integer"),
        ("PUT", alias, '{"version": 99}', 400, "version: model tiny has no version 99 (latest is 1)"),
        ("PUT", NS + "alpha/models/tiny/aliases/Prod", '{"version": 1}', 400, "alias: 'Prod' must be"),
        ("PUT", NS + "alpha/models/tiny/aliases/latest", '{"version": 1}', 400, "alias: 'latest' is reserved"),
        ("PUT", alias, '{"version": 1, "resourceVersion": %d}' % (int(rv) - 1), 409, "conflict: model tiny is at resourceVersion"),
        ("PUT", alias + "?resourceVersion=abc", '{"version": 1}', 400, "resourceVersion: 'abc' must be a positive integer"),
        ("PUT", alias, '{"version": 1, "colour": 1}', 400, "colour: unknown field"),
        ("GET", NS + "alpha/models/tiny?at=yesterday", None, 400, "at: 'yesterday' is not a time"),
        ("GET", alias + "?at=-1", None, 400, "at: '-1' is not a time"),
        ("GET", versions + "/abc", None, 400, "version: 'abc' is not a version number"),
        ("DELETE", pipes + "/slow?resourceVersion=0", None, 400, "resourceVersion: '0' must be a positive integer"),
        ("GET", jobs + "/done/logs?replica=5", None, 400, "replica: must be 0..0"),
        ("GET", jobs + "/done/logs?attempt=9", None, 400, "attempt: must be 1..1"),
        ("POST", NS + "alpha/models", "{}", 405, "models: use GET"),
    ]
    check(len(cases) >= 40, "only %d malformed cases" % len(cases))
    for method, path, body, want, message in cases:
        code, reply = cp.http(method, path, A, body)
        try:
            got = json.loads(reply)["message"]
        except (ValueError, KeyError):
            fail("%s %s: not a Status body: %d %s" % (method, path, code, reply))
        check(code == want and got.startswith(message), "%s %s %s\n  got %d %s\n  want %d %s" % (method, path, body, code, got, want, message))
        check(cp.http("GET", "/health")[0] == 200, "unhealthy after %s %s" % (method, path))
    print("%d malformed specs and requests answered 4xx naming the field" % len(cases))
    # Nothing was created by any of them.
    check([j["metadata"]["name"] for j in cp.koi_json(A, "job", "list")["items"]] == ["done", "fails", "slow-sleep"], "jobs")
    check(len(cp.koi_json(A, "model", "describe", "tiny")["versions"]) == 1, "versions")
    check([p["metadata"]["name"] for p in cp.koi_json(A, "pipeline", "list")["items"]] == ["slow"], "pipelines")


def run(cp):
    gguf = setup_alpha(cp)
    malformed(cp, gguf)
    isolation(cp, gguf)


if __name__ == "__main__":
    run_test(CONFIG, run)
