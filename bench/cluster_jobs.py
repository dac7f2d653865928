"""koi cluster throughput on the local executor: N short command jobs (`true`, CPU only)
submitted over HTTP (one client, one after another) to one control plane with a declared
(fake) inventory, run to completion.

Reports submissions per second (the API and one store transaction each), the submit latency
p50/p99, admissions per second (Admitted events, first to last, from their exact timestamps in
the watch log), the p99 latency of reads made while the jobs run (GET one job, GET /metrics,
from a second client), and jobs completed per second from the first submission to the last
completion. Completion is polled through /metrics (koi_cluster_jobs_finished_total), which
does not load the server as listing 10,000 jobs would.

--pending: instead, N jobs that can never start (9 GPUs each on an 8-GPU node) are submitted and
left pending; reports what one reconcile round costs with N jobs waiting (rounds/s, seconds per
round from koi_cluster_reconcile_seconds, and the control plane's CPU share from /proc) over 10 s.

Not a test; usage: python3 bench/cluster_jobs.py build/koi [N] [--profile] [--pending]
(--profile runs the control plane under `perf record -g`, written to ./cluster_jobs.perf.data)"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

KOI = sys.argv[1] if len(sys.argv) > 1 else "build/koi"
N = int(sys.argv[2]) if len(sys.argv) > 2 and sys.argv[2].isdigit() else 1000
PROFILE = "--profile" in sys.argv
PENDING = "--pending" in sys.argv
TOKEN = "bench-token-0001"

root = tempfile.mkdtemp(prefix="koi-cluster-bench-")
with open(os.path.join(root, "cluster.yaml"), "w") as f:
    f.write("nodes:\n  - {name: n0, cpu: 64, memoryMiB: 262144, gpus: {type: H100, count: 8}}\n"
            "queues:\n  - {name: q, tenant: bench}\ntenants:\n  - {name: bench, token: %s}\n" % TOKEN)
cmd = [KOI, "cluster", "serve", "--store", "sqlite:" + root + "/cp.db", "--config", root + "/cluster.yaml", "--port", "0",
       "--work-dir", root + "/work"]
if PROFILE:
    cmd = ["perf", "record", "-F", "199", "-g", "-o", "cluster_jobs.perf.data", "--"] + cmd
proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
url = proc.stdout.readline().split("listening on ")[1].split()[0]


def call(method, path, body=None, raw=False):
    req = urllib.request.Request(url + path, method=method, data=body.encode() if body else None,
                                 headers={"Authorization": "Bearer " + TOKEN})
    with urllib.request.urlopen(req, timeout=120) as r:
        data = r.read()
        return data.decode() if raw else json.loads(data)


def finished():
    text = call("GET", "/metrics", raw=True)
    return sum(float(v) for v in re.findall(r'^koi_cluster_jobs_finished_total\{[^}]*\} (\S+)$', text, re.M))


def pct(xs, p):
    xs = sorted(xs)
    return round(1000 * xs[min(len(xs) - 1, int(len(xs) * p))], 2) if xs else None


read_latencies, stop = [], threading.Event()


def reader():
    """A second client reading while the jobs are submitted and run: the API's latency under load."""
    i = 0
    while not stop.is_set():
        path = "/apis/v1/namespaces/bench/jobs/j%d" % (i % max(1, submitted[0])) if i % 2 else "/metrics"
        s = time.time()
        try:
            call("GET", path, raw=True)
            read_latencies.append(time.time() - s)
        except Exception:  # a job not yet submitted
            pass
        i += 1
        time.sleep(0.05)


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rounds():
    text = call("GET", "/metrics", raw=True)
    total = float(re.search(r"^koi_cluster_reconcile_seconds_sum (\S+)$", text, re.M).group(1))
    count = float(re.search(r"^koi_cluster_reconcile_seconds_count (\S+)$", text, re.M).group(1))
    return total, count


def bench_pending():
    t0 = time.time()
    for i in range(N):
        body = json.dumps({"apiVersion": "koi/v1", "kind": "Job", "metadata": {"name": "p%d" % i},
                           "spec": {"command": ["true"], "resources": {"cpu": 0.1, "memoryMiB": 16, "gpu": 9}}})
        call("POST", "/apis/v1/namespaces/bench/jobs", body)
    submit_s = time.time() - t0
    time.sleep(3)  # the explanations of the new jobs are written
    (s0, c0), cpu0, w0 = rounds(), cpu_seconds(proc.pid), time.time()
    time.sleep(10)
    (s1, c1), cpu1, w1 = rounds(), cpu_seconds(proc.pid), time.time()
    print(json.dumps({"pending": N, "submissions_per_s": round(N / submit_s, 1), "rounds_per_s": round((c1 - c0) / (w1 - w0), 2),
                      "ms_per_round": round(1000 * (s1 - s0) / max(1, c1 - c0), 1),
                      "control_plane_cpu_share": round((cpu1 - cpu0) / (w1 - w0), 3)}))


submitted = [0]
try:
    if PENDING:
        bench_pending()
        sys.exit(0)
    latencies = []
    threading.Thread(target=reader, daemon=True).start()
    t0 = time.time()
    for i in range(N):
        body = json.dumps({"apiVersion": "koi/v1", "kind": "Job", "metadata": {"name": "j%d" % i},
                           "spec": {"command": ["true"], "resources": {"cpu": 0.1, "memoryMiB": 16},
                                    "restartPolicy": {"maxRestarts": 0}}})
        s = time.time()
        call("POST", "/apis/v1/namespaces/bench/jobs", body)
        latencies.append(time.time() - s)
        submitted[0] = i + 1
    t_submitted = time.time()
    while finished() < N:
        time.sleep(0.5)
    t_done = time.time()
    stop.set()
    # Admissions from the watch log: every Admitted event with its exact time.
    events, after = [], 0
    while True:  # the watch log in pieces: each call streams for a second from `after`
        log = call("GET", "/apis/v1/watch?resourceVersion=%d&timeoutSeconds=1" % after, raw=True)
        frames = [f for f in log.split("\n\n") if f.startswith("id: ")]
        if not frames:
            break
        for frame in frames:
            after = int(frame.split("\n", 1)[0][4:])
            if "\nevent: EVENT\n" in frame:
                events.append(json.loads("".join(l[6:] for l in frame.splitlines() if l.startswith("data: "))))
    admitted = sorted(e["timestamp"] for e in events if e["reason"] == "Admitted")
    failed = sum(e["reason"] in ("Failed", "RestartBudgetExhausted") for e in events)
    latencies.sort()
    print(json.dumps({
        "jobs": N, "failed": failed, "admitted": len(admitted),
        "submissions_per_s": round(N / (t_submitted - t0), 1),
        "submit_p50_ms": pct(latencies, 0.5), "submit_p99_ms": pct(latencies, 0.99),
        "admissions_per_s": round((len(admitted) - 1) / (admitted[-1] - admitted[0]), 1) if len(admitted) > 1 else None,
        "read_p50_ms": pct(read_latencies, 0.5), "read_p99_ms": pct(read_latencies, 0.99), "reads": len(read_latencies),
        "completions_per_s_end_to_end": round(N / (t_done - t0), 1),
        "wall_s": round(t_done - t0, 1),
    }))
    # Published figures (issue 14), not measured here: Kueue about 43 admissions/s, Slurm about 500 jobs/s.
    if len(admitted) > 1:
        rate = (len(admitted) - 1) / (admitted[-1] - admitted[0])
        print("admissions/s vs Kueue's published ~43: %.2fx; completions/s vs Slurm's published ~500 jobs/s: %.2fx"
              % (rate / 43, N / (t_done - t0) / 500))
finally:
    stop.set()
    proc.terminate()
    proc.wait()
    shutil.rmtree(root, ignore_errors=True)
