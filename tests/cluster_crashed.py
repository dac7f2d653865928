"""koi cluster: a command that segfaults is diagnosed Crashed. The job's status carries a
Crashed condition and there is one Crashed Warning event, both naming the replica, the signal
(SIGSEGV) and the last lines of its log (what it wrote to stderr just before); the final
message names the signal too. A job killed from outside (SIGKILL) is no crash."""
import os
import signal
import time

from cluster_harness import check, manifest, write, run_test, one_tenant_config

CONFIG = one_tenant_config(gpus=0)
A = "alpha-token"

SEGFAULT = ("import ctypes, sys; print('loading shard 7', flush=True); "
            "print('about to touch address 0', file=sys.stderr, flush=True); ctypes.string_at(0)")


def condition(job, kind):
    return [c for c in job["status"].get("conditions", []) if c["type"] == kind]


def run(cp):
    spec = {"command": ["python3", "-c", SEGFAULT], "restartPolicy": {"maxRestarts": 0}}
    cp.koi(A, "job", "submit", "-f", write(cp.root, "segv.json", manifest("segv", spec)))
    killed = {"command": ["sh", "-c", "echo $$ > me.pid; sleep 30"], "restartPolicy": {"maxRestarts": 0}}
    cp.koi(A, "job", "submit", "-f", write(cp.root, "killed.json", manifest("killed", killed)))

    j = cp.wait_phase(A, "segv", ["Succeeded", "Failed"])
    check(j["status"]["phase"] == "Failed", str(j["status"]))
    check(j["status"]["lastSignal"] == signal.SIGSEGV, str(j["status"]))
    check("SIGSEGV" in j["status"]["message"], "the final message names the signal: " + j["status"]["message"])
    crashed = condition(j, "Crashed")
    check(len(crashed) == 1 and crashed[0]["status"] == "True" and crashed[0]["reason"] == "Crashed",
          "a Crashed condition: " + str(j["status"].get("conditions")))
    message = crashed[0]["message"]
    for want in ("replica 0 crashed with SIGSEGV", "Segmentation fault", "about to touch address 0", "loading shard 7"):
        check(want in message, f"the Crashed condition says {want!r}: {message}")
    events = cp.koi_json(A, "job", "events", "segv")["items"]
    ev = [e for e in events if e["reason"] == "Crashed"]
    check(len(ev) == 1 and ev[0]["type"] == "Warning" and ev[0]["message"] == message, str(events))
    described = cp.koi(A, "job", "describe", "segv").stdout
    check("Crashed" in described and "SIGSEGV" in described, "koi job describe shows it:\n" + described)
    print("ok: Crashed:", message.replace("\n", " | "))

    pid_file = os.path.join(cp.work, "alpha", "killed", "1", "0", "me.pid")
    end = time.time() + 20
    while time.time() < end and not os.path.exists(pid_file):
        time.sleep(0.05)
    time.sleep(0.2)
    os.kill(int(open(pid_file).read()), signal.SIGKILL)
    k = cp.wait_phase(A, "killed", ["Succeeded", "Failed"])
    check(k["status"]["phase"] == "Failed" and "SIGKILL" in k["status"]["message"], str(k["status"]))
    check(not condition(k, "Crashed"), "a SIGKILL from outside is no crash: " + str(k["status"].get("conditions")))


if __name__ == "__main__":
    run_test(CONFIG, run)
