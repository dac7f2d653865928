"""Helpers for the Deployment tests: a koi gateway and a control plane that manages its
routes, koi serve replicas of stories260K (converted to GGUF once per test), model versions
in its registry, and constant load from the official openai npm client.

Model versions are registered and aliases moved through `koi model` (seed_model, move_alias)."""
import json
import os
import socket
import subprocess
import tempfile
import time
import uuid

from cluster_harness import ControlPlane, KOI, SHARED, check, fail

ADMIN_KEY = "admin-key-0123456789"
TOKEN = "alpha-token-1234"
BETA_TOKEN = "beta-token-1234"
OPS_TOKEN = "ops-token-1234"
NPM_DIR = os.environ.get("KOI_NPM_CACHE", os.path.join(os.environ.get("HOME", "/root"), ".cache/koi-npm"))
OPENAI_PIN = "7.59.0"  # as tests/serve_npm.sh
HERE = os.path.dirname(os.path.abspath(__file__))


def ensure_openai():
    """The pinned openai package in $KOI_NPM_CACHE, installed when missing (as serve_npm.sh does)."""
    try:
        with open(os.path.join(NPM_DIR, "node_modules", "openai", "package.json")) as f:
            if json.load(f)["version"] == OPENAI_PIN:
                return
    except (OSError, ValueError, KeyError):
        pass
    os.makedirs(NPM_DIR, exist_ok=True)
    subprocess.run(["npm", "i", "--prefix", NPM_DIR, "--no-audit", "--no-fund", "openai@" + OPENAI_PIN], check=True,
                   stdout=subprocess.DEVNULL)


def ok(message):
    print("ok: " + message, flush=True)


class Gateway:
    def __init__(self, root):
        path = os.path.join(root, "gateway.yaml")
        # The file needs one model; the deployments' routes arrive through the admin API.
        with open(path, "w") as f:
            f.write("listen: 127.0.0.1:0\nadmin: {listen: 127.0.0.1:0, key: %s}\nstore: %s\n"
                    "health: {interval_ms: 200, timeout_ms: 500}\nbreaker: {failures: 2, open_ms: 1000}\n"
                    "timeouts: {connect_ms: 500, first_byte_ms: 10000, idle_ms: 10000}\n"
                    "models:\n  - name: placeholder\n    versions:\n      - {name: v1, weight: 100, replicas: [\"http://127.0.0.1:9\"]}\n"
                    "tenants:\n  - {name: acme}\n" % (ADMIN_KEY, json.dumps(os.path.join(root, "ledger.db"))))
        self.log = open(os.path.join(root, "gateway.log"), "w")
        self.proc = subprocess.Popen([KOI, "gateway", "--config", path, "--threads", "2"], stdout=subprocess.PIPE,
                                     stderr=self.log, text=True)
        self.url = self.admin = None
        while not self.admin:
            line = self.proc.stdout.readline()
            if not line:
                fail("koi gateway exited: " + open(self.log.name).read())
            if line.startswith("listening on "):
                self.url = line.split()[-1]
            if line.startswith("admin on "):
                self.admin = line.split()[-1]
        self.key = self.call("POST", "/admin/keys", {"tenant": "acme"})["key"]

    def call(self, method, path, body=None):
        import urllib.request
        req = urllib.request.Request(self.admin + path, method=method, data=json.dumps(body).encode() if body else None,
                                     headers={"Authorization": "Bearer " + ADMIN_KEY, "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read().decode())

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)


def control_plane_config(gateway, cpu_quota, beta_queue=False):
    """Queue `serving` of alpha with `cpu_quota` cores; with `beta_queue`, beta's unlimited beta-q
    and an admin, ops (token OPS_TOKEN)."""
    beta = "  - {name: beta-q, tenant: beta}\n" if beta_queue else ""
    admins = "admins:\n  - {name: ops, token: %s}\n" % OPS_TOKEN if beta_queue else ""
    return f"""reconcileIntervalSeconds: 0.2
nodes:
  - {{name: n0, cpu: 16, memoryMiB: 65536}}
queues:
  - name: serving
    tenant: alpha
    quota: {{cpu: {{nominal: {cpu_quota}}}, memory: {{nominal: 65536}}}}
{beta}tenants:
  - {{name: alpha, token: {TOKEN}}}
  - {{name: beta, token: {BETA_TOKEN}}}
{admins}gateway: {{adminUrl: {gateway.admin}, adminKey: {ADMIN_KEY}}}
"""


class Env:
    """A gateway, a control plane pointed at it, and GGUF artifacts: good (stories260K) and bad (the
    same weights exported with a 4-token context, so every real request is refused)."""

    def __init__(self, cpu_quota=8, beta_queue=False):
        ensure_openai()
        self.root = tempfile.mkdtemp(prefix="koi-deploy-test-")
        self.gateway = Gateway(self.root)
        self.cp = ControlPlane(control_plane_config(self.gateway, cpu_quota, beta_queue), root=self.root).start()
        src = os.path.join(SHARED, "models", "stories260K")
        self.good = os.path.join(self.root, "stories-a.gguf")
        subprocess.run([KOI, "convert", "--llama2c", src + "/stories260K.bin", "--tokenizer", src + "/tok512.bin", "-o",
                        self.good], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.good2 = os.path.join(self.root, "stories-b.gguf")
        with open(self.good, "rb") as f, open(self.good2, "wb") as g:
            g.write(f.read())
        bad_bin = os.path.join(self.root, "short-context.bin")
        with open(src + "/stories260K.bin", "rb") as f:
            data = bytearray(f.read())
        data[24:28] = (4).to_bytes(4, "little")  # the llama2.c header's seq_len
        with open(bad_bin, "wb") as f:
            f.write(data)
        self.bad = os.path.join(self.root, "short-context.gguf")
        subprocess.run([KOI, "convert", "--llama2c", bad_bin, "--tokenizer", src + "/tok512.bin", "-o", self.bad],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.loads = []

    def koi(self, *args, expect_ok=True):
        return self.cp.koi(TOKEN, *args, expect_ok=expect_ok)

    def deployment(self, name):
        return self.cp.koi_json(TOKEN, "deploy", "status", name)["deployment"]

    def events(self, name):
        return self.cp.koi_json(TOKEN, "deploy", "status", name)["events"]

    def wait(self, name, pred, what, deadline_s=60, each=None):
        end = time.time() + deadline_s
        d = None
        while time.time() < end:
            d = self.deployment(name)
            if each:
                each(d)
            if pred(d):
                return d
            time.sleep(0.2)
        fail("deployment %s: %s did not happen; status: %s\nevents: %s" % (
            name, what, json.dumps(d and d.get("status"), indent=1), json.dumps(self.events(name), indent=1)))

    def replica_jobs(self, name):
        """The deployment's replica jobs that have not ended."""
        _, body = self.cp.http("GET", "/apis/v1/namespaces/alpha/jobs", TOKEN)
        return [j for j in json.loads(body)["items"] if j["metadata"]["labels"].get("deployment") == name
                and j["status"]["phase"] not in ("Succeeded", "Failed", "Cancelled")]

    def load(self, workers, model, max_tokens=24):
        stop = os.path.join(self.root, "stop-%d" % len(self.loads))
        p = subprocess.Popen(["node", os.path.join(HERE, "cluster_deploy_load.mjs"), self.gateway.url, self.gateway.key,
                              model, str(workers), stop, str(max_tokens)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=dict(os.environ, KOI_NPM_DIR=NPM_DIR))
        self.loads.append(p)
        return (p, stop)

    @staticmethod
    def finish(load):
        p, stop = load
        open(stop, "w").close()
        out, err = p.communicate(timeout=60)
        if p.returncode != 0:
            fail("the load client failed: " + out + err)
        return json.loads(out.strip().splitlines()[-1])

    def close(self):
        for p in self.loads:
            if p.poll() is None:
                p.kill()
        self.gateway.stop()
        self.cp.cleanup()


def seed_model(env, ns, model, artifacts, aliases):
    """Model `model` with versions 1..n registered through `koi model register` from the
    artifacts (paths; each from a job that checks it, for the lineage), and `aliases`
    {alias: version} moved with `koi model alias`."""
    for i, path in enumerate(artifacts, start=1):
        job = "make-%s-v%d" % (model, i)
        spec = {"command": ["test", "-s", path], "resources": {"cpu": 0.1, "memoryMiB": 64}}
        env.koi("job", "submit", "-f", _write_json(env.root, job, {"apiVersion": "koi/v1", "kind": "Job",
                                                                   "metadata": {"name": job}, "spec": spec}))
        j = env.cp.wait_phase(TOKEN, job, ["Succeeded", "Failed"])
        check(j["status"]["phase"] == "Succeeded", "%s: %s" % (job, j["status"]["message"]))
        env.koi("model", "register", model, "--from-job", job, "--artifact", path, "--format", "gguf")
    for alias, version in aliases.items():
        move_alias(env, ns, model, alias, version)


def move_alias(env, ns, model, alias, version):
    env.koi("model", "alias", model, alias, str(version))


def _write_json(root, name, obj):
    path = os.path.join(root, name + ".json")
    with open(path, "w") as f:
        json.dump(obj, f)
    return path


def deployment_manifest(root, name, spec):
    path = os.path.join(root, name + ".json")
    with open(path, "w") as f:
        json.dump({"apiVersion": "koi/v1", "kind": "Deployment", "metadata": {"name": name}, "spec": spec}, f)
    return path
