"""koi cluster on Slurm, training (issue 15, Must show 1 and 5).
1. A 2-replica data-parallel `koi train` job runs as one Slurm allocation with a rank on each
   of two hosts (srun --mpi=pmix: the replicas are one MPI world) and follows the
   single-process loss curve within 1e-5 per step (the trainer's MPI test, through Slurm).
2. The same job YAML, unchanged, runs on the local executor and on Slurm, and both end with
   bitwise the same weights."""
import json
import os

from cluster_harness import (ControlPlane, baseline_run, check, last_step, one_tenant_config, run_slurm_test,
                             same_weights, tiny_recipe, write)

A = "alpha-token"
STEPS = 60


def losses(run_dir):
    out = {}
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            m = json.loads(line)
            if "loss" in m:
                out[m["step"]] = m
    return out


def job_yaml(name, recipe, ckpt, replicas, cpu):
    return """apiVersion: koi/v1
kind: Job
metadata: {name: %s}
spec:
  kind: train
  recipe: %s
  args: [--threads, "1"]
  checkpointDir: %s
  replicas: %d
  resources: {cpu: %g, memoryMiB: 512}
  restartPolicy: {maxRestarts: 0}
""" % (name, recipe, ckpt, replicas, cpu)


def run(cp, slurm):
    recipe = tiny_recipe(cp.root, STEPS, interval=20)
    one = os.path.join(cp.root, "one")
    baseline_run(recipe, one)

    # 1. Two ranks, 3 CPUs each: no 4-CPU host holds both.
    dp = os.path.join(cp.root, "dp")
    cp.koi(A, "job", "submit", "-f", write(cp.root, "dp.yaml", job_yaml("dp", recipe, dp, 2, 3)))
    j = cp.wait_phase(A, "dp", ["Succeeded", "Failed"], deadline_s=90)
    check(j["status"]["phase"] == "Succeeded", j["status"]["message"] + j["status"].get("logTail", ""))
    admitted = [e["message"] for e in cp.koi_json(A, "job", "events", "dp")["items"] if e["reason"] == "Admitted"]
    hosts = admitted[0].split("placed on ")[1].split(", ")
    check(len(hosts) == 2 and hosts[0] != hosts[1], "the ranks were not placed on two hosts: %s" % admitted)
    started = [e["message"] for e in cp.koi_json(A, "job", "events", "dp")["items"] if e["reason"] == "Started"][0]
    ids = started.rsplit("(", 1)[1].split(")")[0].split(", ")  # "... started by the slurm executor (7.0, 7.1)"
    check(len(ids) == 2 and ids[0].split(".")[0] == ids[1].split(".")[0] and ids[0] != ids[1],
          "not one Slurm allocation with two tasks: %s" % started)
    for r in (0, 1):
        log = cp.koi(A, "job", "logs", "dp", "--replica", str(r)).stdout
        check(log.strip() == "" or "rank" in log or "steps" in log, "replica %d log: %s" % (r, log[-300:]))
    a, b = losses(one), losses(dp)
    check(sorted(a) == sorted(b) and len(a) == STEPS, "steps %d vs %d" % (len(a), len(b)))
    worst = max(abs(a[s]["loss"] - b[s]["loss"]) for s in a)
    print("2 ranks through Slurm vs 1 process: max |loss diff| %.2e over %d steps" % (worst, len(a)))
    check(worst <= 1e-5, "loss curves differ by %g" % worst)
    check(len(b[STEPS].get("rank_ms", [])) == 2, "the run was not 2 MPI ranks: %s" % b[STEPS])

    # 2. One YAML, two executors.
    text_local = job_yaml("same", recipe, os.path.join(cp.root, "same-local"), 1, 1)
    text_slurm = job_yaml("same", recipe, os.path.join(cp.root, "same-slurm"), 1, 1)
    check(text_local.replace("same-local", "X") == text_slurm.replace("same-slurm", "X"), "the YAMLs differ")
    local = ControlPlane(one_tenant_config(gpus=0)).start()
    try:
        local.koi(A, "job", "submit", "-f", write(local.root, "same.yaml", text_local))
        cp.koi(A, "job", "submit", "-f", write(cp.root, "same.yaml", text_slurm))
        for plane in (local, cp):
            j = plane.wait_phase(A, "same", ["Succeeded", "Failed"], deadline_s=90)
            check(j["status"]["phase"] == "Succeeded", j["status"]["message"])
        started = {}
        for name, plane in (("local", local), ("slurm", cp)):
            started[name] = [e["message"] for e in plane.koi_json(A, "job", "events", "same")["items"]
                             if e["reason"] == "Started"][0]
        check("local executor" in started["local"] and "slurm executor" in started["slurm"], str(started))
        same_weights(os.path.join(cp.root, "same-local"), os.path.join(cp.root, "same-slurm"), STEPS)
        same_weights(one, os.path.join(cp.root, "same-slurm"), STEPS)
    finally:
        local.cleanup()


if __name__ == "__main__":
    run_slurm_test(run)
