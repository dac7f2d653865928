"""The web console in a real browser (issue 20, Must show 1): Debian's chromium, headless, driven
by playwright-core from npm (tests/cluster_console.mjs), against `koi cluster serve` with a real
`koi gateway`, a `koi train` job, a `koi serve` deployment of stories260K under load from the
official openai npm client (tests/cluster_deploy_harness.py), and two tenants.

In the browser: alpha logs in with its token and sees its jobs; the training job's loss curve
grows between two readings; a segfaulting job shows Failed and its Crashed (SIGSEGV) diagnosis;
the job that waits for quota shows plan()'s reason, and its cancel
arrives over the watch stream; the deployment's QPS and latency charts are flat while idle and
move once load starts; beta's token
sees beta's job and none of alpha's (and alpha's job by its address says not found); an unknown
token is refused; the admin sees both tenants' jobs and the nodes table's measured figures (CPU
utilisation, memory in use, "no GPU" without nvidia-smi), whose chart gains points and whose CPU
figure reaches the busy share while a job spins on the machine's CPUs. The same boundary is checked
on the console's new routes over plain HTTP; the nodes' figures over the API against /proc and on
/metrics.
Screenshots go to $KOI_ARTIFACT_DIR (the build folder's test-artifacts/console)."""
import json
import os
import re
import shutil
import subprocess
import time

from cluster_deploy_harness import (BETA_TOKEN, NPM_DIR, OPS_TOKEN, TOKEN, Env, deployment_manifest, ok, seed_model)
from cluster_harness import check, fail, manifest, write

PLAYWRIGHT_PIN = "1.65.1"
CHROMIUM = os.environ.get("KOI_CHROMIUM", "/usr/bin/chromium")
ARTIFACTS = os.environ.get("KOI_ARTIFACT_DIR", "test-artifacts/console")
HERE = os.path.dirname(os.path.abspath(__file__))


def ensure_playwright():
    try:
        with open(os.path.join(NPM_DIR, "node_modules", "playwright-core", "package.json")) as f:
            if json.load(f)["version"] == PLAYWRIGHT_PIN:
                return
    except (OSError, ValueError, KeyError):
        pass
    os.makedirs(NPM_DIR, exist_ok=True)
    subprocess.run(["npm", "i", "--prefix", NPM_DIR, "--no-audit", "--no-fund", "playwright-core@" + PLAYWRIGHT_PIN],
                   check=True, stdout=subprocess.DEVNULL)


def slow_recipe(root):
    """A char-level model big enough for tens of ms a step on one thread: the job runs for minutes
    (it is cancelled at the end), so the curve is read while it grows."""
    corpus = os.path.join(root, "corpus.txt")
    with open(os.path.join(os.environ.get("KOI_SHARED_DIR", "../shared"), "data", "tinyshakespeare.txt"), "rb") as f:
        data = f.read(60000)
    with open(corpus, "wb") as f:
        f.write(data)
    return write(root, "slow.yaml", """model: {dim: 128, layers: 4, heads: 4, kv_heads: 2, ffn_dim: 384, context: 64}
data: {text: %s, tokenizer: char}
train: {batch_size: 8, steps: 100000, lr: 3.0e-3, warmup_steps: 5, seed: 7, checkpoint_interval: 0,
        log_interval: 0, eval_iters: 2, eval_interval: 20, out: %s/unused}
""" % (corpus, root))


def submit(env, token, name, spec):
    env.cp.koi(token, "job", "submit", "-f", write(env.root, name + ".json", manifest(name, spec)))


def wait_for(what, pred, deadline_s=60):
    end = time.time() + deadline_s
    while time.time() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.2)
    fail(what + " did not happen")


def check_api_boundary(env):
    """The console's new routes answer beta for alpha's objects exactly as missing ones (404)."""
    for path in ("/apis/v1/namespaces/alpha/jobs/train-loss/metrics", "/apis/v1/namespaces/alpha/deployments/stories/metrics"):
        code, body = env.cp.http("GET", path, BETA_TOKEN)
        check(code == 404 and "not found" in body, "beta reading %s: %d %s" % (path, code, body))
        code, body = env.cp.http("GET", path, TOKEN)
        check(code == 200, "alpha reading %s: %d %s" % (path, code, body))
    code, _ = env.cp.http("GET", "/apis/v1/namespaces/alpha/jobs/train-loss/metrics")
    check(code == 401, "the metrics routes need a token (%d)" % code)
    code, body = env.cp.http("GET", "/apis/v1/namespaces/alpha/jobs/train-loss/metrics?maxPoints=1", TOKEN)
    check(code == 400 and "maxPoints" in body, "a bad maxPoints is a 400 naming it: %d %s" % (code, body))
    ok("the metrics routes keep the tenant boundary")


def meminfo(key):
    with open("/proc/meminfo") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith(key + ":"))


def check_node_usage_api(env):
    """n0's status.usage against this machine's /proc/meminfo (read here, within 10% of the total:
    other programs allocate meanwhile), and the koi_cluster_node_* gauges on /metrics."""
    code, body = env.cp.http("GET", "/apis/v1/nodes", OPS_TOKEN)
    check(code == 200, "GET nodes: %d %s" % (code, body))
    u = [n for n in json.loads(body)["items"] if n["metadata"]["name"] == "n0"][0]["status"]["usage"]
    total, used = meminfo("MemTotal"), meminfo("MemTotal") - meminfo("MemAvailable")
    check(u["source"] == "/proc" and u["memoryTotalBytes"] == total, "n0's usage: %s" % u)
    check(abs(u["memoryUsedBytes"] - used) < 0.1 * total, "memory in use %d against /proc's %d" % (u["memoryUsedBytes"], used))
    check(0 <= u["cpuUtilization"] <= 1 and len(u["history"]) >= 2, "CPU %s, %d samples" % (u["cpuUtilization"], len(u["history"])))
    check(bool(u["gpus"]) == bool(shutil.which("nvidia-smi")), "GPUs %s (%s)" % (u["gpus"], u.get("gpuNote")))
    code, text = env.cp.http("GET", "/metrics")
    for family in ("koi_cluster_node_cpu_utilization_ratio", "koi_cluster_node_memory_used_bytes",
                   "koi_cluster_node_memory_total_bytes", "koi_cluster_node_load1"):
        m = re.search(r'^%s\{node="n0"\} (\S+)$' % family, text, re.M)
        check(m is not None, "%s{node=\"n0\"} on /metrics" % family)
    ok("n0 measured: CPU %.3f, memory %d of %d bytes (/proc says %d), %s" %
       (u["cpuUtilization"], u["memoryUsedBytes"], total, used, u.get("gpuNote") or u["gpus"]))


def busy_job(env, spinners):
    """A job whose `spinners` shells spin on the CPU until it is cancelled."""
    script = "for i in $(seq %d); do (while :; do :; done) & done; wait" % spinners
    submit(env, TOKEN, "busy", {"command": ["sh", "-c", script], "resources": {"cpu": spinners, "memoryMiB": 64}})
    env.cp.wait_phase(TOKEN, "busy", ["Running"])


def run(env):
    seed_model(env, "alpha", "stories", [env.good], {"production": 1})
    spec = {"model": "stories@production", "replicas": {"min": 1, "max": 1}, "resources": {"cpu": 1, "memoryMiB": 512},
            "serveArgs": ["--threads", "1"]}
    env.koi("deploy", "apply", "-f", deployment_manifest(env.root, "stories", spec))
    submit(env, TOKEN, "train-loss", {"kind": "train", "recipe": slow_recipe(env.root), "args": ["--threads", "1"],
                                      "checkpointDir": os.path.join(env.root, "train-loss"),
                                      "resources": {"cpu": 1, "memoryMiB": 1024}})
    submit(env, BETA_TOKEN, "beta-secret", {"command": ["sleep", "600"], "resources": {"cpu": 0.1, "memoryMiB": 64}})
    env.wait("stories", lambda d: d["status"]["phase"] == "Available", "the deployment available", 90)
    env.cp.wait_phase(TOKEN, "train-loss", ["Running"])
    # A diagnosis the console must show: a command that segfaults ends Failed, Crashed (SIGSEGV).
    submit(env, TOKEN, "segfaults", {"command": ["python3", "-c", "import ctypes; ctypes.string_at(0)"],
                                     "restartPolicy": {"maxRestarts": 0}, "resources": {"cpu": 0.1, "memoryMiB": 64}})
    env.cp.wait_phase(TOKEN, "segfaults", ["Failed"])
    # The serving queue holds 8 cores: the replica and the trainer take 2, so 7 more must wait.
    submit(env, TOKEN, "waits-for-quota", {"command": ["sleep", "600"], "resources": {"cpu": 7, "memoryMiB": 64}})
    pending = wait_for("a reason on the waiting job",
                       lambda: (lambda j: j if j["status"]["message"] else None)(env.cp.job(TOKEN, "waits-for-quota")))
    check(pending["status"]["phase"] == "Pending", "waits-for-quota is %s" % pending["status"]["phase"])
    ok("waits-for-quota waits: %s: %s" % (pending["status"]["reason"], pending["status"]["message"]))
    check_api_boundary(env)

    os.makedirs(ARTIFACTS, exist_ok=True)
    for old in os.listdir(ARTIFACTS):  # a previous run's, failure.png among them
        if old.endswith(".png"):
            os.remove(os.path.join(ARTIFACTS, old))
    config = {"url": env.cp.url, "alpha": TOKEN, "beta": BETA_TOKEN, "admin": OPS_TOKEN, "chromium": CHROMIUM,
              "artifacts": os.path.abspath(ARTIFACTS), "npm": NPM_DIR, "pendingReason": pending["status"]["message"],
              "node": "n0", "memoryTotalBytes": meminfo("MemTotal"), "gpu": shutil.which("nvidia-smi") is not None}
    # The busy job spins on up to 4 CPUs (the queue's room) with a CPU limit of as many cores:
    # while it runs, at least that share of the machine's CPUs is busy, whatever else runs.
    spinners = min(os.cpu_count(), 4)
    config["busyShare"] = round(0.9 * spinners / os.cpu_count(), 3)
    browser = subprocess.Popen(["node", os.path.join(HERE, "cluster_console.mjs"), json.dumps(config)],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    load = None
    result = None  # the load's outcome, taken when the browser reaches the nodes table
    try:
        for line in browser.stdout:
            print(line.rstrip(), flush=True)
            if line.startswith("idle:"):  # the browser has read the idle charts: start the load
                load = env.load(2, "stories")
                env.cp.koi(TOKEN, "job", "cancel", "waits-for-quota")
                browser.stdin.write("go\n")
                browser.stdin.flush()
            if line.startswith("nodes:"):  # the browser has read the nodes table: start the busy job
                # The load's charts are read by now; it ends before the spinners take every core,
                # which would starve the replica's health checks (a 503 from the gateway).
                check(load is not None, "the browser never read the idle deployment")
                result = Env.finish(load)
                check_node_usage_api(env)
                busy_job(env, spinners)
                browser.stdin.write("go\n")
                browser.stdin.flush()
        browser.wait(timeout=120)
        check(browser.returncode == 0, "the browser script failed (exit %d)" % browser.returncode)
        check(result is not None, "the browser never read the nodes table")
        check(result["failed"] == 0 and result["ok"] > 0, "the load: %s" % result)
        shots = sorted(f for f in os.listdir(ARTIFACTS) if f.endswith(".png"))
        check(len(shots) >= 4, "screenshots in %s: %s" % (ARTIFACTS, shots))
        ok("screenshots: %s in %s" % (", ".join(shots), os.path.abspath(ARTIFACTS)))
    finally:
        if browser.poll() is None:
            browser.kill()
    env.cp.koi(TOKEN, "job", "cancel", "train-loss")
    env.cp.koi(TOKEN, "job", "cancel", "busy")
    env.cp.koi(BETA_TOKEN, "job", "cancel", "beta-secret")


if __name__ == "__main__":
    ensure_playwright()
    check(os.path.exists(CHROMIUM), "no %s: apt-get install chromium (scripts/install-deps)" % CHROMIUM)
    env = Env(beta_queue=True)
    try:
        run(env)
        print("PASS")
    finally:
        env.close()
