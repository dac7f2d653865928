"""koi cluster: a `koi train` job whose trainer is killed with SIGKILL mid-run is restarted
by the control plane with --resume, continues from its newest complete checkpoint, and
ends with weights and optimizer state bitwise identical to an uninterrupted run."""
import os
import signal
import time

from cluster_harness import (baseline_run, check, last_step, manifest, one_tenant_config, run_test,
                             same_weights, tiny_recipe, write)

CONFIG = one_tenant_config()
A = "alpha-token"
STEPS = 12000


def run(cp):
    recipe = tiny_recipe(cp.root, STEPS)
    ckpt = os.path.join(cp.root, "ckpt")
    spec = {"kind": "train", "recipe": recipe, "args": ["--threads", "1"], "checkpointDir": ckpt,
            "resources": {"gpu": 1, "cpu": 1}, "restartPolicy": {"maxRestarts": 2, "backoffSeconds": 0.2}}
    cp.koi(A, "job", "submit", "-f", write(cp.root, "train.json", manifest("tiny", spec)))
    j = cp.wait_phase(A, "tiny", ["Running"])
    end = time.time() + 40
    while time.time() < end and last_step(ckpt) < 2000:
        time.sleep(0.01)
    step = last_step(ckpt)
    check(2000 <= step < STEPS, "the job is at step %d, not mid-run" % step)
    wrapper = int(j["status"]["replicas"][0]["id"].split(":")[0])
    with open("/proc/%d/task/%d/children" % (wrapper, wrapper)) as f:
        trainer = int(f.read().split()[0])
    os.kill(trainer, signal.SIGKILL)
    baseline = os.path.join(cp.root, "baseline")
    baseline_run(recipe, baseline)  # while the job resumes

    j = cp.wait_phase(A, "tiny", ["Succeeded", "Failed"], deadline_s=60)
    st = j["status"]
    check(st["phase"] == "Succeeded", st["message"])
    check(st["attempts"] == 2 and st["restarts"] == 1, "attempts %d restarts %d" % (st["attempts"], st["restarts"]))
    events = cp.koi_json(A, "job", "events", "tiny")["items"]
    messages = [e["message"] for e in events]
    check(any("killed by signal 9" in m and "restart 1 of 2" in m for m in messages), str(messages))
    check(any("resuming from the newest checkpoint" in m for m in messages), str(messages))
    log2 = cp.koi(A, "job", "logs", "tiny", "--attempt", "2").stdout
    check("resuming from %s/ckpt-" % ckpt in log2, "attempt 2 did not resume: " + log2[:300])
    same_weights(baseline, ckpt, STEPS)


if __name__ == "__main__":
    run_test(CONFIG, run)
