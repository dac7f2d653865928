"""koi cluster on Slurm, node loss (issue 15, Must show 3): while a 2-rank `koi train` job
runs, one of its hosts loses its slurmd and every process on it (SIGKILL, as a crashed
machine). Slurm marks the node down, the control plane shows it unschedulable, the job is
requeued from its newest checkpoint on the remaining hosts, and it finishes with weights and
optimizer state bitwise identical to an uninterrupted 2-rank run."""
import os
import subprocess
import time

from cluster_harness import KOI, check, fail, last_step, manifest, run_slurm_test, same_weights, tiny_recipe, write

A = "alpha-token"
STEPS = 2000


def mpirun_baseline(recipe, out):
    cmd = ["mpirun", "--oversubscribe", "--bind-to", "none"] + (["--allow-run-as-root"] if os.getuid() == 0 else [])
    r = subprocess.run(cmd + ["-np", "2", KOI, "train", "--config", recipe, "--out", out, "--threads", "1"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        fail("the uninterrupted 2-rank run failed: " + r.stderr[-500:])


def placed_hosts(cp, name):
    return [e["message"].split("placed on ")[1].split(", ") for e in cp.koi_json(A, "job", "events", name)["items"]
            if e["reason"] == "Admitted"]


def run(cp, slurm):
    recipe = tiny_recipe(cp.root, STEPS, interval=100)
    ckpt = os.path.join(cp.root, "ckpt")
    spec = {"kind": "train", "recipe": recipe, "args": ["--threads", "1"], "checkpointDir": ckpt, "replicas": 2,
            "resources": {"cpu": 3, "memoryMiB": 512}, "restartPolicy": {"maxRestarts": 3, "backoffSeconds": 1}}
    cp.koi(A, "job", "submit", "-f", write(cp.root, "dp.json", manifest("dp", spec)))
    cp.wait_phase(A, "dp", ["Running"])
    end = time.time() + 60
    while time.time() < end and last_step(ckpt) < 300:
        time.sleep(0.05)
    check(300 <= last_step(ckpt) < STEPS, "the job is not mid-run (step %d)" % last_step(ckpt))
    first = placed_hosts(cp, "dp")[0]
    victim = first[1]  # rank 1's host; rank 0's also runs the batch script
    print("losing %s at step %d (job on %s)" % (victim, last_step(ckpt), ", ".join(first)), flush=True)
    slurm.stop_host(victim)

    end, seen_down = time.time() + 60, False
    while time.time() < end and not seen_down:
        nodes = {n["metadata"]["name"]: n["spec"] for n in cp.koi_json(A, "node", "list")["items"]}
        seen_down = "down" in nodes[victim].get("unschedulable", "")
        time.sleep(0.2)
    check(seen_down, "the control plane never saw %s down: %s" % (victim, nodes[victim]))

    j = cp.wait_phase(A, "dp", ["Succeeded", "Failed"], deadline_s=120)
    st = j["status"]
    check(st["phase"] == "Succeeded", st["message"] + st.get("logTail", ""))
    hosts = placed_hosts(cp, "dp")
    check(len(hosts) >= 2 and victim not in hosts[-1], "the restart went to the lost host: %s" % hosts)
    events = [(e["reason"], e["message"]) for e in cp.koi_json(A, "job", "events", "dp")["items"]]
    print("attempts %d restarts %d infraRestarts %d; events: %s" % (
        st["attempts"], st["restarts"], st["infraRestarts"], [r for r, _ in events]))
    resumed = cp.koi(A, "job", "logs", "dp", "--attempt", str(st["attempts"])).stdout
    check("resuming from %s/ckpt-" % ckpt in resumed, "the last attempt did not resume: " + resumed[:300])
    baseline = os.path.join(cp.root, "baseline")
    mpirun_baseline(recipe, baseline)
    same_weights(baseline, ckpt, STEPS)


if __name__ == "__main__":
    run_slurm_test(run)
