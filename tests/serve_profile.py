"""koi serve --profile: the Chrome trace of the engine is well-formed and nested
(tests/trace_check.py); it has one step span per step /metrics counts
(koi:engine_steps_total), each holding schedule, forward (with the model's embed, every layer
with its ops, and head), sample and update; the step spans sum to within 5% of
koi:engine_step_duration_seconds_sum, and each step's parts to within 5% of the step; every
request sent has a request span (waiting, prefill, decode) with the output tokens the client
received, and an "http request" span (parse, queued, respond) on an http track, with the id the
client got, ordered against its engine span: queued ends before the engine's request span begins,
respond begins after its first token and ends after the engine's span. A third of the requests
stream. The engine's parts the same for koi bench offline, koi bench model and koi bench serve
--in-process with --profile (and koi bench serve --url refuses --profile)."""
import concurrent.futures, json, os, re, signal, subprocess, sys, tempfile, urllib.request

import trace_check

KOI = os.environ.get("KOI_BIN", "build/koi")
SHARED = os.environ.get("KOI_SHARED_DIR", "/work/shared")
LAYERS = 5  # stories260K
OPS = ["qkv", "attention", "wo", "ffn up", "ffn down"]
REQUESTS = 12


def fail(msg):
    print("FAIL: " + msg, flush=True)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)
    print("ok: " + msg, flush=True)


def post(url, body):
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


def post_stream(url, body):
    """A streamed completion: its id and usage (from the usage chunk), as post() returns them."""
    body = dict(body, stream=True, stream_options={"include_usage": True})
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    out = {}
    with urllib.request.urlopen(req, timeout=60) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("data: {"):
                chunk = json.loads(line[6:])
                out["id"] = chunk["id"]
                if chunk.get("usage"):
                    out["usage"] = chunk["usage"]
    return out


def check_http(roots, answers, requests, what):
    """One "http request" span per request, holding parse, queued and respond, on an http track,
    ordered against the engine's request span of the same id."""
    http = [e for e in roots if e["name"] == "http request"]
    engine_by_id = {r["args"]["id"]: r for r in requests}
    slack = 0.002  # us: timestamps are printed to 1 ns
    for h in http:
        parts = [c["name"] for c in h["children"]]
        if parts != ["parse", "queued", "respond"]:
            fail(f"{what}: http request {h['args']['id']} holds {parts}")
        if h["tid"] < 10000 or h["args"]["status"] != 200:
            fail(f"{what}: http request {h['args']} on track {h['tid']}")
        parse, queued, respond = h["children"]
        r = engine_by_id.get(h["args"]["id"] + "-0")
        if r is None:
            fail(f"{what}: http request {h['args']['id']} has no engine request span")
        prefill_end = r["children"][1]["ts"] + r["children"][1]["dur"]
        if not (queued["ts"] + queued["dur"] <= r["ts"] + slack and respond["ts"] + slack >= prefill_end
                and respond["ts"] + respond["dur"] + slack >= r["ts"] + r["dur"]):
            fail(f"{what}: http request {h['args']['id']}: queued ends {queued['ts'] + queued['dur']}, engine span "
                 f"{r['ts']}..{r['ts'] + r['dur']} (first token {prefill_end}), respond from {respond['ts']}")
    ids = sorted(h["args"]["id"] for h in http)
    check(ids == sorted(a["id"] for a in answers),
          f"{what}: {len(http)} http request spans, one per request with the id the client got, each parse, queued "
          "and respond, ordered against the engine's request span")
    streamed = sum(1 for h in http if h["args"]["stream"])
    check(streamed == sum(1 for i in range(REQUESTS) if i % 3 == 0), f"{what}: {streamed} of them streamed")


def metric(text, name):
    m = re.search(r"^" + re.escape(name) + r"(?:\{[^}]*\})? (\S+)$", text, re.M)
    if not m:
        fail(f"/metrics has no {name}")
    return float(m.group(1))


def check_steps(events, roots, what):
    """The engine's step spans and their parts; returns them."""
    steps = [e for e in roots if e["name"] == "step" and e["tid"] == 0]
    check(len(steps) > 0, f"{what}: {len(steps)} step spans")
    for s in steps:
        parts = [c["name"] for c in s["children"]]
        if parts != ["schedule", "forward", "sample", "update"]:
            fail(f"{what}: step {s['args']['step']} holds {parts}")
        covered = sum(c["dur"] for c in s["children"])
        if abs(covered - s["dur"]) > 0.05 * s["dur"]:
            fail(f"{what}: step {s['args']['step']}: its parts cover {covered:.3f} us of {s['dur']:.3f} us")
        forward = s["children"][1]
        inside = [c["name"] for c in forward["children"]]
        want = ["embed", "rope angles"] + [f"layer {l}" for l in range(LAYERS)] + ["head"]
        if inside != want:
            fail(f"{what}: step {s['args']['step']}: forward holds {inside}, want {want}")
        for layer in forward["children"][2:-1]:
            ops = [c["name"] for c in layer["children"]]
            if ops != OPS:
                fail(f"{what}: step {s['args']['step']}: {layer['name']} holds {ops}, want {OPS}")
    check(True, f"{what}: every step holds schedule, forward (embed, rope angles, {LAYERS} layers of {', '.join(OPS)}, head), "
          "sample and update, and its parts cover it within 5%")
    return steps


def check_requests(roots, want, what):
    """want: {request count, or output tokens by nothing}: every request span has its phases."""
    requests = [e for e in roots if e["name"] == "request"]
    for r in requests:
        phases = [c["name"] for c in r["children"]]
        if phases != ["waiting", "prefill", "decode"]:
            fail(f"{what}: request {r['args']['id']} holds {phases}")
        if r["tid"] == 0:
            fail(f"{what}: request {r['args']['id']} is on the steps' track")
    check(len(requests) == want, f"{what}: {len(requests)} request spans, want {want}, each waiting, prefill, decode")
    return requests


def serve(root, gguf):
    profile = os.path.join(root, "serve.json")
    err = open(os.path.join(root, "serve.err"), "w+")
    p = subprocess.Popen([KOI, "serve", "--model", gguf, "--port", "0", "--served-model-name", "stories",
                          "--profile", profile], stdout=subprocess.PIPE, stderr=err, text=True)
    try:
        line = p.stdout.readline()
        if "listening on" not in line:
            p.wait()
            err.seek(0)
            fail("koi serve did not start: " + err.read())
        url = line.split("listening on ")[1].strip()
        bodies = [{"model": "stories", "prompt": "Once upon a time" + " there was" * (i % 4), "max_tokens": 8 + 4 * i,
                   "temperature": 0} for i in range(REQUESTS)]
        with concurrent.futures.ThreadPoolExecutor(REQUESTS) as pool:
            answers = list(pool.map(lambda ib: (post_stream if ib[0] % 3 == 0 else post)(url, ib[1]),
                                    enumerate(bodies)))
        with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
            prom = r.read().decode()
        p.send_signal(signal.SIGTERM)
        code = p.wait(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    err.seek(0)
    stderr = err.read()
    check(code == 0, f"koi serve exited {code} after SIGTERM")
    check(re.search(r"profile: \d+ spans in " + re.escape(profile), stderr) is not None, "koi serve names the profile")
    try:
        events, roots = trace_check.check(profile)
    except trace_check.TraceError as e:
        fail("koi serve's profile is not a well-formed, nested trace: " + str(e))
    check(True, f"koi serve's profile is well-formed and nested ({len(events)} spans)")
    steps = check_steps(events, roots, "serve")
    counted = metric(prom, "koi:engine_steps_total")
    check(len(steps) == counted, f"{len(steps)} step spans, koi:engine_steps_total {counted:g}")
    total_s = metric(prom, "koi:engine_step_duration_seconds_sum")
    spans_s = sum(s["dur"] for s in steps) / 1e6
    check(abs(spans_s - total_s) <= 0.05 * total_s,
          f"the step spans sum to {spans_s:.6f} s, koi:engine_step_duration_seconds_sum is {total_s:.6f} s")
    forward_s = metric(prom, "koi:engine_step_forward_seconds_sum")
    spans_fwd = sum(s["children"][1]["dur"] for s in steps) / 1e6
    check(abs(spans_fwd - forward_s) <= 0.05 * forward_s,
          f"the forward spans sum to {spans_fwd:.6f} s, koi:engine_step_forward_seconds_sum is {forward_s:.6f} s")
    requests = check_requests(roots, REQUESTS, "serve")
    got = sorted(a["usage"]["completion_tokens"] for a in answers)
    traced = sorted(r["args"]["output_tokens"] for r in requests)
    check(got == traced, f"the request spans' output tokens {traced} are what the clients received")
    prompts = sorted(a["usage"]["prompt_tokens"] for a in answers)
    check(prompts == sorted(r["args"]["prompt_tokens"] for r in requests), "and their prompt tokens")
    check_http(roots, answers, requests, "serve")


def bench(root, gguf):
    profile = os.path.join(root, "bench.json")
    r = subprocess.run([KOI, "bench", "offline", "-m", gguf, "--concurrency", "1,4", "--input-len", "16",
                        "--output-len", "8", "--kv-cache-memory", "64MiB", "--profile", profile],
                       capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        fail("koi bench offline failed: " + r.stderr)
    check(re.search(r"profile: \d+ spans in " + re.escape(profile), r.stderr) is not None,
          "koi bench offline names the profile")
    try:
        events, roots = trace_check.check(profile)
    except trace_check.TraceError as e:
        fail("koi bench offline's profile is not a well-formed, nested trace: " + str(e))
    check_steps(events, roots, "bench offline")
    check_requests(roots, 4 + 8, "bench offline")  # max(4, 2 x concurrency) per level


def bench_model(root, gguf):
    profile = os.path.join(root, "bench-model.json")
    r = subprocess.run([KOI, "bench", "model", "-m", gguf, "-p", "32", "-n", "8", "-r", "1", "-t", "1",
                        "--profile", profile], capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        fail("koi bench model failed: " + r.stderr)
    try:
        events, roots = trace_check.check(profile)
    except trace_check.TraceError as e:
        fail("koi bench model's profile is not a well-formed, nested trace: " + str(e))
    steps = check_steps(events, roots, "bench model")
    # Two repetitions (the warm-up and one measured) of pp (one step) and tg (8 steps).
    check(len(steps) == 2 * (1 + 8), f"bench model: {len(steps)} steps, 2 x (pp 1 + tg 8)")
    requests = sorted((q["args"]["prompt_tokens"], q["args"]["output_tokens"]) for q in roots if q["name"] == "request")
    check(requests == [(1, 8), (1, 8), (32, 1), (32, 1)], f"bench model: request spans (prompt, output tokens) {requests}")


def bench_serve(root, gguf):
    profile = os.path.join(root, "bench-serve.json")
    r = subprocess.run([KOI, "bench", "serve", "--in-process", gguf, "--num-prompts", "6", "--input-len", "16",
                        "--output-len", "8", "--max-concurrency", "3", "--profile", profile],
                       capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        fail("koi bench serve --in-process failed: " + r.stderr)
    try:
        events, roots = trace_check.check(profile)
    except trace_check.TraceError as e:
        fail("koi bench serve's profile is not a well-formed, nested trace: " + str(e))
    check_steps(events, roots, "bench serve")
    requests = check_requests(roots, 6, "bench serve")
    check(sorted(q["args"]["output_tokens"] for q in requests) == [8] * 6, "bench serve: 8 output tokens each")
    r = subprocess.run([KOI, "bench", "serve", "--url", "http://127.0.0.1:9", "--profile", profile],
                       capture_output=True, text=True, timeout=60)
    check(r.returncode != 0 and "use it with --in-process" in r.stderr,
          "koi bench serve --url refuses --profile: " + r.stderr.strip())


def main():
    root = tempfile.mkdtemp(prefix="koi-serve-profile-")
    gguf = os.path.join(root, "stories.gguf")
    subprocess.run([KOI, "--log-level", "warn", "convert", "--llama2c",
                    os.path.join(SHARED, "models", "stories260K", "stories260K.bin"), "--tokenizer",
                    os.path.join(SHARED, "models", "stories260K", "tok512.bin"), "-o", gguf],
                   check=True, stdout=subprocess.DEVNULL)
    r = subprocess.run([KOI, "serve", "--model", gguf, "--profile", os.path.join(root, "no", "such", "dir", "t.json")],
                       capture_output=True, text=True, timeout=60)
    check(r.returncode != 0 and "--profile" in r.stderr, "an unwritable --profile fails at start: " + r.stderr.strip())
    serve(root, gguf)
    bench(root, gguf)
    bench_model(root, gguf)
    bench_serve(root, gguf)
    print("PASS")


if __name__ == "__main__":
    main()
