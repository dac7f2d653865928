"""koi cluster: a job's declared memory is its limit. A job that writes more than its
spec.resources.memoryMiB is killed by the kernel's OOM killer inside its own limit group
(cgroups, process/limits.h); the control plane records an OOMKilled event naming the limit
and the peak, the replica record says oomKilled, and once the budget is spent the job ends
Failed with that message. A job within its limit on the same machine succeeds. Where this
machine has no writable cgroup hierarchy the limit is not enforced, and the exit record
says so (limits none) instead of claiming it."""
import os

from cluster_harness import check, manifest, write, run_test, one_tenant_config

CONFIG = one_tenant_config(gpus=0)
A = "alpha-token"

ALLOC = "import sys; b = b'x' * (int(sys.argv[1]) << 20); print('wrote', len(b) >> 20, 'MiB')"


def job(name, mib):
    return manifest(name, {"command": ["python3", "-c", ALLOC, str(mib)],
                           "resources": {"cpu": 1, "memoryMiB": 64},
                           "restartPolicy": {"maxRestarts": 0}})


def run(cp):
    cp.koi(A, "job", "submit", "-f", write(cp.root, "fits.json", job("fits", 16)))
    cp.koi(A, "job", "submit", "-f", write(cp.root, "hog.json", job("hog", 256)))
    fits = cp.wait_phase(A, "fits", ["Succeeded", "Failed"])
    check(fits["status"]["phase"] == "Succeeded", str(fits["status"]))
    record = open(os.path.join(cp.work, "alpha", "fits", "1", "0", "exit")).read()
    mechanism = [l.split()[1] for l in record.splitlines() if l.startswith("limits ")]
    check(len(mechanism) == 1, "the exit record names the limit mechanism: " + record)
    hog = cp.wait_phase(A, "hog", ["Succeeded", "Failed"])
    if mechanism[0] == "none":
        check(hog["status"]["phase"] == "Succeeded", "nothing enforced, nothing claimed: " + str(hog["status"]))
        return
    check(hog["status"]["phase"] == "Failed", str(hog["status"]))
    message = hog["status"]["message"]
    check("OOM killer" in message and "64 MiB" in message and "memoryMiB" in message, message)
    events = cp.koi_json(A, "job", "events", "hog")["items"]
    oom = [e for e in events if e["reason"] == "OOMKilled"]
    check(len(oom) == 1 and oom[0]["type"] == "Warning" and "peak" in oom[0]["message"], str(events))
    check(hog["status"]["lastSignal"] == 9, str(hog["status"]))


if __name__ == "__main__":
    run_test(CONFIG, run)
