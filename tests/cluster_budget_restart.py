"""koi cluster: a job that always fails restarts with backoff until its budget is spent and
ends Failed with its exit code and log tail in status; the budget lives on the job record,
so a kill -9 of the control plane in the middle neither resets nor spends it."""
import json
import time

from cluster_harness import check, manifest, write, run_test, one_tenant_config

CONFIG = one_tenant_config()
A = "alpha-token"


def run(cp):
    spec = {"command": ["sh", "-c", "echo attempt $KOI_ATTEMPT failing; exit 3"],
            "restartPolicy": {"maxRestarts": 3, "backoffSeconds": 1, "maxBackoffSeconds": 2}}
    cp.koi(A, "job", "submit", "-f", write(cp.root, "fail.json", manifest("always-fails", spec)))
    # Wait until the first restart has been spent, then kill the control plane.
    end = time.time() + 30
    while time.time() < end:
        j = cp.job(A, "always-fails")
        if j["status"]["restarts"] >= 1 and j["status"]["phase"] == "Restarting":
            break
        time.sleep(0.05)
    spent_before = j["status"]["restarts"]
    check(1 <= spent_before <= 3, "restarts before the crash: %d" % spent_before)
    events_before = cp.koi_json(A, "job", "events", "always-fails")["items"]
    cp.kill9()
    cp.start()
    j = cp.wait_phase(A, "always-fails", ["Failed"])
    st = j["status"]
    check(st["restarts"] == 3, "restarts %d: the budget was reset or overspent" % st["restarts"])
    check(st["attempts"] == 4, "attempts %d, expected 1 + maxRestarts" % st["attempts"])
    check(st["lastExitCode"] == 3, "lastExitCode %s" % st.get("lastExitCode"))
    check(st["reason"] == "RestartBudgetExhausted", st["reason"])
    check("attempt 4 failing" in st["logTail"], "log tail: %r" % st["logTail"])
    check("exited with status 3; restart budget spent (3 of maxRestarts 3)" in st["message"], st["message"])
    describe = cp.koi(A, "job", "describe", "always-fails").stdout
    check("Last exit:    code 3" in describe and "attempt 4 failing" in describe, describe)
    events = cp.koi_json(A, "job", "events", "always-fails")["items"]
    check(events[:len(events_before)] == events_before, "events before the crash changed or were lost")
    restarts = [e["message"] for e in events if e["reason"] == "BackoffRestart"]
    check(len(restarts) == 3 and all("restart %d of 3" % (i + 1) in m for i, m in enumerate(restarts)), str(restarts))
    # Backoff doubles and is capped: 1 s, then 2 s, 2 s.
    check([m.split(" in ")[-1] for m in restarts] == ["1s", "2s", "2s"], str(restarts))
    check(cp.koi(A, "job", "logs", "always-fails", "--attempt", "2").stdout == "attempt 2 failing\n", "attempt 2 log")
    metrics = cp.http("GET", "/metrics")[1]
    check('koi_cluster_jobs_finished_total{phase="Failed"} 1' in metrics, metrics)


if __name__ == "__main__":
    run_test(CONFIG, run)
