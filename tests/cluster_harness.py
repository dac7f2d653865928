"""Helpers for the koi cluster integration tests: a control plane on a temporary store and
work directory, the koi CLI against it, and raw HTTP for what the CLI does not show.

Each test starts `koi cluster serve` on port 0 (the port is read from its first line),
talks to it only through `koi job|queue|node` and plain HTTP, and can kill -9 and restart it
over the same store. Waits poll with a generous overall deadline; no test asserts on time.
"""
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

KOI = os.environ.get("KOI_BIN", "build/koi")
SHARED = os.environ.get("KOI_SHARED_DIR", "../shared")


def fail(message):
    print("FAIL: " + message, flush=True)
    sys.exit(1)


def check(cond, message):
    if not cond:
        fail(message)


class ControlPlane:
    def __init__(self, config_yaml, root=None):
        self.root = root or tempfile.mkdtemp(prefix="koi-cluster-test-")
        self.config = os.path.join(self.root, "cluster.yaml")
        with open(self.config, "w") as f:
            f.write(config_yaml)
        # KOI_TEST_STORE_URL: another store (tests/store_postgres.py runs a test on PostgreSQL).
        self.store = os.environ.get("KOI_TEST_STORE_URL") or "sqlite:" + os.path.join(self.root, "cp.db")
        self.work = os.path.join(self.root, "work")
        self.proc = None
        self.url = None
        self.starts = 0

    def start(self):
        self.starts += 1
        log = open(os.path.join(self.root, "serve-%d.log" % self.starts), "w")
        self.proc = subprocess.Popen(
            [KOI, "cluster", "serve", "--store", self.store, "--config", self.config, "--port", "0",
             "--work-dir", self.work], stdout=subprocess.PIPE, stderr=log, text=True)
        line = self.proc.stdout.readline()
        if "listening on" not in line:
            self.proc.wait()
            fail("koi cluster serve did not start: " + line + open(log.name).read())
        self.url = line.split("listening on ")[1].split()[0]
        return self

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=30)

    def cleanup(self):
        self.stop()
        # Jobs outlive the control plane by design: end the replicas a failed test left
        # behind, by the process group ids recorded in the store.
        try:
            db = sqlite3.connect(self.store[len("sqlite:"):])
            for (body,) in db.execute("SELECT body FROM cluster_objects WHERE kind = 'Job'"):
                for r in json.loads(body)["status"].get("replicas", []):
                    # Local replicas ("pid:start"); Slurm's ("job.task") are the Slurm cluster's to end.
                    pid, start = (int(x) for x in r["id"].split(":")) if ":" in r.get("id", "") else (0, 0)
                    if pid > 0 and start_time(pid) == start:
                        try:
                            os.killpg(pid, signal.SIGKILL)
                        except OSError:
                            pass
            db.close()
        except sqlite3.Error:
            pass
        shutil.rmtree(self.root, ignore_errors=True)

    def koi(self, token, *args, expect_ok=True):
        env = dict(os.environ, KOI_SERVER=self.url, KOI_TOKEN=token)
        r = subprocess.run([KOI, *args], env=env, capture_output=True, text=True, timeout=60)
        if expect_ok and r.returncode != 0:
            fail("koi %s failed (%d): %s%s" % (" ".join(args), r.returncode, r.stdout, r.stderr))
        return r

    def koi_json(self, token, *args):
        return json.loads(self.koi(token, *args, "-o", "json").stdout)

    def http(self, method, path, token=None, body=None):
        req = urllib.request.Request(self.url + path, method=method, data=body.encode() if body else None)
        if token:
            req.add_header("Authorization", "Bearer " + token)
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def job(self, token, name, ns=None):
        args = ["job", "describe", name] + (["-n", ns] if ns else [])
        return self.koi_json(token, *args)["job"]

    def wait_phase(self, token, name, phases, deadline_s=50):
        end = time.time() + deadline_s
        while time.time() < end:
            j = self.job(token, name)
            if j["status"]["phase"] in phases:
                return j
            time.sleep(0.1)
        fail("job %s did not reach %s; it is %s: %s" % (name, phases, j["status"]["phase"], j["status"]["message"]))


def start_time(pid):
    """Field 22 of /proc/PID/stat (what the local executor records), or -1."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return -1


def manifest(name, spec):
    return json.dumps({"apiVersion": "koi/v1", "kind": "Job", "metadata": {"name": name}, "spec": spec})


def write(root, name, text):
    path = os.path.join(root, name)
    with open(path, "w") as f:
        f.write(text)
    return path


def tiny_recipe(root, steps, interval=500):
    """A tiny char-level model on 60 KB of tinyshakespeare: a few ms per step."""
    corpus = os.path.join(root, "corpus.txt")
    with open(os.path.join(SHARED, "data", "tinyshakespeare.txt"), "rb") as f:
        data = f.read(60000)
    with open(corpus, "wb") as f:
        f.write(data)
    return write(root, "tiny.yaml", """model: {dim: 32, layers: 2, heads: 4, kv_heads: 2, ffn_dim: 64, context: 16}
data: {text: %s, tokenizer: char}
train: {batch_size: 4, steps: %d, lr: 3.0e-3, warmup_steps: 5, seed: 7, checkpoint_interval: %d,
        keep_checkpoints: 2, log_interval: 0, eval_iters: 2, out: %s/unused}
""" % (corpus, steps, interval, root))


def baseline_run(recipe, out):
    r = subprocess.run([KOI, "train", "--config", recipe, "--out", out, "--threads", "1"], capture_output=True, text=True)
    if r.returncode != 0:
        fail("baseline koi train failed: " + r.stderr)


def last_step(run_dir):
    try:
        with open(os.path.join(run_dir, "metrics.jsonl")) as f:
            lines = f.read().splitlines()
        return max(json.loads(l).get("step", 0) for l in lines if l.strip()) if lines else 0
    except (OSError, ValueError):
        return 0


def same_weights(a, b, step):
    ck = "ckpt-%08d" % step
    for f in ("model.safetensors", "optimizer.safetensors"):
        pa, pb = os.path.join(a, ck, f), os.path.join(b, ck, f)
        if subprocess.run(["cmp", pa, pb]).returncode != 0:
            fail("%s differs between the uninterrupted run and the job" % f)


def one_tenant_config(cpu=8, memory_mib=16384, gpus=4):
    """A control plane config of one node (with `gpus` fake H100s, none when 0) and one tenant,
    alpha (token alpha-token), with an unlimited queue."""
    gpu = f", gpus: {{type: H100, count: {gpus}}}" if gpus else ""
    return (f"nodes:\n  - {{name: node-a, cpu: {cpu}, memoryMiB: {memory_mib}{gpu}}}\n"
            "queues:\n  - {name: alpha-q, tenant: alpha}\n"
            "tenants:\n  - {name: alpha, token: alpha-token}\n")


def slurm_config(reconcile_interval=0.2, tenants=("alpha",)):
    """A control plane config on the Slurm executor (the test cluster of scripts/slurm_cluster.py,
    partition koi), one unlimited queue per tenant (<tenant>-q, token <tenant>-token)."""
    queues = "".join("  - {name: %s-q, tenant: %s}\n" % (t, t) for t in tenants)
    tokens = "".join("  - {name: %s, token: %s-token}\n" % (t, t) for t in tenants)
    return ("reconcileIntervalSeconds: %g\nexecutor: {type: slurm, partition: koi, commandTimeoutSeconds: 3}\n"
            "queues:\n%stenants:\n%s" % (reconcile_interval, queues, tokens))


def run_slurm_test(body, hosts=3, config=None, min_job_age=300):
    """Starts a Slurm test cluster and a control plane on its executor, runs body(cp, slurm),
    always tears both down; prints PASS."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
    from slurm_cluster import SlurmCluster
    with SlurmCluster(hosts=hosts, min_job_age=min_job_age) as slurm:
        os.environ["SLURM_CONF"] = slurm.conf
        # The replicas' directories must be visible to every host: they are (one machine).
        cp = ControlPlane(config or slurm_config()).start()
        try:
            body(cp, slurm)
        finally:
            cp.cleanup()
    print("PASS")


def two_tenant_config(gpus=4, admins=False):
    """One node (8 cores, 16 GiB, `gpus` fake H100s) and two tenants, alpha and beta (tokens
    alpha-token and beta-token), each with an unlimited queue; with `admins`, an admin ops
    (token admin-token)."""
    text = ("nodes:\n  - {name: node-a, cpu: 8, memoryMiB: 16384, gpus: {type: H100, count: %d}}\n"
            "queues:\n  - {name: alpha-q, tenant: alpha}\n  - {name: beta-q, tenant: beta}\n"
            "tenants:\n  - {name: alpha, token: alpha-token}\n  - {name: beta, token: beta-token}\n" % gpus)
    return text + ("admins:\n  - {name: ops, token: admin-token}\n" if admins else "")


def run_test(config, body):
    """Starts a control plane on `config`, runs body(cp), always cleans up; prints PASS."""
    cp = ControlPlane(config).start()
    try:
        body(cp)
    finally:
        cp.cleanup()
    print("PASS")
