"""koi cluster: a job whose process is stopped with SIGSTOP makes no progress (its log stops
growing); after hangTimeoutSeconds the control plane diagnoses it Hung (a condition and a
Warning event naming the stopped process by pid and command, or by MPI rank), stops it (SIGTERM
with SIGCONT, then SIGKILL after the grace period) and restarts it, spending one restart of
its budget."""
import os
import signal
import time

from cluster_harness import check, manifest, write, run_test, one_tenant_config

CONFIG = one_tenant_config(gpus=0)
A = "alpha-token"


def run(cp):
    script = ('if [ "$KOI_ATTEMPT" -gt 1 ]; then echo second attempt; exit 0; fi; '
              'echo $$ > ticker.pid; while true; do echo tick; sleep 0.1; done')
    spec = {"command": ["sh", "-c", script], "hangTimeoutSeconds": 2, "terminationGracePeriodSeconds": 1,
            "restartPolicy": {"maxRestarts": 1, "backoffSeconds": 0}}
    cp.koi(A, "job", "submit", "-f", write(cp.root, "hang.json", manifest("ticker", spec)))
    cp.wait_phase(A, "ticker", ["Running"])
    pid_file = os.path.join(cp.work, "alpha", "ticker", "1", "0", "ticker.pid")
    end = time.time() + 20
    while time.time() < end and not os.path.exists(pid_file):
        time.sleep(0.05)
    time.sleep(0.3)
    pid = int(open(pid_file).read())
    os.kill(pid, signal.SIGSTOP)
    j = cp.wait_phase(A, "ticker", ["Succeeded", "Failed"])
    check(j["status"]["phase"] == "Succeeded", j["status"]["message"])
    check(j["status"]["restarts"] == 1 and j["status"]["attempts"] == 2, str(j["status"]))
    events = cp.koi_json(A, "job", "events", "ticker")["items"]
    stopping = [e["message"] for e in events if e["reason"] == "Stopping"]
    check(len(stopping) == 1 and "Hung: no progress (log or metrics.jsonl) for hangTimeoutSeconds 2" in stopping[0],
          str(stopping))
    check(f"pid {pid} (sh) is stopped (SIGSTOP or SIGTSTP)" in stopping[0], "the stopped process is named: " + stopping[0])
    hung = [e for e in events if e["reason"] == "Hung"]
    check(len(hung) == 1 and hung[0]["type"] == "Warning" and f"pid {pid} (sh) is stopped" in hung[0]["message"],
          str(hung))
    conds = [c for c in j["status"]["conditions"] if c["type"] == "Hung"]
    check(len(conds) == 1 and conds[0]["message"] == hung[0]["message"], "a Hung condition: " + str(conds))
    check(any(e["reason"] == "BackoffRestart" and "restart 1 of 1" in e["message"] for e in events), str(events))
    check(cp.koi(A, "job", "logs", "ticker").stdout == "second attempt\n", "attempt 2 log")


if __name__ == "__main__":
    run_test(CONFIG, run)
