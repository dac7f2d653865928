"""Prefill/decode disaggregation with sliding-window layers kept apart (issue 18): real
`koi serve --role prefill` and `--role decode` processes on tiny random models made here by
python3-torch (tests/reference/tiny_models.py), whose windows (5 and 6 positions) are far shorter
than the prompts: a Gemma 2-style model (windowed and global layers: both block tables) and a
Mistral-style one (every layer windowed: the window table only). Each request's KV, both tables
and only the window blocks the prefill worker holds, moves over TCP; greedy output must equal a
`--role both` engine's, cold, with prefix-cache hits on either side, and concurrently. (The
refusal of a peer with another split or protocol version is kv_wire_test's.)"""
import json, os, sys, threading
from gateway_harness import Env, call, check, fail

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "reference"))
import tiny_models  # noqa: E402

HEADER = "x-koi-prefill-peer"
# Lengths in tokens (a byte-level tokenizer with few merges: about one token a character).
TEXT = "the quick brown fox jumps over the lazy dog; pack my box with five dozen liquor jugs. "


def complete(url, prompt, peer=None, max_tokens=20):
    """(status, text, the top-3 logprobs of every step): a random tiny model's greedy text
    repeats itself, its log-probabilities show any difference in the KV it read."""
    body = {"model": "stories", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "logprobs": 3}
    status, text, _ = call(url + "/v1/completions", body, headers={HEADER: peer} if peer else {}, timeout=60)
    if status != 200:
        return status, text, None
    choice = json.loads(text)["choices"][0]
    return status, choice["text"], choice["logprobs"]["top_logprobs"]


def metric(proc, name):
    import re
    _, text, _ = call(proc.url + "/metrics")
    m = re.search(r"^" + re.escape(name) + r"(?:\{[^}]*\})? (\S+)$", text, re.M)
    return float(m.group(1)) if m else None


def make_model(env, name):
    spec = list(tiny_models.MODELS[name])
    spec[6] = max(spec[6], 288)  # room for the tokenizer's 256 bytes and 2 special tokens
    tiny_models.make(env.dir, name, spec, 1234 + list(tiny_models.MODELS).index(name))
    path = os.path.join(env.dir, name)
    tiny_models.write_byte_level_tokenizer(path, spec[6])
    return path


def check_model(env, name, block_size):
    model = make_model(env, name)
    flags = ["--block-size", str(block_size)]
    ref = env.replica(name + "-both", model=model, extra=flags)
    pre = env.replica(name + "-prefill", model=model, extra=["--role", "prefill", "--kv-port", "0", *flags])
    dec = env.replica(name + "-decode", model=model, extra=["--role", "decode", "--kv-transfer-timeout", "20", *flags])
    for role in ("prefill", "decode"):
        log = open(os.path.join(env.dir, f"{name}-{role}.log")).read()
        check("in blocks of their own" in log, f"{name}: the {role} worker keeps its windowed layers apart")
    prompts = [TEXT[:40], TEXT[:90], TEXT * 2, TEXT * 2 + "and again.", "ox"]
    want = {p: complete(ref.url, p) for p in prompts}
    check(all(w[0] == 200 for w in want.values()), f"{name}: the single engine answers")
    for p in prompts:
        got = complete(dec.url, p, pre.kv)
        check(got == want[p], f"{name}: disaggregated == one engine (text and top-3 logprobs of 20 steps), "
                              f"{len(p)} chars, window far shorter ({got[1][:40]!r} vs {want[p][1][:40]!r})")
    imports = metric(dec, "koi:kv_transfer_imports_total")
    check(imports == len(prompts) and metric(dec, "koi:kv_transfer_fallbacks_total") == 0,
          f"{name}: every request took its KV from the prefill worker, no fallback ({imports})")
    # Both caches warm: the decoder sends fewer blocks, the prefill worker hits its own cache
    # (its window blocks before the window are released and not sent).
    for p in prompts[2:4]:
        check(complete(dec.url, p, pre.kv) == want[p], f"{name}: prompt cached on both sides, still identical")
    fresh = env.replica(name + "-decode2", model=model, extra=["--role", "decode", *flags])
    check(complete(fresh.url, prompts[3], pre.kv) == want[prompts[3]], f"{name}: cold decode side, warm prefill side")
    results = {}
    many = [TEXT[: 30 + 23 * i] + str(i) for i in range(6)]
    want_many = {p: complete(ref.url, p) for p in many}
    threads = [threading.Thread(target=lambda p=p: results.__setitem__(p, complete(fresh.url, p, pre.kv))) for p in many]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    check(all(results[p] == want_many[p] for p in many), f"{name}: {len(many)} concurrent transfers, identical")
    check(metric(fresh, "koi:kv_transfer_fallbacks_total") == 0, f"{name}: no fallback under concurrency")


def main():
    env = Env()
    try:
        check_model(env, "gemma2_swa", 4)
        check_model(env, "mistral_swa", 16)
        print("PASS")
    finally:
        env.close()


if __name__ == "__main__":
    main()
