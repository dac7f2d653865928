#!/usr/bin/env python3
"""Multi-LoRA serving end to end (issue 19, Must show 1) on stories260K.

Three LoRA adapters are trained by `koi train --lora-rank` (different texts, seeds, ranks and
targets, so they differ) and each is exported twice: merged into the weights (GGUF) and as a
PEFT directory. One `koi serve` serves the base and the three adapters (--lora NAME=DIR);
four reference servers serve the base and each merged model alone. Then:

1. Requests for all four models, mixed and concurrent, give greedy output identical to the
   model's reference server, twice (the second round hits the prefix cache, keyed by
   adapter), and the engine's koi:engine_step_batch_models histogram shows steps whose
   batch held two or more models.
2. Under a steady load of requests for the base and two adapters, an adapter is loaded at
   run time (POST /v1/load_lora_adapter), served, listed by /v1/models, and unloaded
   (POST /v1/unload_lora_adapter) while a long stream of it is in flight: every request
   of the load and the stream finish with 200 and the exact reference text; after unloading,
   the name is a 404 and /v1/models no longer lists it.
3. Through `koi gateway` (route "base" over the multi-LoRA replica and a plain base replica),
   requests naming an adapter reach only the replica that serves it (the gateway learns the
   adapters from each replica's /v1/models) and give the merged model's output.

  serve_lora.py <koi> <shared dir>
"""
import concurrent.futures as futures
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

KOI, SHARED = sys.argv[1], sys.argv[2]
STORIES = f"{SHARED}/models/stories260K"
PROMPTS = [
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her friends",
    "One day, a big dog ran into the garden and saw a red ball under the tree. The dog",
    "Tom and Sue went to the beach. They wanted to build a big castle out of sand, but",
    "The king had a golden crown.",
    "Ben was sad because his toy car was broken. His mom said",
    "In a small town there lived an old man who liked to bake bread every morning for the children",
]
MAX_TOKENS = 48
# (name, text slice of tinyshakespeare, seed, rank, alpha, targets)
ADAPTERS = [
    ("poet", (0, 40000), 1, 4, 8, "[q, v]"),
    ("sailor", (300000, 340000), 2, 8, 16, "[q, k, v, o, gate, up, down]"),
    ("judge", (700000, 740000), 3, 16, 16, "[o, gate, up, down]"),
]


def fail(msg):
    sys.exit("FAIL: " + msg)


def request(url, body, method="POST"):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            raw = r.read()
            return r.status, raw
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def complete(url, model, prompt, max_tokens=MAX_TOKENS):
    status, raw = request(url + "/v1/completions",
                          {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0})
    if status != 200:
        return status, raw.decode()
    r = json.loads(raw)
    if r["model"] != model:
        fail(f"response names model {r['model']}, asked for {model}")
    return status, r["choices"][0]["text"]


def start(work, name, args):
    out = open(os.path.join(work, name + ".out"), "w+")
    err = open(os.path.join(work, name + ".err"), "w+")
    proc = subprocess.Popen([KOI, "serve", "--port", "0", "--kv-cache-memory", "32MiB", "--threads", "1"] + args,
                            stdout=out, stderr=err)
    return proc, out, err


def wait_listening(servers):
    urls = {}
    deadline = time.time() + 60
    while len(urls) < len(servers):
        for name, (proc, out, err) in servers.items():
            if name in urls:
                continue
            out.seek(0)
            text = out.read()
            if "listening on" in text:
                urls[name] = "http://" + text.split("listening on http://")[1].split()[0]
            elif proc.poll() is not None:
                err.seek(0)
                fail(f"server {name} exited at start:\n{err.read()}")
        if time.time() > deadline:
            fail("servers did not start")
        time.sleep(0.05)
    return urls


def train_adapters(work, base):
    text = open(f"{SHARED}/data/tinyshakespeare.txt").read()
    procs = []
    for name, (lo, hi), seed, rank, alpha, targets in ADAPTERS:
        with open(os.path.join(work, name + ".txt"), "w") as f:
            f.write(text[lo:hi])
        with open(os.path.join(work, name + ".yaml"), "w") as f:
            f.write(f"model: {{init_from: {base}}}\n"
                    f"data: {{text: {work}/{name}.txt}}\n"
                    f"train: {{batch_size: 4, seq_len: 32, steps: 25, lr: 2.0e-2, min_lr: 2.0e-3, warmup_steps: 2,\n"
                    f"        seed: {seed}, log_interval: 0, eval_iters: 0, lora_alpha: {alpha},\n"
                    f"        lora_targets: {targets}, out: {work}/run-{name}}}\n")
        log = open(os.path.join(work, name + ".train"), "w")
        procs.append((name, subprocess.Popen([KOI, "train", "--config", f"{work}/{name}.yaml", "--lora-rank",
                                              str(rank), "--threads", "1"], stdout=log, stderr=subprocess.STDOUT)))
    for name, p in procs:
        if p.wait() != 0:
            fail(f"training {name} failed:\n" + open(os.path.join(work, name + ".train")).read())
    for name, *_ in ADAPTERS:
        subprocess.run([KOI, "train", "export", f"{work}/run-{name}", "-o", f"{work}/{name}.gguf", "--adapter",
                        f"{work}/{name}-peft"], check=True, stdout=subprocess.DEVNULL)


def metric_sum(text, prefix):
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(prefix))


def check_mixed(urls):
    models = ["base"] + [name for name, *_ in ADAPTERS]
    refs = {}
    for model in models:
        ref_url = urls["ref-" + model]
        for prompt in PROMPTS:
            status, out = complete(ref_url, "m", prompt)
            if status != 200:
                fail(f"reference {model}: HTTP {status}: {out}")
            refs[(model, prompt)] = out
    for prompt in PROMPTS:
        if len({refs[(m, prompt)] for m in models}) < 3:
            fail(f"the adapters barely differ on {prompt!r}: {[refs[(m, prompt)] for m in models]}")
    jobs = [(m, p) for p in PROMPTS for m in models]
    for round_idx in range(2):
        with futures.ThreadPoolExecutor(len(jobs)) as pool:
            results = list(pool.map(lambda job: complete(urls["multi"], *job), jobs))
        for (model, prompt), (status, out) in zip(jobs, results):
            if status != 200:
                fail(f"round {round_idx}: {model}: HTTP {status}: {out}")
            if out != refs[(model, prompt)]:
                fail(f"round {round_idx}: {model} on {prompt!r}:\n  multi-LoRA: {out!r}\n  merged:     "
                     f"{refs[(model, prompt)]!r}")
    _, raw = request(urls["multi"] + "/metrics", None, "GET")
    metrics = raw.decode()
    steps = metric_sum(metrics, "koi:engine_step_batch_models_count")
    single = metric_sum(metrics, 'koi:engine_step_batch_models_bucket{model_name="base",le="1"}')
    if steps - single < 1:
        fail(f"no engine step mixed models ({steps} steps, {single} with one model):\n{metrics}")
    print(f"mixed: {len(jobs)} requests x 2 rounds identical to the merged models; {steps - single:.0f} of "
          f"{steps:.0f} engine steps held 2+ models")
    return refs


def stream_tokens(url, model, prompt, max_tokens, on_first):
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True}
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    text, first = "", True
    with urllib.request.urlopen(req, timeout=120) as r:
        for line in r:
            line = line.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            text += chunk["choices"][0]["text"]
            if first:
                first = False
                on_first()
    return text


def check_load_unload(urls, work, refs):
    multi = urls["multi"]
    stop = threading.Event()
    failures, done = [], [0]
    load_models = ["base", "poet", "judge"]

    def load_loop(worker):
        i = worker
        while not stop.is_set():
            model, prompt = load_models[i % 3], PROMPTS[i % len(PROMPTS)]
            status, out = complete(multi, model, prompt)
            if status != 200 or out != refs[(model, prompt)]:
                failures.append(f"{model} under load: HTTP {status}: {out!r}")
            done[0] += 1
            i += 1

    workers = [threading.Thread(target=load_loop, args=(w,)) for w in range(4)]
    for w in workers:
        w.start()
    time.sleep(0.3)
    # Load "sailor2" (sailor's adapter under a new name) and use it.
    status, raw = request(multi + "/v1/load_lora_adapter", {"lora_name": "sailor2", "lora_path": f"{work}/sailor-peft"})
    if status != 200 or b"added successfully" not in raw:
        fail(f"load_lora_adapter: HTTP {status}: {raw!r}")
    _, raw = request(multi + "/v1/models", None, "GET")
    cards = {c["id"]: c for c in json.loads(raw)["data"]}
    if cards.get("sailor2", {}).get("parent") != "base" or cards.get("poet", {}).get("parent") != "base":
        fail(f"/v1/models does not list the adapters with parent base: {cards}")
    for prompt in PROMPTS[:3]:
        status, out = complete(multi, "sailor2", prompt)
        if status != 200 or out != refs[("sailor", prompt)]:
            fail(f"sailor2 loaded at run time: HTTP {status}: {out!r} != {refs[('sailor', prompt)]!r}")
    # A long stream of sailor2 in flight while it is unloaded: it finishes, exactly.
    long_tokens = 200
    _, ref_long = complete(urls["ref-sailor"], "m", PROMPTS[1], long_tokens)
    unloaded = []

    def unload():
        unloaded.append(request(multi + "/v1/unload_lora_adapter", {"lora_name": "sailor2"}))

    streamed = stream_tokens(multi, "sailor2", PROMPTS[1], long_tokens, unload)
    if not unloaded or unloaded[0][0] != 200 or b"removed successfully" not in unloaded[0][1]:
        fail(f"unload_lora_adapter: {unloaded}")
    if streamed != ref_long:
        fail(f"the stream in flight during the unload changed:\n  {streamed!r}\n  {ref_long!r}")
    status, raw = complete(multi, "sailor2", PROMPTS[0])
    if status != 404 or "does not exist" not in raw:
        fail(f"sailor2 after unloading: HTTP {status}: {raw}")
    _, raw = request(multi + "/v1/models", None, "GET")
    if "sailor2" in {c["id"] for c in json.loads(raw)["data"]}:
        fail("/v1/models still lists sailor2 after unloading")
    time.sleep(0.2)
    stop.set()
    for w in workers:
        w.join()
    if failures:
        fail(f"{len(failures)} requests under load failed, first: {failures[0]}")
    if done[0] < 8:
        fail(f"only {done[0]} requests ran under load")
    print(f"load/unload: {done[0]} requests under load and a 200-token stream across the unload, none failed")


def check_errors(multi, work):
    cases = [
        ({"lora_name": "poet", "lora_path": f"{work}/poet-peft"}, 400, "already loaded"),
        ({"lora_name": "x", "lora_path": f"{work}/nowhere"}, 400, "nowhere"),
        ({"lora_name": "x"}, 400, "lora_path"),
        ({"lora_name": "x", "lora_path": f"{work}/poet-peft", "load_inplace": True}, 400, "load_inplace"),
        ({"lora_name": "base", "lora_path": f"{work}/poet-peft"}, 400, "base model"),
    ]
    for body, want_status, want_text in cases:
        status, raw = request(multi + "/v1/load_lora_adapter", body)
        if status != want_status or want_text not in raw.decode():
            fail(f"load {body}: HTTP {status} {raw!r}, expected {want_status} naming {want_text!r}")
    status, raw = request(multi + "/v1/unload_lora_adapter", {"lora_name": "nobody"})
    if status != 404 or b"not loaded" not in raw:
        fail(f"unload of an unknown adapter: HTTP {status} {raw!r}")


def check_gateway(urls, work, refs):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import gateway_harness as gh
    cfg = gh.config({"v1": (100, [urls["multi"], urls["plain"]])}, f"{work}/ledger.db", model="base")
    with open(f"{work}/gateway.yaml", "w") as f:
        f.write(cfg)
    gw = gh.Proc([KOI, "gateway", "--config", f"{work}/gateway.yaml"], "gateway", work)
    try:
        key = gh.new_key(gw)
        deadline = time.time() + 20
        while True:  # until a health round has read the replicas' /v1/models
            status, text, _ = gh.call(gw.url + "/v1/completions", {"model": "poet", "prompt": PROMPTS[0],
                                      "max_tokens": MAX_TOKENS, "temperature": 0}, key)
            if status == 200 or time.time() > deadline:
                break
            time.sleep(0.2)
        for i in range(8):
            prompt = PROMPTS[i % len(PROMPTS)]
            for model in ("poet", "judge", "base"):
                status, text, _ = gh.call(gw.url + "/v1/completions", {"model": model, "prompt": prompt,
                                          "max_tokens": MAX_TOKENS, "temperature": 0}, key)
                if status != 200:
                    fail(f"gateway, {model}: HTTP {status}: {text}")
                out = json.loads(text)["choices"][0]["text"]
                if out != refs[(model, prompt)]:
                    fail(f"gateway, {model} on {prompt!r}: {out!r} != {refs[(model, prompt)]!r}")
        status, text, _ = gh.call(gw.url + "/v1/completions", {"model": "nobody", "prompt": "x"}, key)
        if status != 404:
            fail(f"gateway, unknown model: HTTP {status}: {text}")
        print("gateway: 16 adapter requests routed to the replica serving them, identical to the merged models")
    finally:
        gw.p.terminate()
        gw.p.wait()


def main():
    work = tempfile.mkdtemp(prefix="koi-lora-")
    servers = {}
    try:
        base = f"{work}/base.gguf"
        subprocess.run([KOI, "convert", "--llama2c", f"{STORIES}/stories260K.bin", "--tokenizer",
                        f"{STORIES}/tok512.bin", "-o", base], check=True, stdout=subprocess.DEVNULL)
        started = time.time()
        train_adapters(work, base)
        print(f"trained and exported {len(ADAPTERS)} adapters in {time.time() - started:.1f} s")
        loras = []
        for name, *_ in ADAPTERS:
            loras += ["--lora", f"{name}={work}/{name}-peft"]
        servers["multi"] = start(work, "multi", ["--model", base, "--served-model-name", "base",
                                                 "--max-num-seqs", "64", "--max-loras", "4"] + loras)
        servers["ref-base"] = start(work, "ref-base", ["--model", base, "--served-model-name", "m"])
        servers["plain"] = start(work, "plain", ["--model", base, "--served-model-name", "base"])
        for name, *_ in ADAPTERS:
            servers["ref-" + name] = start(work, "ref-" + name, ["--model", f"{work}/{name}.gguf",
                                                                 "--served-model-name", "m"])
        urls = wait_listening(servers)
        refs = check_mixed(urls)
        check_load_unload(urls, work, refs)
        check_errors(urls["multi"], work)
        check_gateway(urls, work, refs)
        print("PASS")
    finally:
        for proc, _, _ in servers.values():
            proc.terminate()
        for proc, _, _ in servers.values():
            proc.wait()
        subprocess.run(["rm", "-rf", work])


main()
