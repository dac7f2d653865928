"""Observability end to end: a control plane (with a job that fails and is restarted, and
a low-priority job preempted by a high-priority one), a
koi gateway in front of a koi serve replica of stories260K, and a koi train run serving
--metrics-port, all started here.

  observability.py dashboard   scrapes every program's /metrics and checks that every
                               metric each query of deploy/grafana/koi.json names is exported
  observability.py prometheus  a real Prometheus (Debian's) scrapes the four programs every
                               0.5 s; its query API returns each family of docs/observability.md

Stdlib only; run with Debian's /usr/bin/python3."""
import json, os, re, subprocess, sys, time, urllib.parse, urllib.request

import cluster_harness as ch
import gateway_harness as gh

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DASHBOARD = os.path.join(ROOT, "deploy", "grafana", "koi.json")
# Families that only get a series when their event happens, which this test does not cause
# (an upstream error needs a failing replica): they must be declared (# TYPE) on /metrics,
# and known to Prometheus' metadata API.
# The GPU gauges have series only where nvidia-smi answers.
DECLARED_ONLY = {"koi_gateway_upstream_errors_total", "koi_cluster_node_gpu_utilization_ratio",
                 "koi_cluster_node_gpu_memory_used_bytes", "koi_cluster_node_gpu_memory_total_bytes"}
CLUSTER = ch.two_tenant_config()
# The families the issue asks for, by program, with a series each.
FAMILIES = {
    "train": ["koi_train_step_seconds", "koi_train_step_duration_seconds_count", "koi_train_tokens_per_second",
              "koi_train_tokens_total", "koi_train_loss", "koi_train_grad_norm",
              "koi_train_model_flops_utilization_ratio", "koi_train_peak_flops_per_second",
              "koi_train_checkpoint_write_seconds_count", "koi_train_collective_seconds_total"],
    "serve": ["koi:engine_steps_total", "koi:engine_step_batch_tokens_bucket", "koi:engine_step_batch_requests_sum",
              "koi:engine_step_schedule_seconds_count", "koi:engine_step_forward_seconds_sum",
              "koi:engine_step_duration_seconds_count", "koi:generation_tokens_total"],
    "gateway": ["koi_gateway_requests_total", "koi_gateway_request_duration_seconds_count"],
    "cluster": ["koi_cluster_queue_pending_jobs", "koi_cluster_queue_running_jobs", "koi_cluster_admissions_total",
                "koi_cluster_preemptions_total", "koi_cluster_restarts_total",
                "koi_cluster_node_cpu_utilization_ratio", "koi_cluster_node_memory_used_bytes",
                "koi_cluster_node_memory_total_bytes", "koi_cluster_node_load1"],
}


def get(url, timeout=10):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def exposition(text):
    """(sample names with a series, family names declared by # TYPE) of a /metrics body."""
    samples, families = set(), set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            name, kind = line.split()[2:4]
            families.add(name + ("_total" if kind == "counter" and not name.endswith("_total") else ""))
        elif line and not line.startswith("#"):
            samples.add(re.split(r"[{ ]", line, 1)[0])
    return samples, families


def start_trainer(env):
    recipe = ch.tiny_recipe(env.dir, 10000000, interval=500)
    log_path = os.path.join(env.dir, "train.log")
    p = subprocess.Popen([gh.KOI, "train", "--config", recipe, "--out", os.path.join(env.dir, "run"), "--threads", "1",
                          "--metrics-port", "0"], stdout=subprocess.DEVNULL, stderr=open(log_path, "w"))
    end = time.time() + 60
    while time.time() < end:
        m = re.search(r"metrics at (http://\S+)/metrics", open(log_path).read())
        if m:
            return p, m.group(1)
        if p.poll() is not None:
            gh.fail("koi train exited: " + open(log_path).read())
        time.sleep(0.1)
    gh.fail("koi train printed no metrics address")


def start_all(env):
    os.makedirs(os.path.join(env.dir, "cp"))
    cp = ch.ControlPlane(CLUSTER, root=os.path.join(env.dir, "cp")).start()
    spec = {"command": ["sh", "-c", "exit 3"], "restartPolicy": {"maxRestarts": 2, "backoffSeconds": 1}}
    cp.koi("alpha-token", "job", "submit", "-f", ch.write(cp.root, "fail.json", ch.manifest("fails", spec)))
    low = {"command": ["sleep", "60"], "priority": 0, "preemptible": True, "resources": {"gpu": 4, "cpu": 1},
           "terminationGracePeriodSeconds": 5, "restartPolicy": {"maxRestarts": 0}}
    cp.koi("beta-token", "job", "submit", "-f", ch.write(cp.root, "low.json", ch.manifest("low", low)))
    cp.wait_phase("beta-token", "low", ["Running"])
    high = {"command": ["sh", "-c", "sleep 1"], "priority": 10, "resources": {"gpu": 2}}
    cp.koi("alpha-token", "job", "submit", "-f", ch.write(cp.root, "high.json", ch.manifest("high", high)))
    replica = env.replica("serve")
    gw = env.gateway(gh.config({"v1": (100, [replica.url])}, os.path.join(env.dir, "ledger.db")))
    trainer, train_url = start_trainer(env)
    key = gh.new_key(gw)
    for _ in range(3):
        status, _, text = gh.completion(gw, key)
        gh.check(status == 200, "a completion through the gateway: " + str(status) + " " + text[:200])
    # The control plane's jobs: admitted, the failing one restarted, the low one preempted.
    end = time.time() + 30
    while time.time() < end:
        text = get(cp.url + "/metrics")
        if 'cause="failure"' in text and "koi_cluster_preemptions_total{" in text:
            break
        time.sleep(0.2)
    return cp, trainer, {"cluster": cp.url, "gateway": gw.url, "serve": replica.url, "train": train_url}


def dashboard_check(targets):
    samples, families = set(), set()
    for url in targets.values():
        s, f = exposition(get(url + "/metrics"))
        samples |= s
        families |= f
    for program, names in FAMILIES.items():
        for name in names:
            gh.check(name in samples, f"{program} exports {name}")
    dash = json.load(open(DASHBOARD))
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    gh.check(len(exprs) >= 20, f"the dashboard has {len(exprs)} queries")
    for expr in exprs:
        names = re.findall(r"\bkoi[_:][A-Za-z0-9_:]*", expr)
        if not names:
            gh.fail("a dashboard query names no koi metric: " + expr)
        for name in names:
            ok = name in samples or (name in DECLARED_ONLY and name in families)
            if not ok:
                gh.fail(f"dashboard query {expr!r} names {name}, which no program exports")
    print(f"ok: every one of the {len(exprs)} dashboard queries names exported metrics", flush=True)


def prometheus_check(env, targets):
    port = gh.free_port()
    conf = os.path.join(env.dir, "prometheus.yml")
    scrape = "".join(f"  - job_name: {job}\n    static_configs:\n      - targets: [\"{url[len('http://'):]}\"]\n"
                     for job, url in targets.items())
    with open(conf, "w") as f:
        f.write("global:\n  scrape_interval: 500ms\n  scrape_timeout: 400ms\nscrape_configs:\n" + scrape)
    log = open(os.path.join(env.dir, "prometheus.log"), "w")
    prom = subprocess.Popen(["prometheus", "--config.file=" + conf, "--storage.tsdb.path=" + os.path.join(env.dir, "tsdb"),
                             "--web.listen-address=127.0.0.1:%d" % port], stdout=log, stderr=log)
    api = "http://127.0.0.1:%d/api/v1/" % port

    def query(q):
        try:
            return json.loads(get(api + "query?query=" + urllib.parse.quote(q)))["data"]["result"]
        except (OSError, ValueError, KeyError):
            return []

    try:
        pending = [(job, name) for job, names in FAMILIES.items() for name in names]
        pending += [(job, "up") for job in targets]
        end = time.time() + 60
        while pending and time.time() < end:
            still = []
            for job, name in pending:
                r = query(f'{name}{{job="{job}"}}')
                if not r or (name == "up" and r[0]["value"][1] != "1"):
                    still.append((job, name))
            pending = still
            time.sleep(0.5)
        gh.check(not pending, "prometheus returns every family, each from its program's job: missing " + str(pending))
        mfu = float(query('koi_train_model_flops_utilization_ratio{job="train"}')[0]["value"][1])
        gh.check(0.0 < mfu <= 1.0, f"the trainer's MFU as Prometheus has it is a fraction: {mfu}")
        rate = query('rate(koi_train_tokens_total{job="train"}[5s])')
        gh.check(rate and float(rate[0]["value"][1]) > 0, "tokens/s from the counter's rate is positive")
        causes = {r["metric"].get("cause") for r in query('koi_cluster_restarts_total{job="cluster"}')}
        gh.check({"failure", "preempted"} <= causes, f"restarts by cause include failure and preempted: {causes}")
        victims = {r["metric"].get("queue") for r in query('koi_cluster_preemptions_total{job="cluster"}')}
        gh.check(victims == {"beta-q"}, f"preemptions by the victim's queue: {victims}")
        for name in DECLARED_ONLY:
            meta = json.loads(get(api + "metadata?metric=" + urllib.parse.quote(name.removesuffix("_total"))))["data"]
            meta.update(json.loads(get(api + "metadata?metric=" + urllib.parse.quote(name)))["data"])
            kind = "counter" if name.endswith("_total") else "gauge"
            gh.check(any(m["type"] == kind for ms in meta.values() for m in ms),
                     f"prometheus knows the family {name} (a {kind}) with no series yet")
    finally:
        prom.terminate()
        prom.wait(10)


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    if mode not in ("dashboard", "prometheus"):
        gh.fail("usage: observability.py dashboard|prometheus")
    env = gh.Env()
    cp = trainer = None
    try:
        cp, trainer, targets = start_all(env)
        if mode == "dashboard":
            dashboard_check(targets)
        else:
            prometheus_check(env, targets)
    finally:
        if trainer and trainer.poll() is None:
            trainer.terminate()
            trainer.wait(30)
        if cp:
            cp.cleanup()
        env.close()
    print("PASS")


if __name__ == "__main__":
    main()
