"""koi train --profile: the Chrome trace is well-formed and its spans nest (tests/trace_check.py),
every step holds forward and backward for each micro-batch, the collectives, gradient
clipping and the optimizer, checkpoints and evaluations appear, and each step's span is
within 5% of the step time the metrics report (metrics.jsonl's step_ms, and the sum of
koi_train_step_duration_seconds in metrics.prom). The checker itself is shown a broken trace."""
import json, os, re, subprocess, sys, tempfile

import trace_check

KOI = os.environ.get("KOI_BIN", "build/koi")
SHARED = os.environ.get("KOI_SHARED_DIR", "/work/shared")
STEPS, ACCUM = 60, 2


def fail(msg):
    print("FAIL: " + msg, flush=True)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)
    print("ok: " + msg, flush=True)


def main():
    root = tempfile.mkdtemp(prefix="koi-profile-")
    corpus = os.path.join(root, "corpus.txt")
    with open(os.path.join(SHARED, "data", "tinyshakespeare.txt"), "rb") as f, open(corpus, "wb") as out:
        out.write(f.read(60000))
    recipe = os.path.join(root, "r.yaml")
    with open(recipe, "w") as f:
        f.write(f"""model: {{dim: 32, layers: 2, heads: 4, kv_heads: 2, ffn_dim: 64, context: 16}}
data: {{text: {corpus}, tokenizer: char}}
train: {{batch_size: 4, steps: {STEPS}, grad_accum: {ACCUM}, lr: 3.0e-3, warmup_steps: 5, seed: 7,
        checkpoint_interval: 20, eval_interval: 30, eval_iters: 2, log_interval: 10, out: {root}/run}}
""")
    profile = os.path.join(root, "trace.json")
    r = subprocess.run([KOI, "train", "--config", recipe, "--threads", "1", "--profile", profile],
                       capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        fail("koi train failed: " + r.stderr)
    check(re.search(r"profile: \d+ spans in " + re.escape(profile), r.stderr) is not None, "koi train names the profile")

    try:
        trace_check.check({"traceEvents": [{"ph": "X", "name": "a", "pid": 0, "tid": 0, "ts": 0, "dur": 10},
                                           {"ph": "X", "name": "b", "pid": 0, "tid": 0, "ts": 5, "dur": 10}]})
        fail("the checker accepted overlapping spans that do not nest")
    except trace_check.TraceError as e:
        check("without nesting" in str(e), "the checker rejects a span overlapping another: " + str(e))

    try:
        events, roots = trace_check.check(profile)
    except trace_check.TraceError as e:
        fail("the profile is not a well-formed, nested trace: " + str(e))
    check(True, f"the profile is well-formed and nested ({len(events)} spans)")
    steps = [e for e in roots if e["name"] == "step" and e["tid"] == 0]
    check(len(steps) == STEPS, f"{len(steps)} top-level step spans, want {STEPS}")
    for s in steps:
        names = [c["name"] for c in s["children"]]
        want = ["forward", "backward"] * ACCUM + ["allreduce grads", "allreduce loss and step times", "clip grad norm",
                                                 "optimizer"]
        if names != want:
            fail(f"step {s['args']['step']} holds {names}, want {want}")
        for part in s["children"][:2 * ACCUM]:
            layers = [c["name"] for c in part["children"]]
            want_layers = ["layer 0", "layer 1", "head"] if part["name"] == "forward" else ["head", "layer 1", "layer 0"]
            if layers != want_layers:
                fail(f"step {s['args']['step']}: {part['name']} holds {layers}, want {want_layers}")
        if sum(c["dur"] for c in s["children"]) > s["dur"]:
            fail(f"step {s['args']['step']}: its children last longer than it")
    check(True, "every step holds forward/backward per micro-batch (each with its layers and head), the collectives, "
          "clipping and the optimizer")
    top = {e["name"] for e in roots}
    check({"checkpoint snapshot", "evaluate"} <= top, f"checkpoint snapshots and evaluations are spans: {sorted(top)}")
    writes = [e for e in events if e["name"] == "checkpoint write" and e["tid"] == 1]
    check(len(writes) == STEPS // 20, f"{len(writes)} checkpoint writes on the writer's track, want {STEPS // 20}")

    step_ms = {}
    with open(os.path.join(root, "run", "metrics.jsonl")) as f:
        for line in f:
            m = json.loads(line)
            if "step_ms" in m:
                step_ms[m["step"]] = m["step_ms"]
    worst = 0.0
    for s in steps:
        want = step_ms[s["args"]["step"]] * 1e3
        worst = max(worst, abs(s["dur"] - want) / want)
    check(worst <= 0.05, f"every step span is within 5% of metrics.jsonl's step_ms (worst {worst:.2%})")
    prom = open(os.path.join(root, "run", "metrics.prom")).read()
    total_s = float(re.search(r"^koi_train_step_duration_seconds_sum (\S+)$", prom, re.M).group(1))
    spans_s = sum(s["dur"] for s in steps) / 1e6
    check(abs(spans_s - total_s) <= 0.05 * total_s,
          f"the step spans sum to {spans_s:.4f} s, koi_train_step_duration_seconds_sum is {total_s:.4f} s")
    print("PASS")


if __name__ == "__main__":
    main()
