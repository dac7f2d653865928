"""Deployment autoscaling from the replicas' own metrics, with real koi serve replicas of
stories260K behind koi gateway and load from the official openai npm client: replicas run one
sequence at a time (--max-num-seqs 1), the autoscaler aims at 1.5 waiting requests per
replica between 1 and 3 replicas. Doubling the load (2 -> 4 concurrent clients) scales up to
2, within the bounds; halving it scales back to 1 after the scale-down delay; 0 requests fail
throughout. Then a queue quota that holds one replica: the second waits, and the
deployment's status says why in plan()'s words."""
import time

from cluster_deploy_harness import *

LONG = 200  # tokens per request: the replicas' engine, not the client, is the bottleneck
env = Env()
try:
    seed_model(env, "alpha", "fortunes", [env.good], {"production": 1})
    spec = {"model": "fortunes@production", "replicas": {"min": 1, "max": 3}, "resources": {"cpu": 1, "memoryMiB": 512},
            "serveArgs": ["--threads", "1", "--max-num-seqs", "1"],
            "rollout": {"drainTimeoutSeconds": 10},
            "autoscale": {"metric": "waitingRequests", "target": 1.5, "scaleDownDelaySeconds": 4}}
    env.koi("deploy", "apply", "-f", deployment_manifest(env.root, "fortunes", spec))
    env.wait("fortunes", lambda d: d["status"]["phase"] == "Available", "v1 available")
    most = [0]

    def count(d):
        most[0] = max(most[0], d["status"]["desiredReplicas"], len(env.replica_jobs("fortunes")))

    base = env.load(2, "fortunes", LONG)
    time.sleep(4)
    d = env.deployment("fortunes")
    check(d["status"]["desiredReplicas"] == 1, "2 clients: 1 replica (%s)" % d["status"]["autoscale"]["message"])
    extra = env.load(2, "fortunes", LONG)
    d = env.wait("fortunes", lambda d: d["status"]["desiredReplicas"] >= 2 and d["status"]["phase"] == "Available",
                 "the scale-up", 60, count)
    ok("4 clients: scaled up to %d (%s)" % (d["status"]["desiredReplicas"], d["status"]["autoscale"]["message"]))
    time.sleep(3)
    count(env.deployment("fortunes"))
    check(most[0] <= 3, "never beyond max 3 replicas (most: %d)" % most[0])
    doubled = Env.finish(extra)
    d = env.wait("fortunes", lambda d: d["status"]["desiredReplicas"] == 1 and len(d["status"]["replicas"]) == 1,
                 "the scale-down after the delay", 60)
    reasons = [e["reason"] for e in env.events("fortunes")]
    check("ScaledUp" in reasons and "ScaledDown" in reasons and "ReplicaDrained" in reasons, "scaled up, then down, draining")
    down = [e for e in env.events("fortunes") if e["reason"] == "ScaledDown"][0]
    check("after" in down["message"], "the scale-down waited its delay: " + down["message"])
    time.sleep(1)
    steady = Env.finish(base)
    print("loads:", steady, doubled, flush=True)
    check(steady["failed"] == 0 and doubled["failed"] == 0 and steady["ok"] + doubled["ok"] > 100,
          "0 failed requests through scale-up and scale-down (%d + %d ok)" % (steady["ok"], doubled["ok"]))

    # A quota of one replica: the autoscaler's second replica waits with plan()'s reason.
    # (the config is the declared state: a restart with a smaller quota; the replicas keep running)
    env.cp.stop()
    with open(env.cp.config, "w") as f:
        f.write(control_plane_config(env.gateway, 1))
    env.cp.start()
    extra = env.load(4, "fortunes", LONG)
    d = env.wait("fortunes", lambda d: d["status"]["desiredReplicas"] >= 2 and "waits: quota:" in d["status"]["message"],
                 "a replica waiting for quota", 60)
    print("status:", d["status"]["message"], flush=True)
    check("cpu quota" in d["status"]["message"] and d["status"]["phase"] == "Degraded",
          "the waiting replica's reason is in the status: " + d["status"]["message"])
    Env.finish(extra)
    print("PASS")
finally:
    env.close()
