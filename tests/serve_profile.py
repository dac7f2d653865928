"""koi serve --profile: the Chrome trace of the engine is well-formed and nested
(tests/trace_check.py); it has one step span per step /metrics counts
(koi:engine_steps_total), each holding schedule, forward (with the model's embed, every layer
with its ops, and head), sample and update; the step spans sum to within 5% of
koi:engine_step_duration_seconds_sum, and each step's parts to within 5% of the step; every
request sent has a request span (waiting, prefill, decode) with the output tokens the client
received. The same for koi bench offline --profile."""
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
        want = ["embed"] + [f"layer {l}" for l in range(LAYERS)] + ["head"]
        if inside != want:
            fail(f"{what}: step {s['args']['step']}: forward holds {inside}, want {want}")
        for layer in forward["children"][1:-1]:
            ops = [c["name"] for c in layer["children"]]
            if ops != OPS:
                fail(f"{what}: step {s['args']['step']}: {layer['name']} holds {ops}, want {OPS}")
    check(True, f"{what}: every step holds schedule, forward (embed, {LAYERS} layers of {', '.join(OPS)}, head), "
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
            answers = list(pool.map(lambda b: post(url, b), bodies))
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
    print("PASS")


if __name__ == "__main__":
    main()
