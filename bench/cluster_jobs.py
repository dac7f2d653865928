"""koi cluster throughput on the local executor: N short command jobs (`true`, CPU only)
submitted over HTTP (one client, one after another) to one control plane, run to completion.
Reports submissions per second (the API and one store transaction each), the submit latency
p50/p99, and jobs completed per second from the first submission to the last completion.
Not a test; usage: python3 bench/cluster_jobs.py build/koi [N]"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

KOI = sys.argv[1] if len(sys.argv) > 1 else "build/koi"
N = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
TOKEN = "bench-token-0001"

root = tempfile.mkdtemp(prefix="koi-cluster-bench-")
with open(os.path.join(root, "cluster.yaml"), "w") as f:
    f.write("nodes:\n  - {name: n0, cpu: 64, memoryMiB: 262144, gpus: {type: H100, count: 8}}\n"
            "queues:\n  - {name: q, tenant: bench}\ntenants:\n  - {name: bench, token: %s}\n" % TOKEN)
proc = subprocess.Popen([KOI, "cluster", "serve", "--store", "sqlite:" + root + "/cp.db", "--config",
                         root + "/cluster.yaml", "--port", "0", "--work-dir", root + "/work"],
                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
url = proc.stdout.readline().split("listening on ")[1].split()[0]


def call(method, path, body=None):
    req = urllib.request.Request(url + path, method=method, data=body.encode() if body else None,
                                 headers={"Authorization": "Bearer " + TOKEN})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


try:
    latencies = []
    t0 = time.time()
    for i in range(N):
        body = json.dumps({"apiVersion": "koi/v1", "kind": "Job", "metadata": {"name": "j%d" % i},
                           "spec": {"command": ["true"], "resources": {"cpu": 0.1, "memoryMiB": 16},
                                    "restartPolicy": {"maxRestarts": 0}}})
        s = time.time()
        call("POST", "/apis/v1/namespaces/bench/jobs", body)
        latencies.append(time.time() - s)
    t_submitted = time.time()
    while True:
        jobs = call("GET", "/apis/v1/namespaces/bench/jobs")["items"]
        if all(j["status"]["phase"] in ("Succeeded", "Failed") for j in jobs):
            break
        time.sleep(0.5)
    t_done = time.time()
    failed = sum(j["status"]["phase"] == "Failed" for j in jobs)
    latencies.sort()
    print(json.dumps({
        "jobs": N, "failed": failed,
        "submissions_per_s": round(N / (t_submitted - t0), 1),
        "submit_p50_ms": round(1000 * latencies[len(latencies) // 2], 2),
        "submit_p99_ms": round(1000 * latencies[int(len(latencies) * 0.99)], 2),
        "completions_per_s_end_to_end": round(N / (t_done - t0), 1),
        "wall_s": round(t_done - t0, 1),
    }))
finally:
    proc.terminate()
    proc.wait()
    shutil.rmtree(root, ignore_errors=True)
