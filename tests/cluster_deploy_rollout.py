"""Deployment rollouts through the control plane and koi gateway, with real koi serve replicas
of stories260K and constant load from the official openai npm client:
  1. a deployment of fortunes@production (2 replicas) comes up and serves through the gateway;
  2. moving the alias to v2 rolls it out canary step by step with at most one extra replica
     and 0 failed requests, across a kill -9 of the control plane at the first step, ending
     with v2 live and v1's replicas drained and stopped;
  3. moving the alias to v3, a version exported with a 4-token context (every real request
     answers 400), is rolled back automatically: status names the SLO and since when, v2
     keeps serving and v3's replicas are stopped;
  4. `koi deploy rollback` goes back to the previous version (v1), and `koi deploy delete`
     drains and stops everything."""
import json
import time

from cluster_deploy_harness import *

env = Env()
try:
    seed_model(env, "alpha", "fortunes", [env.good, env.good2, env.bad], {"production": 1})
    spec = {"model": "fortunes@production", "route": "fortunes", "replicas": {"min": 2, "max": 2},
            "resources": {"cpu": 1, "memoryMiB": 512}, "serveArgs": ["--threads", "1", "--http-threads", "2"],
            "rollout": {"canarySteps": [10, 50, 100], "stepSeconds": 3, "drainTimeoutSeconds": 10},
            "slo": {"maxErrorRate": 0.05, "minRequests": 10}}
    path = deployment_manifest(env.root, "fortunes", spec)
    out = env.koi("deploy", "apply", "-f", path).stdout
    check("deployment/fortunes applied" in out, "koi deploy apply: " + out.strip())
    env.wait("fortunes", lambda d: d["status"]["phase"] == "Available" and d["status"]["version"] == 1, "v1 available")
    ok("v1 is Available with 2 replicas")
    for method, path in (("GET", "/fortunes"), ("DELETE", "/fortunes"), ("POST", "/fortunes/rollback"), ("GET", "/fortunes/events")):
        code, _ = env.cp.http(method, "/apis/v1/namespaces/alpha/deployments" + path, BETA_TOKEN)
        check(code == 404, "another tenant cannot %s alpha's deployment (%d)" % (method + " " + path, code))
    code, body = env.cp.http("GET", "/apis/v1/namespaces/beta/deployments", BETA_TOKEN)
    check(code == 200 and json.loads(body)["items"] == [], "beta's own list is empty")
    bad_spec = dict(spec, rollout={"canarySteps": [10, 50]})
    r = env.koi("deploy", "apply", "-f", deployment_manifest(env.root, "bad", bad_spec), expect_ok=False)
    check(r.returncode != 0 and "spec.rollout.canarySteps[1]: the last step must be 100" in r.stderr,
          "a bad spec is refused naming the field: " + r.stderr.strip())
    table = env.koi("deploy", "status").stdout
    check("fortunes" in table and "Available" in table, "koi deploy status lists it: " + table)

    # 2. Roll out v2 under load.
    load = env.load(4, "fortunes")
    time.sleep(2)
    most = [0]

    def count(d):
        most[0] = max(most[0], len(env.replica_jobs("fortunes")))

    move_alias(env, "alpha", "fortunes", "production", 2)
    # kill -9 of the control plane in the middle of the canary: the restarted one adopts the
    # replicas (jobs outlive it) and carries the rollout on from the stored status.
    env.wait("fortunes", lambda d: (d["status"].get("rollout") or {}).get("weight") == 10, "the first canary step", 60, count)
    env.cp.kill9()
    env.cp.start()
    d = env.wait("fortunes", lambda d: d["status"]["version"] == 2 and d["status"]["phase"] == "Available"
                 and not d["status"].get("rollout") and len(d["status"]["replicas"]) == 2, "the rollout to v2", 90, count)
    time.sleep(1)
    result = Env.finish(load)
    print("load during the rollout:", result, flush=True)
    check(result["ok"] > 50 and result["failed"] == 0, "rollout v1 -> v2 under load: %d requests, %d failed %s" % (
        result["ok"], result["failed"], result["failures"]))
    check(most[0] <= 3, "at most one extra replica during the roll (most at once: %d of 2 + 1)" % most[0])
    reasons = [e["reason"] for e in env.events("fortunes")]
    steps = [e["message"] for e in env.events("fortunes") if e["reason"] == "CanaryStep"]
    check(len(steps) == 3 and "10%" in steps[0] and "50%" in steps[1] and "100%" in steps[2], "canary steps: %s" % steps)
    check("RolloutComplete" in reasons and "ReplicaDrained" in reasons, "the rollout completed and drained v1")
    stats = env.gateway.call("GET", "/admin/stats")["fortunes"]
    check(stats["v2"]["weight"] == 100 and stats["v1"]["weight"] == 0, "the gateway sends everything to v2: %s" % stats)
    check(all(r["version"] == 2 for r in d["status"]["replicas"]), "only v2 replicas remain")

    # 3. A bad version is rolled back automatically.
    load = env.load(4, "fortunes")
    time.sleep(1)
    move_alias(env, "alpha", "fortunes", "production", 3)
    d = env.wait("fortunes", lambda d: d["status"].get("lastRollback", {}).get("fromVersion") == 3, "the rollback of v3", 90)
    rb = d["status"]["lastRollback"]
    print("rollback:", rb, flush=True)
    check(rb["reason"] == "SloBreached" and rb["slo"] == "maxErrorRate" and rb["since"] and rb["toVersion"] == 2,
          "v3 rolled back: %s since %s: %s" % (rb["slo"], rb["since"], rb["message"]))
    d = env.wait("fortunes", lambda d: d["status"]["phase"] == "Degraded" and len(d["status"]["replicas"]) == 2
                 and all(r["version"] == 2 for r in d["status"]["replicas"]), "v3's replicas stopped", 60)
    check(d["status"]["version"] == 2 and "rolled back" in d["status"]["message"], "status: " + d["status"]["message"])
    failing = [c for c in d["status"]["conditions"] if c["type"] == "VersionFailing"]
    check(len(failing) == 1 and failing[0]["status"] == "True" and failing[0]["reason"] == "SloBreached"
          and failing[0]["message"].startswith("v3 failed (SloBreached: maxErrorRate broken) since ")
          and failing[0]["message"].endswith("; serving v2"), "the VersionFailing condition: %s" % failing)
    bad = Env.finish(load)
    print("load during the bad canary:", bad, flush=True)
    check(all("context length" in f for f in bad["failures"]), "the only failures are v3's refusals: %s" % bad["failures"])
    check(not any(j["metadata"]["labels"]["version"] == "3" for j in env.replica_jobs("fortunes")), "no v3 job runs")
    load = env.load(4, "fortunes")
    time.sleep(3)
    after = Env.finish(load)
    check(after["ok"] > 10 and after["failed"] == 0, "after the rollback v2 serves: %d requests, %d failed" % (
        after["ok"], after["failed"]))
    described = env.koi("deploy", "status", "fortunes").stdout
    check("Rolled back: v3 -> v2" in described and "maxErrorRate" in described, "koi deploy status shows the rollback")

    # 4. Manual rollback to the previous version, then delete.
    out = env.koi("deploy", "rollback", "fortunes").stdout
    check("back to v1" in out, "koi deploy rollback: " + out.strip())
    env.wait("fortunes", lambda d: d["status"]["version"] == 1 and not d["status"].get("rollout")
             and len(d["status"]["replicas"]) == 2 and all(r["version"] == 1 for r in d["status"]["replicas"]),
             "the rollback to v1", 60)
    ok("koi deploy rollback went back to v1 (and stays there while the alias names v3)")
    r = env.koi("deploy", "rollback", "nosuch", expect_ok=False)
    check(r.returncode != 0 and "not found" in r.stderr, "rollback of a missing deployment: " + r.stderr.strip())
    env.koi("deploy", "delete", "fortunes")
    end = time.time() + 60
    while time.time() < end:
        code, _ = env.cp.http("GET", "/apis/v1/namespaces/alpha/deployments/fortunes", TOKEN)
        if code == 404 and not env.replica_jobs("fortunes"):
            break
        time.sleep(0.2)
    check(code == 404 and not env.replica_jobs("fortunes"), "delete drained and stopped every replica")
    print("PASS")
finally:
    env.close()
