"""koi cluster on Slurm, preemption (issue 15, Must show 4): a high-priority job that needs
every GPU of the 3 hosts preempts a low-priority 2-rank `koi train` job. Koi's preemption
reaches the trainer through Slurm (scancel --signal=TERM to the job's steps); it writes a
checkpoint in its grace time and exits; the job is Preempted (budget untouched), the
high-priority job runs, then the training job resumes from the checkpoint and ends bitwise
identical to an uninterrupted 2-rank run."""
import os
import time

from cluster_harness import check, last_step, manifest, run_slurm_test, same_weights, slurm_config, tiny_recipe, write
from cluster_slurm_node_loss import mpirun_baseline

A, B = "alpha-token", "beta-token"
STEPS = 1200


def run(cp, slurm):
    recipe = tiny_recipe(cp.root, STEPS, interval=400)
    ckpt = os.path.join(cp.root, "ckpt")
    low = {"kind": "train", "recipe": recipe, "args": ["--threads", "1"], "checkpointDir": ckpt, "priority": 0,
           "replicas": 2, "preemptible": True, "resources": {"gpu": 2, "cpu": 1, "memoryMiB": 512},
           "terminationGracePeriodSeconds": 30, "restartPolicy": {"maxRestarts": 0}}
    cp.koi(B, "job", "submit", "-f", write(cp.root, "low.json", manifest("low", low)))
    cp.wait_phase(B, "low", ["Running"])
    end = time.time() + 60
    while time.time() < end and last_step(ckpt) < 300:
        time.sleep(0.02)
    check(300 <= last_step(ckpt) < STEPS, "the training job is not mid-run (step %d)" % last_step(ckpt))

    high = {"command": ["sh", "-c", "echo high $KOI_REPLICA"], "priority": 10, "replicas": 3,
            "resources": {"gpu": 2, "cpu": 1, "memoryMiB": 256}}
    cp.koi(A, "job", "submit", "-f", write(cp.root, "high.json", manifest("high", high)))
    h = cp.wait_phase(A, "high", ["Succeeded", "Failed"], deadline_s=60)
    check(h["status"]["phase"] == "Succeeded", h["status"]["message"])
    j = cp.wait_phase(B, "low", ["Succeeded", "Failed"], deadline_s=120)
    st = j["status"]
    check(st["phase"] == "Succeeded", st["message"] + st.get("logTail", ""))
    check(st["restarts"] == 0 and st["infraRestarts"] == 1 and st["attempts"] == 2,
          "restarts %d infra %d attempts %d" % (st["restarts"], st["infraRestarts"], st["attempts"]))
    check(st.get("preemptedBy") == "alpha/high", "preemptedBy %s" % st.get("preemptedBy"))
    reasons = [e["reason"] for e in cp.koi_json(B, "job", "events", "low")["items"]]
    check(reasons[:5] == ["Submitted", "Admitted", "Started", "Stopping", "Preempted"] and reasons[-1] == "Completed",
          str(reasons))
    check("Killed" not in reasons, "the trainer needed SIGKILL: %s" % reasons)
    log1 = cp.koi(B, "job", "logs", "low", "--attempt", "1").stdout
    check("continue with --resume" in log1, "the trainer did not checkpoint on SIGTERM: " + log1[-300:])
    log2 = cp.koi(B, "job", "logs", "low", "--attempt", "2").stdout
    check("resuming from %s/ckpt-" % ckpt in log2, "attempt 2 did not resume: " + log2[:300])
    baseline = os.path.join(cp.root, "baseline")
    mpirun_baseline(recipe, baseline)
    same_weights(baseline, ckpt, STEPS)


if __name__ == "__main__":
    run_slurm_test(run, config=slurm_config(tenants=("alpha", "beta")))
