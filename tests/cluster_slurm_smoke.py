"""koi cluster on the Slurm executor, quick: the inventory is Slurm's (3 hosts of 4 CPUs,
4096 MiB and 2 fake H100 each, leaf switches s0/s1 under spine sp0); a 2-replica gang runs as
one Slurm allocation with a task on each of two hosts (distinct network namespaces), each in
its own directory with its own environment and log; a replica's exit code reaches the job's
status; the nodes carry slurmd's load as their measured usage; a fractional CPU request is
refused with its reason; a bad executor key is refused by name."""
import json
import os

from cluster_harness import KOI, check, manifest, run_slurm_test, write
import subprocess

A = "alpha-token"


def run(cp, slurm):
    nodes = cp.koi_json(A, "node", "list")["items"]
    by_name = {n["metadata"]["name"]: n["spec"] for n in nodes}
    check(sorted(by_name) == ["h0", "h1", "h2"], "nodes %s" % sorted(by_name))
    check(by_name["h0"]["cpu"] == 4 and by_name["h0"]["memoryMiB"] == 4096, str(by_name["h0"]))
    check(by_name["h0"]["gpus"]["type"] == "H100" and by_name["h0"]["gpus"]["count"] == 2, str(by_name["h0"]))
    check(by_name["h1"]["topology"] == {"leafSwitch": "s0", "spine": "sp0"}, str(by_name["h1"]))
    check(by_name["h2"]["topology"] == {"leafSwitch": "s1", "spine": "sp0"}, str(by_name["h2"]))

    # Two replicas of 2 CPUs + 2 GPUs each cannot share a 4-CPU, 2-GPU host.
    gang = {"command": ["sh", "-c", "echo replica $KOI_REPLICA of $KOI_NUM_REPLICAS on $KOI_NODE "
                        "slurm $SLURM_JOB_ID task $SLURM_PROCID addr $(hostname -I) in $(pwd) msg $MSG"],
            "env": {"MSG": "it's here"}, "replicas": 2, "resources": {"cpu": 2, "memoryMiB": 512, "gpu": 2}}
    cp.koi(A, "job", "submit", "-f", write(cp.root, "gang.json", manifest("gang", gang)))
    j = cp.wait_phase(A, "gang", ["Succeeded", "Failed"])
    check(j["status"]["phase"] == "Succeeded", j["status"]["message"])
    logs = [cp.koi(A, "job", "logs", "gang", "--replica", str(r)).stdout for r in (0, 1)]
    words = [l.split() for l in logs]
    check(all(len(w) >= 14 for w in words), "logs %s" % logs)
    check(words[0][1] == "0" and words[1][1] == "1", "replica numbers %s" % logs)
    check(words[0][5] != words[1][5], "both replicas ran on one node: %s" % logs)
    check(words[0][7] == words[1][7], "two Slurm jobs for one gang: %s" % logs)
    check(words[0][11] != words[1][11], "one network namespace for both: %s" % logs)
    check(words[0][13].endswith("/gang/1/0") and words[1][13].endswith("/gang/1/1"), "directories %s" % logs)
    check(logs[0].strip().endswith("msg it's here"), "env %s" % logs[0])
    started = [e["message"] for e in cp.koi_json(A, "job", "events", "gang")["items"] if e["reason"] == "Started"]
    check(started and "slurm executor" in started[0], str(started))

    # Measured usage from the same scontrol answer: slurmd's CPULoad, nothing it does not report.
    code, body = cp.http("GET", "/apis/v1/nodes", A)
    check(code == 200, "GET nodes: %d %s" % (code, body))
    for n in json.loads(body)["items"]:
        u = n["status"].get("usage") or {}
        check(u.get("source") == "scontrol" and u.get("loadAverage", -1) >= 0 and "cpuUtilization" not in u
              and "memoryUsedBytes" not in u and u["gpus"] == [] and len(u["history"]) >= 1,
              "node %s: usage %s" % (n["metadata"]["name"], u))

    fail = {"command": ["sh", "-c", "exit $((3 + KOI_REPLICA))"], "replicas": 2, "resources": {"cpu": 1},
            "restartPolicy": {"maxRestarts": 0}}
    cp.koi(A, "job", "submit", "-f", write(cp.root, "fail.json", manifest("fail", fail)))
    j = cp.wait_phase(A, "fail", ["Succeeded", "Failed"])
    check(j["status"]["phase"] == "Failed" and j["status"].get("lastExitCode") in (3, 4), json.dumps(j["status"]))

    half = {"command": ["true"], "resources": {"cpu": 0.5}}
    cp.koi(A, "job", "submit", "-f", write(cp.root, "half.json", manifest("half", half)))
    j = cp.wait_phase(A, "half", ["Restarting"])
    check(j["status"]["reason"] == "LaunchFailed" and
          "resources.cpu 0.5: Slurm allocates whole CPUs" in j["status"]["message"], str(j["status"]))
    cp.koi(A, "job", "cancel", "half")
    cp.wait_phase(A, "half", ["Cancelled"])

    bad = write(cp.root, "bad.yaml", "executor: {type: slurm, partitio: koi}\nqueues:\n  - {name: q, tenant: t}\n"
                "tenants:\n  - {name: t, token: t-token-1}\n")
    r = subprocess.run([KOI, "cluster", "serve", "--config", bad, "--store", "sqlite:" + cp.root + "/bad.db",
                        "--port", "0", "--work-dir", cp.root + "/badwork"], capture_output=True, text=True, timeout=30)
    check(r.returncode != 0 and "executor.partitio" in r.stderr, "bad key: %s" % r.stderr)


if __name__ == "__main__":
    run_slurm_test(run)
