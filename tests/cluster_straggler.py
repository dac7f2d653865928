"""koi cluster: a 2-rank koi train job whose rank 1 is slowed (SIGSTOP/SIGCONT, 100 ms of
every 102) is diagnosed from its metrics.jsonl: a Straggler condition and Warning event name
rank 1 and its slowdown against the ranks' median, and a SlowProgress one compares the job's
recent step time with its own history. Left alone, rank 1 catches up and both conditions clear
(False, Recovered, StragglerRecovered and SlowProgressRecovered events). Then rank 1 is stopped for good: the trainer's collective
watchdog (--collective-timeout 3, within the job's hangTimeoutSeconds 8) ends the job, and the
Hung diagnosis quotes its report, naming the collective and the silent rank 1; the job fails
(about 25 s in all). (tests/cluster_hang.py covers a hang the control plane times out itself.)"""
import json
import os
import re
import signal
import threading
import time

from cluster_harness import check, fail, manifest, one_tenant_config, run_test, tiny_recipe, write

CONFIG = one_tenant_config()
A = "alpha-token"


def rank_pid(ckpt, rank):
    """The koi train process of MPI rank `rank` writing to `ckpt`, or None."""
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            cmd = open(f"/proc/{name}/cmdline", "rb").read().split(b"\0")
            env = open(f"/proc/{name}/environ", "rb").read().split(b"\0")
        except OSError:
            continue
        if b"train" in cmd and ckpt.encode() in cmd and f"OMPI_COMM_WORLD_RANK={rank}".encode() in env:
            return int(name)
    return None


def last_step(ckpt):
    try:
        lines = open(os.path.join(ckpt, "metrics.jsonl")).read().splitlines()
    except OSError:
        return 0
    steps = [json.loads(l)["step"] for l in lines if l.startswith("{\"step\"")]
    return max(steps) if steps else 0


def diagnosis(cp, kind):
    j = cp.job(A, "dp")
    return [c for c in j["status"].get("conditions", []) if c["type"] == kind]


def run(cp):
    recipe = tiny_recipe(cp.root, 1000000)  # cancelled once diagnosed
    # Steps long enough (~10 ms) that each of rank 1's steps spans a stop (as train_mpi_straggler.sh),
    # and 30 of them before the slowing: the history SlowProgress compares with.
    text = open(recipe).read().replace("model: {dim: 32, layers: 2, heads: 4, kv_heads: 2, ffn_dim: 64, context: 16}",
                                       "model: {dim: 128, layers: 4, heads: 4, ffn_dim: 352, context: 64}")
    open(recipe, "w").write(text)
    ckpt = os.path.join(cp.root, "ckpt")
    spec = {"kind": "train", "recipe": recipe, "args": ["--threads", "1", "--collective-timeout", "3"], "checkpointDir": ckpt, "replicas": 2,
            "resources": {"gpu": 1, "cpu": 1}, "restartPolicy": {"maxRestarts": 0},
            "hangTimeoutSeconds": 8, "terminationGracePeriodSeconds": 2}
    cp.koi(A, "job", "submit", "-f", write(cp.root, "train.json", manifest("dp", spec)))
    cp.wait_phase(A, "dp", ["Running"])
    end = time.time() + 60
    while last_step(ckpt) < 30 and time.time() < end:
        time.sleep(0.05)
    slow = rank_pid(ckpt, 1)
    check(slow is not None, "rank 1 found")
    seen, done = set(), threading.Event()

    def watch():  # beside the slowing loop, so that its CLI calls never pause it
        while not done.is_set():
            seen.update(k for k in ("Straggler", "SlowProgress") if diagnosis(cp, k))
            if len(seen) == 2:
                done.set()
            time.sleep(0.3)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        end = time.time() + 60
        while time.time() < end and not done.is_set():
            os.kill(slow, signal.SIGSTOP)
            time.sleep(0.1)
            os.kill(slow, signal.SIGCONT)
            time.sleep(0.002)
    finally:
        try:
            os.kill(slow, signal.SIGCONT)
        except ProcessLookupError:
            pass
        done.set()
        watcher.join()
    if len(seen) < 2:
        fail(f"diagnosed only {sorted(seen)} while rank 1 was slowed; events: "
             + str(cp.koi_json(A, "job", "events", "dp")["items"]))
    # The messages from the Warning events: the conditions may already have cleared.
    events = cp.koi_json(A, "job", "events", "dp")["items"]
    for kind in ("Straggler", "SlowProgress"):
        ev = [e for e in events if e["reason"] == kind]
        check(len(ev) >= 1 and ev[0]["type"] == "Warning", f"a {kind} Warning event: {ev}")
    straggler = [e for e in events if e["reason"] == "Straggler"][0]["message"]
    check(straggler.startswith("attempt 1: rank 1 is a straggler: ") and "x the median of the ranks" in straggler,
          straggler)
    slowdown = [e for e in events if e["reason"] == "SlowProgress"][0]["message"]
    check(slowdown.startswith("attempt 1: steps ") and "x the job's own" in slowdown, slowdown)
    print("ok:", straggler)
    print("ok:", slowdown)

    # Rank 1 runs freely again: both conditions clear (False, Recovered), each with a Normal event
    # carrying the condition's message. The events are what is checked: on a busy CI machine the
    # job's pace can dip again after it recovered, and the condition rightly fires once more.
    def recovered_events():
        items = cp.koi_json(A, "job", "events", "dp")["items"]
        return {k: [e for e in items if e["reason"] == k + "Recovered"] for k in ("Straggler", "SlowProgress")}

    end = time.time() + 30
    while time.time() < end and not all(recovered_events().values()):
        time.sleep(0.2)
    recovered = recovered_events()
    for kind, start in (("Straggler", "attempt 1: the ranks are even again"),
                        ("SlowProgress", "attempt 1: steps ")):
        ev = recovered[kind]
        check(len(ev) >= 1 and ev[0]["type"] == "Normal", "a %sRecovered event: %s" % (kind, ev))
        check(ev[0]["message"].startswith(start)
              and (kind != "SlowProgress" or "back to the usual pace" in ev[0]["message"]),
              "%s cleared: %s" % (kind, ev[0]))
        print("ok:", ev[0]["message"])

    # Rank 1 stopped for good: rank 0 waits in an allreduce until its watchdog gives up (3 s),
    # finds rank 1 silent in the roll call and ends the job; the Hung diagnosis quotes the report.
    os.kill(slow, signal.SIGSTOP)
    end = time.time() + 40
    while time.time() < end and not diagnosis(cp, "Hung"):
        time.sleep(0.2)
    hung = diagnosis(cp, "Hung")
    check(len(hung) == 1 and re.search(r"after the trainer's watchdog: rank 0 step \d+: collective 'allreduce [a-z ]+"
                                       r"( \d+)?' did not complete within 3 s; not responding: rank 1 ",
                                       hung[0]["message"]) is not None,
          "Hung quotes the watchdog's collective and silent rank: %s" % hung)
    print("ok:", hung[0]["message"])
    events = [e for e in cp.koi_json(A, "job", "events", "dp")["items"] if e["reason"] == "Hung"]
    check(len(events) == 1 and events[0]["type"] == "Warning" and events[0]["message"] == hung[0]["message"],
          "one Hung Warning event: %s" % events)
    j = cp.wait_phase(A, "dp", ["Succeeded", "Failed"], deadline_s=60)
    check(j["status"]["phase"] == "Failed" and "exited with status" in j["status"]["message"], str(j["status"]))


if __name__ == "__main__":
    run_test(CONFIG, run)
