"""koi cluster: kill -9 of the control plane while 10 jobs run. After a restart over the same
store every job finishes exactly once (running replicas are adopted, not started again;
those that ended while it was down are judged by their exit records), and no event
recorded before the crash is lost or changed."""
import glob
import os
import time

from cluster_harness import check, manifest, write, run_test, one_tenant_config

CONFIG = one_tenant_config(cpu=32, memory_mib=65536)
A = "alpha-token"


def run(cp):
    names = []
    gate = os.path.join(cp.root, "gate")  # the jobs hold until the control plane is down
    for i in range(10):
        # Short ones end while the control plane is down; long ones outlive the restart.
        seconds = 0.5 if i % 2 else 5
        gpu = 1 if i < 4 else 0
        spec = {"command": ["sh", "-c", "echo run-$KOI_ATTEMPT >> runs.txt; while [ ! -e %s ]; do sleep 0.05; done; "
                            "sleep %s; echo done" % (gate, seconds)],
                "resources": {"gpu": gpu, "cpu": 1}}
        name = "job-%d" % i
        names.append(name)
        cp.koi(A, "job", "submit", "-f", write(cp.root, name + ".json", manifest(name, spec)))
    end = time.time() + 30
    while time.time() < end:
        jobs = cp.koi_json(A, "job", "list")["items"]
        if sum(j["status"]["phase"] == "Running" for j in jobs) == 10:
            break
        time.sleep(0.05)
    check(all(j["status"]["phase"] == "Running" for j in jobs), "not all jobs running before the crash")
    before = {n: cp.koi_json(A, "job", "events", n)["items"] for n in names}
    cp.kill9()
    open(gate, "w").close()
    time.sleep(2)  # the short jobs end while nobody watches
    cp.start()
    for name in names:
        j = cp.wait_phase(A, name, ["Succeeded", "Failed"])
        check(j["status"]["phase"] == "Succeeded", "%s: %s" % (name, j["status"]["message"]))
        check(j["status"]["attempts"] == 1 and j["status"]["restarts"] == 0,
              "%s ran %d times" % (name, j["status"]["attempts"]))
        events = cp.koi_json(A, "job", "events", name)["items"]
        check(events[:len(before[name])] == before[name], name + ": events before the crash were lost")
        reasons = [e["reason"] for e in events]
        check(reasons == ["Submitted", "Admitted", "Started", "Adopted", "Completed"], "%s: %s" % (name, reasons))
        check(cp.koi(A, "job", "logs", name).stdout == "done\n", name + " log")
    # Each job's only replica directory holds exactly one run.
    for name in names:
        files = glob.glob("%s/alpha/%s/*/0/runs.txt" % (cp.work, name))
        check(len(files) == 1 and open(files[0]).read() == "run-1\n", name + " ran more than once")


if __name__ == "__main__":
    run_test(CONFIG, run)
