"""koi cluster, two tenants with GPU quotas on a declared 4-GPU inventory, through the CLI:
gangs never start partially (no replica ever runs while its gang is incomplete, and the
GPUs in use never exceed 4), waiting jobs show plan()'s reason, a tenant cannot read,
follow, cancel or submit into another tenant's namespace (404, as for a missing job), bad
specs get a 400 naming the field, stale cancels get 409, and watch streams the changes."""
import json
import os
import subprocess
import time

from cluster_harness import KOI, check, fail, manifest, write, run_test

CONFIG = """
nodes:
  - {name: node-a, cpu: 16, memoryMiB: 32768, gpus: {type: H100, count: 2}}
  - {name: node-b, cpu: 16, memoryMiB: 32768, gpus: {type: H100, count: 2}}
queues:
  - {name: alpha-q, tenant: alpha, cohort: shared, quota: {gpu: {nominal: 2, borrowingLimit: 0}}}
  - {name: beta-q, tenant: beta, cohort: shared, quota: {gpu: {nominal: 2, borrowingLimit: 0}}}
tenants:
  - {name: alpha, token: alpha-token}
  - {name: beta, token: beta-token}
admins:
  - {name: ops, token: admin-token}
"""
A, B, ADMIN = "alpha-token", "beta-token", "admin-token"


def replica_cmd(marks, seconds):
    # Each replica records its start and end (job, replica, GPUs, times) in a shared file.
    return ["sh", "-c", 'echo "start $KOI_JOB $KOI_REPLICA $KOI_NODE:$CUDA_VISIBLE_DEVICES $(date +%%s.%%N)" >> %s; '
            'sleep %s; echo "end $KOI_JOB $KOI_REPLICA $KOI_NODE:$CUDA_VISIBLE_DEVICES $(date +%%s.%%N)" >> %s' % (marks, seconds, marks)]


def run(cp):
    marks = os.path.join(cp.root, "marks.txt")
    nodes = cp.koi(A, "node", "list").stdout
    check("node-a" in nodes and "H100" in nodes, "node list: " + nodes)

    jobs = {  # name -> (token, replicas, seconds)
        "a-pair": (A, 2, 1.5), "a-trio": (A, 3, 0.5), "a-single": (A, 1, 1.0),
        "b-pair": (B, 2, 1.5), "b-pair2": (B, 2, 1.0),
    }
    for name, (token, replicas, seconds) in jobs.items():
        path = write(cp.root, name + ".json", manifest(name, {
            "command": replica_cmd(marks, seconds), "replicas": replicas, "resources": {"gpu": 1, "cpu": 1}}))
        out = cp.koi(token, "job", "submit", "-f", path).stdout
        check("submitted" in out, out)

    # a-trio asks for 3 GPUs against alpha's quota of 2 without borrowing: it can never start.
    trio = cp.wait_phase(A, "a-trio", ["Pending"])
    end = time.time() + 20
    while time.time() < end and trio["status"]["reason"] != "quota":
        time.sleep(0.1)
        trio = cp.job(A, "a-trio")
    check(trio["status"]["reason"] == "quota", "a-trio waits for: %s" % trio["status"])
    describe = cp.koi(A, "job", "describe", "a-trio").stdout
    check("Reason:       quota" in describe and "Waiting" in describe, describe)
    check(trio["status"]["message"], "waiting job without a message")

    for name in ["a-pair", "a-single", "b-pair", "b-pair2"]:
        j = cp.wait_phase(jobs[name][0], name, ["Succeeded"])
        check(j["status"]["attempts"] == 1, "%s ran %d times" % (name, j["status"]["attempts"]))
    check(cp.job(A, "a-trio")["status"]["phase"] == "Pending", "a-trio started")

    # Gangs whole, GPUs never oversubscribed: each (node, GPU) runs one replica at a time.
    events = []
    for line in open(marks):
        kind, job, replica, gpu, t = line.split()
        events.append((float(t), kind, job, int(replica), gpu))
    events.sort(key=lambda e: (e[0], e[1] == "start"))  # at equal times an end frees first
    running, in_use, max_gpus = {}, {}, 0
    for t, kind, job, replica, gpu in events:
        name = job.split("/")[1]
        if kind == "start":
            running.setdefault(name, set()).add(replica)
            check(gpu not in in_use, "GPU %s given to %s while %s holds it" % (gpu, name, in_use.get(gpu)))
            in_use[gpu] = name
        else:
            in_use.pop(gpu, None)
        max_gpus = max(max_gpus, len(in_use))
    check(max_gpus <= 4, "%d GPUs in use at once on a 4-GPU inventory" % max_gpus)
    for name, (token, replicas, _) in jobs.items():
        started = running.get(name, set())
        check(len(started) in (0, replicas), "%s started %d of %d replicas" % (name, len(started), replicas))
    # Each gang was launched in one step, all of its replicas at once.
    for name in ["a-pair", "b-pair", "b-pair2"]:
        started = [e["message"] for e in cp.koi_json(jobs[name][0], "job", "events", name)["items"]
                   if e["reason"] == "Started"]
        check(len(started) == 1 and "2 replica(s) started" in started[0], "%s: %s" % (name, started))

    # Tenant isolation, per verb: beta sees alpha's job exactly as a missing one.
    missing = cp.koi(B, "job", "describe", "no-such-job", "-n", "alpha", expect_ok=False)
    for verb in (["describe"], ["events"], ["logs"], ["logs", "-f"], ["cancel"]):
        r = cp.koi(B, "job", *verb, "a-pair", "-n", "alpha", expect_ok=False)
        check(r.returncode != 0 and "job a-pair not found in namespace alpha" in r.stderr,
              "beta %s alpha's job: %s %s" % (verb, r.stdout, r.stderr))
    r = cp.koi(B, "job", "list", "-n", "alpha", expect_ok=False)
    check(r.returncode != 0 and "namespace alpha not found" in r.stderr, "beta lists alpha: " + r.stdout + r.stderr)
    spec = write(cp.root, "intruder.json", manifest("intruder", {"command": ["true"]}))
    r = cp.koi(B, "job", "submit", "-f", spec, "-n", "alpha", expect_ok=False)
    check(r.returncode != 0 and "not found" in r.stderr, "beta submits into alpha: " + r.stderr)
    code_other, body_other = cp.http("GET", "/apis/v1/namespaces/alpha/jobs/a-pair", B)
    code_none, body_none = cp.http("GET", "/apis/v1/namespaces/alpha/jobs/zzz", B)
    check(code_other == 404 and code_none == 404, "beta GET alpha job: %d" % code_other)
    check(json.loads(body_other)["reason"] == json.loads(body_none)["reason"] == "NotFound", body_other)
    check(cp.http("DELETE", "/apis/v1/namespaces/alpha/jobs/a-trio", B)[0] == 404, "beta cancels alpha's job")
    check(cp.job(A, "a-trio")["status"]["phase"] == "Pending", "a-trio was touched by beta")
    beta_list = cp.koi_json(B, "job", "list")
    check(sorted(j["metadata"]["name"] for j in beta_list["items"]) == ["b-pair", "b-pair2"], "beta's list")
    check([q["metadata"]["name"] for q in cp.koi_json(B, "queue", "list")["items"]] == ["beta-q"], "beta's queues")
    check(cp.http("GET", "/apis/v1/jobs", B)[0] == 404, "beta lists every namespace")
    check(len(json.loads(cp.http("GET", "/apis/v1/jobs", ADMIN)[1])["items"]) == 5, "admin sees every job")
    everything = cp.koi(ADMIN, "job", "list", "-A").stdout
    check(everything.startswith("NAMESPACE") and "alpha " in everything and "beta " in everything, everything)
    r = cp.koi(B, "job", "list", "-A", expect_ok=False)
    check(r.returncode != 0 and "needs an admin token" in r.stderr, r.stderr)
    check(cp.http("GET", "/apis/v1/namespaces/alpha/jobs", "wrong-token")[0] == 401, "a wrong token")
    check(cp.http("GET", "/apis/v1/namespaces/alpha/jobs")[0] == 401, "no token")
    queue_table = cp.koi(ADMIN, "queue", "list").stdout
    check("alpha-q" in queue_table and "beta-q" in queue_table and "0/2(+0)" in queue_table, queue_table)

    # Logs of a finished job; bad specs name the field; the server stays healthy.
    logs = cp.koi(A, "job", "logs", "a-pair", "--replica", "1").stdout
    check(logs == "", "a-pair wrote to stdout: " + logs)
    bad = {
        '{"apiVersion": "koi/v1", "kind": "Job", "metadata": {"name": "x"}, "spec": {"command": ["true"], "replicas": 0}}':
            "spec.replicas: must be >= 1",
        '{"apiVersion": "koi/v1", "kind": "Job", "metadata": {"name": "x"}, "spec": {"command": ["true"], "queue": "beta-q"}}':
            "spec.queue: no queue 'beta-q' in namespace alpha (its queues: alpha-q)",
        '{"apiVersion": "koi/v1", "kind": "Job", "metadata": {"name": "x"}, "spec": {"command": ["true"], '
        '"resources": {"gpu": 1, "gpuType": "A100"}}}': "spec.resources.gpuType: no node has GPUs of type 'A100' (types: H100)",
        '{"apiVersion": "koi/v1", "kind": "Job", "metadata": {"name": "x"}, "spec": {"command": ["true"], "colour": 1}}':
            "spec.colour: unknown field",
        '{"apiVersion": "koi/v1", "kind": "Job", "metadata": {"name": "a-pair"}, "spec": {"command": ["true"]}}':
            "job a-pair already exists in namespace alpha; pick another name or delete it first",
    }
    for body, message in bad.items():
        code, reply = cp.http("POST", "/apis/v1/namespaces/alpha/jobs", A, body)
        check(code in (400, 409) and json.loads(reply)["message"] == message, "%d %s" % (code, reply))
    path = write(cp.root, "bad.yaml", "apiVersion: koi/v1\nkind: Job\nmetadata: {name: x}\nspec: {command: [true], replicas: 0}\n")
    r = cp.koi(A, "job", "submit", "-f", path, expect_ok=False)
    check(r.returncode == 1 and "spec.replicas: must be >= 1" in r.stderr, r.stderr)
    check(cp.http("GET", "/health")[0] == 200, "unhealthy after bad requests")
    r = subprocess.run([KOI, "cluster", "serve", "--store", "sqlite:" + os.path.join(cp.root, "x.db"), "--config",
                        cp.config, "--port", "70000"], capture_output=True, text=True)
    check(r.returncode == 1 and r.stderr == "error: --port must be 0-65535 (0 picks a free one); got 70000\n", r.stderr)

    # Optimistic concurrency on cancel, then a real cancel of the waiting job.
    rv = int(cp.job(A, "a-trio")["metadata"]["resourceVersion"])
    code, reply = cp.http("DELETE", "/apis/v1/namespaces/alpha/jobs/a-trio?resourceVersion=%d" % (rv - 1), A)
    check(code == 409 and json.loads(reply)["reason"] == "Conflict", "stale cancel: %d %s" % (code, reply))
    out = cp.koi(A, "job", "cancel", "a-trio").stdout
    check("cancelling" in out, out)
    cp.wait_phase(A, "a-trio", ["Cancelled"])
    reasons = [e["reason"] for e in cp.koi_json(A, "job", "events", "a-trio")["items"]]
    check(reasons[0] == "Submitted" and "CancelRequested" in reasons and reasons[-1] == "Cancelled", str(reasons))

    # Queues are the admins': a tenant may not change one; an admin raises alpha's quota to 3
    # GPUs and a 3-GPU gang that waited for quota starts.
    path = write(cp.root, "trio2.json", manifest("a-trio2", {"command": ["true"], "replicas": 3, "resources": {"gpu": 1}}))
    cp.koi(A, "job", "submit", "-f", path)
    end = time.time() + 20
    while time.time() < end and cp.job(A, "a-trio2")["status"]["reason"] != "quota":
        time.sleep(0.1)
    check(cp.job(A, "a-trio2")["status"]["reason"] == "quota", "a-trio2 does not wait for quota")
    queue = write(cp.root, "alpha-q.yaml", "apiVersion: koi/v1\nkind: Queue\nmetadata: {name: alpha-q}\n"
                  "spec: {tenant: alpha, cohort: shared, quota: {gpu: {nominal: 3, borrowingLimit: 0}}}\n")
    r = cp.koi(A, "queue", "apply", "-f", queue, expect_ok=False)
    check(r.returncode != 0 and "forbidden: queues are managed by admins" in r.stderr, r.stderr)
    bad = write(cp.root, "bad-q.yaml", "apiVersion: koi/v1\nkind: Queue\nmetadata: {name: alpha-q}\n"
                "spec: {tenant: beta, quota: {gpu: {nominal: 3}}}\n")
    r = cp.koi(ADMIN, "queue", "apply", "-f", bad, expect_ok=False)
    check(r.returncode != 0 and "spec.tenant: queue alpha-q belongs to alpha" in r.stderr, r.stderr)
    bad = write(cp.root, "bad-q2.yaml", "apiVersion: koi/v1\nkind: Queue\nmetadata: {name: alpha-q}\n"
                "spec: {tenant: alpha, quota: {gpu: {nominal: 3, borrow: 1}}}\n")
    r = cp.koi(ADMIN, "queue", "apply", "-f", bad, expect_ok=False)
    check(r.returncode != 0 and "spec.quota.gpu.borrow: unknown field" in r.stderr, r.stderr)
    check("queue/alpha-q configured" in cp.koi(ADMIN, "queue", "apply", "-f", queue).stdout, "queue apply")
    cp.wait_phase(A, "a-trio2", ["Succeeded"])
    check("3/3(+0)" in cp.koi(A, "queue", "list").stdout or "0/3(+0)" in cp.koi(A, "queue", "list").stdout,
          cp.koi(A, "queue", "list").stdout)

    # Watch: every change after a resource version, as server-sent events; a tenant sees only its own.
    code, stream = cp.http("GET", "/apis/v1/watch?resourceVersion=0&timeoutSeconds=1", B)
    check(code == 200 and "event: ADDED" in stream and "b-pair" in stream and "a-pair" not in stream, stream[:400])
    metrics = cp.http("GET", "/metrics")[1]
    for name in ["koi_cluster_admissions_total", "koi_cluster_queue_pending_jobs", "koi_cluster_restarts_total"]:
        check(name in metrics, name + " missing from /metrics")
    check('koi_cluster_admissions_total{queue="beta-q"} 2' in metrics, metrics)


if __name__ == "__main__":
    run_test(CONFIG, run)
