"""Live scheduling agrees with the simulator, as processes: `koi sim --decisions` and
`koi cluster serve` (local executor, real child processes) on the same 30 jobs of two tenants
with quotas and borrowing in a cohort, gangs of 1-3 GPUs on a declared 4-GPU node, some of
higher priority, make the same admissions and preemptions at every instant.

Time: `koi sim` replays trace time; the control plane runs on wall time. This test is the
trace's clock. Each job's command runs until the test ends it (it waits for a file), so a
job "runs for its duration" in trace time exactly. At each instant (the next arrival or the
end of a running job, by the times the LIVE control plane admitted them) the test pauses
admission (`PUT /apis/v1/admission`, what `koi cluster pause` does), ends the jobs due,
submits the arrivals, waits until the control plane has recorded the ends, resumes, and
waits until it has settled (no job Admitted, Preempting or stopping; two reconcile rounds
with nothing new). The admissions and preemptions it recorded meanwhile (the Admitted and
Preempted events) are that instant's, compared with the simulator's for the same instant.
Nothing of the simulator's output steers the live run.

Also checked at every settled instant: no gang runs partially (each Running job has all its
replicas) and every waiting job has a reason.
"""
import json
import os
import subprocess
import sys
import time

from cluster_harness import KOI, ControlPlane, check, fail

SEEDS = [int(s) for s in os.environ.get("KOI_SIM_AGREE_SEEDS", "12345").split(",")]
TOKENS = {"alpha": "alpha-token", "beta": "beta-token"}
ADMIN = "admin-token"

CONFIG = """reconcileIntervalSeconds: 0.05
nodes:
  - {name: n0, cpu: 64, memoryMiB: 1048576, gpus: {type: H100, count: 4}}
queues:
  - {name: qa, tenant: alpha, cohort: c, quota: {gpu: {nominal: 2, borrowingLimit: 2}}}
  - {name: qb, tenant: beta, cohort: c, quota: {gpu: {nominal: 2, borrowingLimit: 2}}}
tenants:
  - {name: alpha, token: alpha-token}
  - {name: beta, token: beta-token}
admins:
  - {name: ops, token: admin-token}
"""

SIM_NODES = """apiVersion: koi/v1
kind: Node
metadata: {name: n0}
spec: {cpu: 64, memoryMiB: 1048576, gpus: {type: H100, count: 4}}
---
apiVersion: koi/v1
kind: Queue
metadata: {name: qa}
spec: {tenant: alpha, cohort: c, quota: {gpu: {nominal: 2, borrowingLimit: 2}}}
---
apiVersion: koi/v1
kind: Queue
metadata: {name: qb}
spec: {tenant: beta, cohort: c, quota: {gpu: {nominal: 2, borrowingLimit: 2}}}
"""


def workload(seed):
    """30 jobs: tenant, gang size 1-3, priority 0 or 5, submit 100 + 0.7 i, duration 1-6
    (the generator of ReconcilerTest.LiveSchedulingAgreesWithTheSimulator)."""
    rng = seed
    mask = (1 << 64) - 1

    def nxt(n):
        nonlocal rng
        rng = (rng * 6364136223846793005 + 1442695040888963407) & mask
        return (rng >> 33) % n

    jobs = []
    for i in range(30):
        ns = "alpha" if nxt(2) else "beta"
        replicas = 1 + nxt(3)
        priority = 5 if nxt(3) == 0 else 0
        jobs.append({"ns": ns, "name": "j%d" % i, "replicas": replicas, "priority": priority,
                     "submit": 100 + 0.7 * i, "duration": float(1 + nxt(6))})
    return jobs


def simulate(root, jobs):
    nodes = os.path.join(root, "sim-nodes.yaml")
    trace = os.path.join(root, "sim-jobs.csv")
    out = os.path.join(root, "sim-decisions.json")
    with open(nodes, "w") as f:
        f.write(SIM_NODES)
    with open(trace, "w") as f:
        f.write("name,submit_time,duration,queue,priority,min_replicas,max_replicas,gpus,gpu_milli,cpu_milli,"
                "memory_mib,gpu_types,topology,preemptible\n")
        for j in jobs:
            f.write("%s,%r,%r,%s,%d,%d,%d,1,1000,1000,1024,,none,true\n" % (
                j["name"], j["submit"], j["duration"], "qa" if j["ns"] == "alpha" else "qb", j["priority"],
                j["replicas"], j["replicas"]))
    r = subprocess.run([KOI, "sim", "--nodes", nodes, "--trace", trace, "--policy", "koi", "--decisions", out],
                       capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        fail("koi sim failed: " + r.stdout + r.stderr)
    with open(out) as f:
        return [(s["time"], sorted(s["admit"]), sorted(s["preempt"])) for s in json.load(f)]


class Live:
    """The control plane driven one trace instant at a time."""

    def __init__(self, cp, jobs):
        self.cp = cp
        self.jobs = {j["name"]: j for j in jobs}
        self.done_dir = os.path.join(cp.root, "done")
        os.makedirs(self.done_dir)
        self.seen_events = {}  # job -> events already read

    def api(self, method, path, token=ADMIN, body=None):
        code, text = self.cp.http(method, path, token, body)
        if code >= 300:
            fail("%s %s: %d %s" % (method, path, code, text))
        return json.loads(text)

    def admission(self, paused):
        return self.api("PUT", "/apis/v1/admission", body=json.dumps({"paused": paused, "reason": "trace instant"}))

    def submit(self, j):
        command = "while [ ! -e %s/%s ]; do sleep 0.01; done" % (self.done_dir, j["name"])
        spec = {"command": ["/bin/sh", "-c", command], "queue": "qa" if j["ns"] == "alpha" else "qb",
                "replicas": j["replicas"], "priority": j["priority"],
                "resources": {"gpu": 1, "cpu": 1, "memoryMiB": 1024}, "terminationGracePeriodSeconds": 1}
        body = json.dumps({"apiVersion": "koi/v1", "kind": "Job", "metadata": {"name": j["name"]}, "spec": spec})
        self.api("POST", "/apis/v1/namespaces/%s/jobs" % j["ns"], TOKENS[j["ns"]], body)

    def end(self, name):
        open(os.path.join(self.done_dir, name), "w").close()

    def all_jobs(self):
        return {j["metadata"]["name"]: j for j in self.api("GET", "/apis/v1/jobs")["items"]}

    def new_decisions(self, names):
        admitted, preempted = [], []
        for name in names:
            j = self.jobs[name]
            events = self.api("GET", "/apis/v1/namespaces/%s/jobs/%s/events" % (j["ns"], name))["items"]
            for e in events[self.seen_events.get(name, 0):]:
                if e["reason"] == "Admitted":
                    admitted.append(name)
                elif e["reason"] == "Preempted":
                    preempted.append(name)
            self.seen_events[name] = len(events)
        return sorted(admitted), sorted(preempted)

    def unsettled(self, jobs):
        return [(n, j["status"]["phase"], j["status"].get("reason"), j["status"].get("terminating"))
                for n, j in jobs.items()
                if j["status"]["phase"] == "Admitted" or j["status"].get("reason") == "Preempting"
                or j["status"].get("terminating")]

    def settled(self, jobs):
        return not self.unsettled(jobs)

    def wait(self, what, cond, deadline_s=30, on_timeout=lambda: ""):
        end = time.time() + deadline_s
        while time.time() < end:
            got = cond()
            if got:
                return got
            time.sleep(0.02)
        fail("timed out waiting for " + what + on_timeout())

    def settle(self):
        """Waits for a state that two further reconcile rounds leave unchanged."""
        def stable():
            before = self.all_jobs()
            if not self.settled(before):
                return None
            r0 = self.api("GET", "/apis/v1/admission")["rounds"]
            self.wait("two reconcile rounds", lambda: self.api("GET", "/apis/v1/admission")["rounds"] >= r0 + 2)
            after = self.all_jobs()
            same = {n: (j["metadata"]["resourceVersion"]) for n, j in before.items()} == \
                   {n: (j["metadata"]["resourceVersion"]) for n, j in after.items()}
            if not same:
                self.changing = sorted((n, j["status"].get("reason"), j["status"].get("message"))
                                       for n, j in after.items()
                                       if before.get(n, {}).get("metadata", {}).get("resourceVersion") !=
                                       j["metadata"]["resourceVersion"])
            return after if same and self.settled(after) else None
        return self.wait("the control plane to settle", stable,
                         on_timeout=lambda: "; unsettled: %s; changing: %s" % (
                             self.unsettled(self.all_jobs()), getattr(self, "changing", None)))

    def check_invariants(self, jobs, t):
        for name, j in jobs.items():
            st = j["status"]
            if st["phase"] == "Running":
                check(len(st.get("replicas", [])) == j["spec"]["replicas"],
                      "t=%g: %s runs %d of its %d replicas" % (t, name, len(st.get("replicas", [])), j["spec"]["replicas"]))
            if st["phase"] in ("Pending", "Preempted"):
                check(st.get("reason"), "t=%g: waiting job %s has no reason" % (t, name))

    def run(self):
        arrivals = sorted(self.jobs.values(), key=lambda j: (j["submit"], j["name"]))
        running = {}  # name -> trace time its run ends
        steps = []
        self.admission(True)
        while True:
            due = [arrivals[0]["submit"]] if arrivals else []
            due += list(running.values())
            if not due:
                break
            t = min(due)
            ending = sorted(n for n, e in running.items() if e <= t + 1e-9)
            for n in ending:
                self.end(n)
                del running[n]
            while arrivals and arrivals[0]["submit"] <= t + 1e-9:
                self.submit(arrivals.pop(0))
            self.wait("the ends of %s to be recorded" % ending,
                      lambda: all(self.all_jobs()[n]["status"]["phase"] == "Succeeded" for n in ending))
            self.admission(False)
            jobs = self.settle()
            self.admission(True)
            self.check_invariants(jobs, t)
            admitted, preempted = self.new_decisions(sorted(jobs))
            # A job may be admitted and preempted (or the reverse) at one instant: what runs
            # now is what the control plane says; each run's end counts from its admission.
            for n, j in jobs.items():
                if j["status"]["phase"] != "Running":
                    running.pop(n, None)
                elif n in admitted:
                    running[n] = t + self.jobs[n]["duration"]
            if admitted or preempted:
                steps.append((t, admitted, preempted))
        self.admission(False)
        left = [n for n, j in self.all_jobs().items() if j["status"]["phase"] != "Succeeded"]
        check(not left, "jobs not Succeeded at the end: %s" % left)
        return steps


def compare(seed, sim, live):
    for i in range(max(len(sim), len(live))):
        s = sim[i] if i < len(sim) else None
        l = live[i] if i < len(live) else None
        if s is None or l is None or abs(s[0] - l[0]) > 1e-6 or s[1:] != l[1:]:
            fail("seed %d: instant %d differs:\n  sim  %s\n  live %s\n(sim %d instants, live %d)" % (
                seed, i, s, l, len(sim), len(live)))


def main():
    total_preemptions = 0
    for seed in SEEDS:
        cp = ControlPlane(CONFIG).start()
        try:
            jobs = workload(seed)
            sim = simulate(cp.root, jobs)
            live = Live(cp, jobs).run()
            compare(seed, sim, live)
            preemptions = sum(len(s[2]) for s in live)
            total_preemptions += preemptions
            print("seed %d: %d instants agree (%d admissions, %d preemptions)" % (
                seed, len(live), sum(len(s[1]) for s in live), preemptions), flush=True)
            check(not json.loads(cp.http("GET", "/apis/v1/admission", ADMIN)[1])["paused"], "left paused")
        finally:
            cp.cleanup()
    check(total_preemptions > 0, "no seed exercised preemption")
    print("PASS")


if __name__ == "__main__":
    main()
