"""koi cluster: a job whose process is stopped with SIGSTOP makes no progress (its log stops
growing); after hangTimeoutSeconds the control plane stops it (SIGTERM with SIGCONT, then
SIGKILL after the grace period) and restarts it, spending one restart of its budget."""
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
    os.kill(int(open(pid_file).read()), signal.SIGSTOP)
    j = cp.wait_phase(A, "ticker", ["Succeeded", "Failed"])
    check(j["status"]["phase"] == "Succeeded", j["status"]["message"])
    check(j["status"]["restarts"] == 1 and j["status"]["attempts"] == 2, str(j["status"]))
    events = cp.koi_json(A, "job", "events", "ticker")["items"]
    stopping = [e["message"] for e in events if e["reason"] == "Stopping"]
    check(len(stopping) == 1 and "Hung: no progress (log or metrics.jsonl) for hangTimeoutSeconds 2" in stopping[0],
          str(stopping))
    check(any(e["reason"] == "BackoffRestart" and "restart 1 of 1" in e["message"] for e in events), str(events))
    check(cp.koi(A, "job", "logs", "ticker").stdout == "second attempt\n", "attempt 2 log")


if __name__ == "__main__":
    run_test(CONFIG, run)
