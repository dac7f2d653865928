"""kv_events routing through koi gateway to two real `koi serve --kv-events` replicas with a
small KV cache: the gateway's exact index (GET /admin/kv_index) equals what each replica's
GET /kv/snapshot says after requests, after an eviction burst and after a replica is killed
and restarted on its port (a new epoch: the gateway resyncs from the snapshot); a repeated
prefix goes to the replica holding it, and the gateway's predicted hit tokens equal the
cached_tokens the replicas report, also for a chat request whose template renders its tools."""
import json, os, re, time
from gateway_harness import *

BLOCK = 16


def tokens(seed, n):
    """n token ids in [5, 500) (stories260K's vocabulary is 512), fixed by seed."""
    x, out = seed * 7919 + 13, []
    for _ in range(n):
        x = (x * 1103515245 + 12345) % (1 << 31)
        out.append(5 + x % 495)
    return out


def snapshot(replica):
    status, text, _ = call(replica.url + "/kv/snapshot")
    if status != 200:
        fail(f"{replica.name} /kv/snapshot: {status} {text}")
    return json.loads(text)


def wait_index_equals_snapshots(gw, replicas, what):
    """The index must reach the replicas' own view once they are idle (the gateway polls
    every 10 ms); compares hash sets and event numbers exactly."""
    deadline, diff = time.time() + 10, ""
    while time.time() < deadline:
        index = admin(gw, "GET", "/admin/kv_index")["replicas"]
        diff = ""
        for r in replicas:
            snap, got = snapshot(r), index.get(r.url, {})
            if not got.get("synced") or got["epoch"] != snap["epoch"] or got["last"] != snap["last"]:
                diff += f" {r.name}: index at {got.get('epoch')}/{got.get('last')}, replica at {snap['epoch']}/{snap['last']};"
            elif sorted(got["hashes"]) != sorted(snap["hashes"]):
                diff += f" {r.name}: {len(got['hashes'])} hashes in the index, {len(snap['hashes'])} on the replica;"
        if not diff:
            total = sum(len(index[r.url]["hashes"]) for r in replicas)
            check(True, f"{what}: the index equals both replicas' snapshots ({total} blocks)")
            return index
        time.sleep(0.05)
    fail(f"{what}: the index never matched the snapshots:{diff}")


def complete_ids(gw, key, ids):
    status, text, _ = call(gw.url + "/v1/completions",
                           {"model": "stories", "prompt": ids, "max_tokens": 2, "temperature": 0}, key)
    if status != 200:
        fail(f"completion: {status} {text}")
    return json.loads(text)["usage"]


TOOLS_FIRST_TEMPLATE = (
    "{% if tools %}<|im_start|>system\nYou may call these tools:\n{% for tool in tools %}{{ tool | tojson }}\n"
    "{% endfor %}<|im_end|>\n{% endif %}"
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")

TOOLS = [{"type": "function", "function": {
    "name": f"lookup_{i}", "description": "Looks up the weather of a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}
    for i in range(2)]


def chat_with_tools(url, key, question):
    status, text, _ = call(url + "/v1/chat/completions",
                           {"model": "stories", "messages": [{"role": "user", "content": question}],
                            "tools": TOOLS, "max_tokens": 2, "temperature": 0}, key)
    if status != 200:
        fail(f"chat with tools at {url}: {status} {text}")
    return json.loads(text)["usage"]


def check_chat_with_tools(gw, key, r1, r2):
    """The tools are rendered first, so two chats with the same tools share many blocks. The
    first goes to r2 directly; the second, through the gateway, must be predicted to hit r2's
    blocks of the tools (the prediction tokenizes messages AND tools), routed there and hit
    exactly as predicted. Without the tools the prediction matches nothing and r1 is picked by
    load."""
    first = chat_with_tools(r2.url, None, "What is the weather in Paris today?")
    wait_index_equals_snapshots(gw, [r1, r2], "after a chat with tools straight to r2")
    before = hit_metrics(gw)
    usage = chat_with_tools(gw.url, key, "Is it raining in Rome tomorrow?")
    after = hit_metrics(gw)
    predicted, actual = after["predicted"] - before["predicted"], after["actual"] - before["actual"]
    check(first["prompt_tokens"] > 8 * BLOCK and actual >= 6 * BLOCK and predicted == actual
          and usage["prompt_tokens_details"]["cached_tokens"] == actual,
          f"a chat with tools is predicted as it hits: predicted {predicted}, actual {actual} tokens of "
          f"{usage['prompt_tokens']}")
    wait_index_equals_snapshots(gw, [r1, r2], "after a chat with tools through the gateway")


def hit_metrics(gw):
    _, text, _ = call(gw.url + "/metrics")
    sums = {"predicted": 0.0, "actual": 0.0}
    for m in re.finditer(r'^koi_gateway_kv_hit_tokens_total\{[^}]*kind="(\w+)"\} (\S+)$', text, re.M):
        sums[m.group(1)] += float(m.group(2))
    return sums


env = Env()
try:
    # 1 MiB of KV is 51 blocks of 16 tokens for stories260K (20 KiB a block): evictions come fast.
    # The chat template writes the request's tools before the messages (as Qwen's and Hermes' do).
    template = os.path.join(env.dir, "tools_first.jinja")
    with open(template, "w") as f:
        f.write(TOOLS_FIRST_TEMPLATE)
    extra = ("--kv-events", "--kv-cache-memory", "1MiB", "--chat-template", template)
    r1, r2 = env.replica("r1", extra=extra), env.replica("r2", extra=extra)
    text = config({"v1": (100, [r1.url, r2.url])}, os.path.join(env.dir, "ledger.db"),
                  extra="routing: {policy: round_robin, kv_events_poll_ms: 10, cache_threshold: 0.5}\n")
    text = text.replace("  - name: stories\n", "  - name: stories\n    routing: kv_events\n")
    gw = env.gateway(text)
    key = new_key(gw)
    wait_index_equals_snapshots(gw, [r1, r2], "at start")

    # A conversation's first turn is sent to r2 directly (with no match the gateway would pick
    # the first replica, r1, by load); its later turns through the gateway must follow it there.
    system = tokens(1, 6 * BLOCK)
    status, body, _ = call(r2.url + "/v1/completions",
                           {"model": "stories", "prompt": system + tokens(2, 5), "max_tokens": 2, "temperature": 0})
    check(status == 200 and json.loads(body)["usage"]["prompt_tokens_details"]["cached_tokens"] == 0,
          "the first turn, straight to r2, hits nothing")
    index = wait_index_equals_snapshots(gw, [r1, r2], "after the first turn")
    holders = [r for r in (r1, r2) if len(index[r.url]["hashes"]) >= 6]
    check([r.name for r in holders] == ["r2"], f"r2 alone holds the conversation ({[r.name for r in holders]})")
    for turn in range(3):
        usage = complete_ids(gw, key, system + tokens(10 + turn, 7))
        check(usage["prompt_tokens_details"]["cached_tokens"] == 6 * BLOCK,
              f"turn {turn + 2} was routed to {holders[0].name} and hit its 6 cached blocks ({usage})")
        wait_index_equals_snapshots(gw, [r1, r2], f"after turn {turn + 2}")
    # Text prompts are tokenized by a replica's /tokenize and hashed the same way.
    story = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. " * 2
    for i in range(2):
        status, body, _ = call(gw.url + "/v1/completions",
                               {"model": "stories", "prompt": story + str(i), "max_tokens": 2, "temperature": 0}, key)
        check(status == 200, f"text prompt {i} succeeds ({status})")
        wait_index_equals_snapshots(gw, [r1, r2], f"after text prompt {i}")
    cached = json.loads(body)["usage"]["prompt_tokens_details"]["cached_tokens"]
    check(cached >= 2 * BLOCK, f"the repeated text prefix hit the replica holding it ({cached} tokens)")
    check_chat_with_tools(gw, key, r1, r2)
    sums = hit_metrics(gw)
    check(sums["predicted"] == sums["actual"] and sums["actual"] >= 3 * 6 * BLOCK + 2 * BLOCK,
          f"predicted hit tokens equal the replicas' cached_tokens when the index is in step ({sums})")

    # An eviction burst: 24 distinct 5-block prompts through the gateway, 4 at a time (the
    # gateway spreads them by load, not necessarily evenly), and 12 more straight to each
    # replica at the same time (12 x 6 blocks > 51 each, so both evict), through 2 x 51 blocks.
    import concurrent.futures

    def straight_to(r, name, first):
        for i in range(12):
            status, body, _ = call(r.url + "/v1/completions",
                                   {"model": "stories", "prompt": tokens(first + i, 5 * BLOCK + 3), "max_tokens": 2})
            if status != 200:
                fail(f"{name}: {status} {body}")

    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        direct = [pool.submit(straight_to, r1, "r1", 300), pool.submit(straight_to, r2, "r2", 200)]
        list(pool.map(lambda i: complete_ids(gw, key, tokens(100 + i, 5 * BLOCK + 3)), range(24)))
        for d in direct:
            d.result()
    removed = sum(1 for r in (r1, r2) if snapshot(r)["last"] > len(snapshot(r)["hashes"]))
    check(removed == 2, "both replicas evicted blocks (more events than blocks held)")
    wait_index_equals_snapshots(gw, [r1, r2], "after the eviction burst")

    # A replica killed and restarted on its port: new epoch, numbers from 1 again.
    victim = holders[0]
    port = victim.url.rsplit(":", 1)[1]
    old_epoch = snapshot(victim)["epoch"]
    victim.kill9()
    env.procs.remove(victim)
    deadline = time.time() + 5
    while time.time() < deadline and admin(gw, "GET", "/admin/kv_index")["replicas"][victim.url]["synced"]:
        time.sleep(0.05)
    check(not admin(gw, "GET", "/admin/kv_index")["replicas"][victim.url]["synced"],
          "a killed replica drops out of the index (it holds nothing for routing)")
    restarted = env.replica(victim.name + "-restarted", port=int(port), extra=extra)
    others = [r for r in (r1, r2) if r is not victim]
    wait_index_equals_snapshots(gw, others + [restarted], "after the restart")
    check(snapshot(restarted)["epoch"] != old_epoch, "the restarted replica has a new epoch")
    time.sleep(1.5)  # the breaker (open_ms 1000) lets it back in
    for turn in range(2):
        complete_ids(gw, key, system + tokens(50 + turn, 4))
    wait_index_equals_snapshots(gw, others + [restarted], "after requests to the restarted fleet")
    print("PASS")
finally:
    env.close()
