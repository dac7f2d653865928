"""koi cluster on Slurm, gang and topology (issue 15, Must show 2): a 4-replica job of one GPU
each that needs one leaf switch runs on the two hosts of switch s0 (h0, h1) as one Slurm
allocation. With h1 drained in Slurm (the control plane sees it unschedulable) the same job
waits, with plan()'s reason, and nothing of it reaches Slurm (never a partial gang), while a
4-replica job without the topology constraint runs on h0 and h2; when h1 is resumed the
waiting job starts on h0 and h1. The node's changes are in the store as events."""
import sqlite3
import subprocess
import time

from cluster_harness import check, manifest, run_slurm_test, write

A = "alpha-token"
GANG = {"command": ["sh", "-c", "echo $KOI_NODE $SLURM_JOB_ID"], "replicas": 4, "topology": "leafSwitch",
        "resources": {"gpu": 1, "cpu": 1, "memoryMiB": 256}}


def placed_hosts(cp, name):
    admitted = [e["message"] for e in cp.koi_json(A, "job", "events", name)["items"] if e["reason"] == "Admitted"]
    return [h.split(" ")[0] for h in admitted[-1].split("placed on ")[1].split(", ")] if admitted else []


def scontrol(slurm, *args):
    r = subprocess.run(["scontrol", *args], env=slurm.env, capture_output=True, text=True)
    check(r.returncode == 0, "scontrol %s: %s" % (" ".join(args), r.stderr))


def node_state(cp, name):
    return {n["metadata"]["name"]: n["spec"] for n in cp.koi_json(A, "node", "list")["items"]}[name].get("unschedulable", "")


def wait_node(cp, name, pred, what):
    end = time.time() + 30
    while time.time() < end and not pred(node_state(cp, name)):
        time.sleep(0.1)
    check(pred(node_state(cp, name)), "%s never became %s: %r" % (name, what, node_state(cp, name)))


def run(cp, slurm):
    cp.koi(A, "job", "submit", "-f", write(cp.root, "g1.json", manifest("g1", GANG)))
    j = cp.wait_phase(A, "g1", ["Succeeded", "Failed"])
    check(j["status"]["phase"] == "Succeeded", j["status"]["message"])
    check(sorted(set(placed_hosts(cp, "g1"))) == ["h0", "h1"], "placed on %s" % placed_hosts(cp, "g1"))
    logs = [cp.koi(A, "job", "logs", "g1", "--replica", str(r)).stdout.split() for r in range(4)]
    check(len({l[1] for l in logs}) == 1, "not one Slurm allocation: %s" % logs)
    check(sorted(l[0] for l in logs) == ["h0", "h0", "h1", "h1"], "tasks %s" % logs)

    scontrol(slurm, "update", "NodeName=h1", "State=DRAIN", "Reason=koi-test")
    wait_node(cp, "h1", lambda s: "drain" in s, "drained")
    before = subprocess.run(["squeue", "-h", "--states=all", "-o", "%i"], env=slurm.env, capture_output=True,
                            text=True).stdout.split()
    cp.koi(A, "job", "submit", "-f", write(cp.root, "g2.json", manifest("g2", GANG)))
    loose = dict(GANG, topology="none")
    cp.koi(A, "job", "submit", "-f", write(cp.root, "loose.json", manifest("loose", loose)))
    j = cp.wait_phase(A, "loose", ["Succeeded", "Failed"])
    check(j["status"]["phase"] == "Succeeded", j["status"]["message"])
    check(sorted(set(placed_hosts(cp, "loose"))) == ["h0", "h2"], "loose placed on %s" % placed_hosts(cp, "loose"))
    time.sleep(2)
    st = cp.job(A, "g2")["status"]
    check(st["phase"] == "Pending" and st.get("reason") and st.get("message"), "g2: %s" % st)
    print("g2 waits: %s: %s" % (st["reason"], st["message"]))
    after = subprocess.run(["squeue", "-h", "--states=all", "-o", "%i"], env=slurm.env, capture_output=True,
                           text=True).stdout.split()
    check(len(set(after) - set(before)) == 1, "g2 reached Slurm while it waits: %s -> %s" % (before, after))
    check(placed_hosts(cp, "g2") == [], "g2 was admitted")

    scontrol(slurm, "update", "NodeName=h1", "State=RESUME")
    wait_node(cp, "h1", lambda s: s == "", "schedulable")
    j = cp.wait_phase(A, "g2", ["Succeeded", "Failed"])
    check(j["status"]["phase"] == "Succeeded", j["status"]["message"])
    check(sorted(set(placed_hosts(cp, "g2"))) == ["h0", "h1"], "g2 placed on %s" % placed_hosts(cp, "g2"))
    # The node's changes reached the store: events and the Node object.
    db = sqlite3.connect(cp.store[len("sqlite:"):])
    reasons = [r for (r,) in db.execute(
        "SELECT reason FROM cluster_events WHERE kind = 'Node' AND name = 'h1' ORDER BY resource_version")]
    body = db.execute("SELECT body FROM cluster_objects WHERE kind = 'Node' AND name = 'h1'").fetchone()
    db.close()
    check(reasons == ["NodeUnschedulable", "NodeReady"], "h1's events: %s" % reasons)
    check(body and "unschedulable" not in body[0], "h1's object: %s" % body)


if __name__ == "__main__":
    run_slurm_test(run)
