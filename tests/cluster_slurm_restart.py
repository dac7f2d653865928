"""koi cluster on Slurm, control-plane restart and transient Slurm failures (issue 15, Must
show 6). First slurmctld is frozen (SIGSTOP) for longer than the command timeout: squeue
times out, is retried, and no job is counted as failed. Then the control plane is killed -9
while a 2-rank `koi train` job and two short jobs run on Slurm, and stays down until Slurm has finished the short jobs and forgotten them
(MinJobAge 2). The restarted control plane re-adopts the training job (same attempt, same
Slurm job), takes the short jobs' ends from their exit records and, for a replica that left
none, from Slurm's job-completion log; it loses no job. The training job ends bitwise identical to an uninterrupted 2-rank run."""
import os
import signal
import subprocess
import time

from cluster_harness import check, last_step, manifest, run_slurm_test, same_weights, tiny_recipe, write
from cluster_slurm_node_loss import mpirun_baseline

A = "alpha-token"
STEPS = 6000


def slurm_job_ids(slurm):
    out = subprocess.run(["squeue", "-h", "--states=all", "-o", "%i"], env=slurm.env, capture_output=True, text=True)
    return set(out.stdout.split())


def run(cp, slurm):
    recipe = tiny_recipe(cp.root, STEPS, interval=100)
    ckpt = os.path.join(cp.root, "ckpt")
    train = {"kind": "train", "recipe": recipe, "args": ["--threads", "1"], "checkpointDir": ckpt, "replicas": 2,
             "resources": {"cpu": 1, "memoryMiB": 512}, "restartPolicy": {"maxRestarts": 0}}
    done = {"command": ["sh", "-c", "sleep 10; exit 5"], "resources": {"cpu": 1}, "restartPolicy": {"maxRestarts": 0}}
    # Attempt 1 kills its own wrapper (`koi cluster exec`), so it leaves no exit record.
    orphan = {"command": ["sh", "-c", 'if [ "$KOI_ATTEMPT" = 1 ]; then sleep 10; kill -9 $PPID; sleep 1; fi; exit 0'],
              "resources": {"cpu": 1}}
    for name, spec in (("train", train), ("done", done), ("orphan", orphan)):
        cp.koi(A, "job", "submit", "-f", write(cp.root, name + ".json", manifest(name, spec)))
    for name in ("train", "done", "orphan"):
        cp.wait_phase(A, name, ["Running"])
    # slurmctld frozen past the command timeout (3 s in the test config, 3 tries).
    ctld = slurm.procs["slurmctld"]
    os.kill(ctld.pid, signal.SIGSTOP)
    time.sleep(8)
    os.kill(ctld.pid, signal.SIGCONT)
    with open(os.path.join(cp.root, "serve-1.log")) as f:
        check("squeue timed out" in f.read(), "squeue never timed out while slurmctld was frozen")
    for name in ("train", "done", "orphan"):
        check(cp.job(A, name)["status"]["phase"] == "Running", "%s is not running after the freeze" % name)
    ids = {name: cp.job(A, name)["status"]["replicas"][0]["id"].split(".")[0] for name in ("train", "done", "orphan")}
    cp.kill9()
    end = time.time() + 60
    while time.time() < end and slurm_job_ids(slurm) & {ids["done"], ids["orphan"]}:
        time.sleep(0.5)
    check(not slurm_job_ids(slurm) & {ids["done"], ids["orphan"]}, "Slurm still remembers the short jobs")
    step_at_restart = last_step(ckpt)
    check(step_at_restart < STEPS, "the training job ended while the control plane was down")
    cp.start()

    j = cp.wait_phase(A, "done", ["Failed", "Succeeded"])
    check(j["status"]["phase"] == "Failed" and j["status"].get("lastExitCode") == 5, str(j["status"]))
    j = cp.wait_phase(A, "orphan", ["Failed", "Succeeded"])
    check(j["status"]["phase"] == "Succeeded" and j["status"]["attempts"] == 2, str(j["status"]))
    lost = [e["message"] for e in cp.koi_json(A, "job", "events", "orphan")["items"] if e["reason"] == "ReplicaLost"]
    check(lost and "Slurm job %s ended FAILED" % ids["orphan"] in lost[0], "not from the completion log: %s" % lost)
    events = cp.koi_json(A, "job", "events", "train")["items"]
    adopted = [e["message"] for e in events if e["reason"] == "Adopted"]
    check(adopted and "2 replica(s) still running adopted" in adopted[0], str(adopted))

    j = cp.wait_phase(A, "train", ["Succeeded", "Failed"], deadline_s=120)
    st = j["status"]
    check(st["phase"] == "Succeeded", st["message"] + st.get("logTail", ""))
    check(st["attempts"] == 1 and st["restarts"] == 0 and st["infraRestarts"] == 0,
          "attempts %d restarts %d infra %d" % (st["attempts"], st["restarts"], st["infraRestarts"]))
    baseline = os.path.join(cp.root, "baseline")
    mpirun_baseline(recipe, baseline)
    same_weights(baseline, ckpt, STEPS)


if __name__ == "__main__":
    run_slurm_test(run, min_job_age=2)
