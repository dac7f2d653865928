"""koi cluster: a `koi train` job with 2 replicas is one MPI job of 2 ranks (the executor
launches the gang as one mpirun), not two copies of the same training: both replica
records name one launch, the trainer logs a step time per rank, and the loss curve follows
a single-process run of the same recipe (same global batch) within 1e-5 per step."""
import json
import os

from cluster_harness import KOI, baseline_run, check, manifest, one_tenant_config, run_test, tiny_recipe, write

CONFIG = one_tenant_config()
A = "alpha-token"
STEPS = 40


def losses(run_dir):
    out = {}
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            m = json.loads(line)
            if "loss" in m and "step" in m:
                out[m["step"]] = m
    return out


def run(cp):
    recipe = tiny_recipe(cp.root, STEPS)
    ckpt = os.path.join(cp.root, "ckpt")
    spec = {"kind": "train", "recipe": recipe, "args": ["--threads", "1"], "checkpointDir": ckpt, "replicas": 2,
            "resources": {"gpu": 1, "cpu": 1}, "restartPolicy": {"maxRestarts": 0}}
    cp.koi(A, "job", "submit", "-f", write(cp.root, "train.json", manifest("dp", spec)))
    j = cp.wait_phase(A, "dp", ["Running", "Succeeded", "Failed"])
    reps = j["status"]["replicas"]
    check(len(reps) == 2 and reps[0]["id"] == reps[1]["id"], "one launch for the gang: " + str(reps))
    check(sorted(reps[0]["gpus"] + reps[1]["gpus"]) == sorted(set(reps[0]["gpus"] + reps[1]["gpus"])),
          "each replica has its own GPU: " + str(reps))
    j = cp.wait_phase(A, "dp", ["Succeeded", "Failed"], deadline_s=90)
    check(j["status"]["phase"] == "Succeeded", j["status"]["message"] + "\n" + j["status"].get("logTail", ""))
    baseline = os.path.join(cp.root, "baseline")
    baseline_run(recipe, baseline)
    two, one = losses(ckpt), losses(baseline)
    check(set(two) == set(one) and len(one) >= STEPS // 2, "steps logged: %s vs %s" % (sorted(two), sorted(one)))
    worst = max(abs(two[s]["loss"] - one[s]["loss"]) for s in one)
    check(worst <= 1e-5, "max |loss diff| %.3g between 2 ranks and 1 process" % worst)
    check(all(len(two[s].get("rank_ms", [])) == 2 for s in two), "every step has 2 ranks' times")
    print("2 ranks vs 1 process: max |loss diff| %.2e over %d steps" % (worst, len(one)))


if __name__ == "__main__":
    run_test(CONFIG, run)
