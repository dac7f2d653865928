"""koi cluster: a high-priority job preempts a low-priority `koi train` job holding all 4
GPUs. The trainer gets SIGTERM, writes a checkpoint and exits; the job is requeued as
Preempted (its restart budget untouched), the high-priority job runs, then the training job
resumes from that checkpoint and ends bitwise identical to an uninterrupted run."""
import os
import time

from cluster_harness import (baseline_run, check, last_step, manifest, run_test, same_weights, two_tenant_config,
                             tiny_recipe, write)

CONFIG = two_tenant_config()
A, B = "alpha-token", "beta-token"
STEPS = 12000


def run(cp):
    recipe = tiny_recipe(cp.root, STEPS)
    ckpt = os.path.join(cp.root, "ckpt")
    low = {"kind": "train", "recipe": recipe, "args": ["--threads", "1"], "checkpointDir": ckpt, "priority": 0,
           "preemptible": True, "resources": {"gpu": 4, "cpu": 1}, "terminationGracePeriodSeconds": 30,
           "restartPolicy": {"maxRestarts": 0}}
    cp.koi(B, "job", "submit", "-f", write(cp.root, "low.json", manifest("low", low)))
    cp.wait_phase(B, "low", ["Running"])
    end = time.time() + 40
    while time.time() < end and last_step(ckpt) < 2000:
        time.sleep(0.01)
    check(2000 <= last_step(ckpt) < STEPS, "the training job is not mid-run")

    high = {"command": ["sh", "-c", "echo high on $CUDA_VISIBLE_DEVICES"], "priority": 10, "resources": {"gpu": 2}}
    cp.koi(A, "job", "submit", "-f", write(cp.root, "high.json", manifest("high", high)))
    h = cp.wait_phase(A, "high", ["Succeeded"])
    j = cp.wait_phase(B, "low", ["Succeeded", "Failed"], deadline_s=60)
    st = j["status"]
    check(st["phase"] == "Succeeded", st["message"])
    check(st["restarts"] == 0 and st["infraRestarts"] == 1 and st["attempts"] == 2,
          "restarts %d infra %d attempts %d" % (st["restarts"], st["infraRestarts"], st["attempts"]))
    check(st.get("preemptedBy") == "alpha/high", "preemptedBy %s" % st.get("preemptedBy"))
    reasons = [e["reason"] for e in cp.koi_json(B, "job", "events", "low")["items"]]
    check(reasons == ["Submitted", "Admitted", "Started", "Stopping", "Preempted", "Waiting", "Admitted", "Started",
                      "Completed"] or reasons == ["Submitted", "Admitted", "Started", "Stopping", "Preempted", "Admitted",
                                                  "Started", "Completed"], str(reasons))
    log1 = cp.koi(B, "job", "logs", "low", "--attempt", "1").stdout
    check("continue with --resume" in log1, "the trainer did not checkpoint on SIGTERM: " + log1[-300:])
    log2 = cp.koi(B, "job", "logs", "low", "--attempt", "2").stdout
    check("resuming from %s/ckpt-" % ckpt in log2, "attempt 2 did not resume: " + log2[:300])
    high_reasons = [e["reason"] for e in cp.koi_json(A, "job", "events", "high")["items"]]
    check("Waiting" in high_reasons, "high never waited for its victim: %s" % high_reasons)
    metrics = cp.http("GET", "/metrics")[1]
    check('koi_cluster_preemptions_total{queue="beta-q"} 1' in metrics, "preemption metric")
    check('koi_cluster_restarts_total{cause="preempted"} 1' in metrics, "restart metric")
    baseline = os.path.join(cp.root, "baseline")
    baseline_run(recipe, baseline)
    same_weights(baseline, ckpt, STEPS)


if __name__ == "__main__":
    run_test(CONFIG, run)
