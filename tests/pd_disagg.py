"""Prefill/decode disaggregation end to end on stories260K (issue 16, Must show 1 and 2):
real `koi serve --role prefill` and `--role decode` processes moving KV over TCP, checked
token for token against a `--role both` engine; prefix-cache hits on either side; concurrent
requests through the gateway's split routing; an incompatible peer refused by name; kill -9
of the prefill worker during a transfer (the request completes by local prefill) and of a
decode worker (the gateway retries before the first byte) with no KV blocks left in use on
the prefill side. tests/pd_disagg_tinyllama.py kills workers with blocks in flight."""
import json, os, re, signal, sys, threading, time
from gateway_harness import Env, call, check, fail, config, new_key

HEADER = "x-koi-prefill-peer"
STORY = ("Once upon a time, there was a little girl named Lily. She loved to play outside in the park. "
         "One day, she saw a big, red ball. She wanted to play with it, but it was too high. ")


def complete(url, prompt, peer=None, max_tokens=24, stream=False, key=None, timeout=60):
    body = {"model": "stories", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0}
    if stream:
        body["stream"] = True
    status, text, _ = call(url + "/v1/completions", body, key, headers={HEADER: peer} if peer else {}, timeout=timeout)
    if status != 200:
        return status, text
    if not stream:
        return status, json.loads(text)["choices"][0]["text"]
    events = [l[6:] for l in text.split("\n") if l.startswith("data: ")]
    if not events or events[-1] != "[DONE]":
        return 599, text
    return status, "".join(json.loads(e)["choices"][0]["text"] for e in events[:-1])


def metric(proc, name):
    status, text, _ = call(proc.url + "/metrics")
    m = re.search(r"^" + re.escape(name) + r"(?:\{[^}]*\})? (\S+)$", text, re.M)
    return float(m.group(1)) if m else None


def wait_for(cond, what, timeout=10):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    fail("timed out waiting for " + what)


def prompts():
    out = [STORY * k + f"Chapter {k}." for k in (1, 2, 3)]
    out.append(STORY * 3 + "The end.")  # shares 3 stories with out[2]
    out.append("Lily")                   # shorter than one block
    return out


def check_long_poll(ev, last):
    """GET /kv/events?after=LAST&wait_ms=M holds the request until the engine publishes an event
    after LAST (then answers with it), or answers with no events after M ms."""
    status, text, _ = call(ev.url + f"/kv/events?after={last}&wait_ms=300")
    body = json.loads(text) if status == 200 else {}
    check(status == 200 and body["events"] == [] and body["last"] == last,
          f"a long poll with nothing new answers an empty list after wait_ms ({status} {text[:200]})")
    held = {}
    t = threading.Thread(target=lambda: held.update(
        zip(("status", "text"), call(ev.url + f"/kv/events?after={last}&wait_ms=60000", timeout=90)[:2])))
    t.start()
    time.sleep(0.5)
    check(t.is_alive(), "the long poll is held while the engine publishes nothing")
    complete(ev.url, "Tom had a small dog named Max. " * 6)  # new full blocks: stored events
    t.join(timeout=30)
    check(not t.is_alive(), "the held long poll returns once the completion publishes events (not after 60 s)")
    got = json.loads(held["text"]) if held.get("status") == 200 else {}
    stored = [e for e in got.get("events", []) if e["type"] == "stored"]
    check(stored and got["events"][0]["seq"] == last + 1,
          f"the held long poll answers with the new events from {last + 1} ({held.get('status')} {str(got)[:200]})")
    check(call(ev.url + "/kv/events?after=0&wait_ms=x")[0] == 400, "a bad ?wait_ms= is a 400")
    status, text, _ = call(ev.url + "/kv/events?after=0&wait_ms=60001")
    check(status == 400 and "at most 60000" in text, f"wait_ms over 60000 is a 400 that says the limit ({text[:200]})")
    check(call(ev.url + "/kv/events?after=0&wait=5")[0] == 400, "an unknown parameter is a 400")


def main():
    env = Env()
    try:
        ref = env.replica("both")
        pre = env.replica("prefill", extra=["--role", "prefill", "--kv-port", "0"])
        dec = env.replica("decode", extra=["--role", "decode", "--kv-transfer-timeout", "20"])
        check(pre.kv is not None, "the prefill worker prints its KV transfer address")
        expected = {p: complete(ref.url, p)[1] for p in prompts()}
        status, text = complete(ref.url, "Lily", pre.kv)
        check(status == 400 and "start it with --role decode" in text, "the peer header on a --role both server is a 400")
        status, text = complete(dec.url, "Lily", "nowhere")
        check(status == 400 and "x-koi-prefill-peer must be HOST:PORT" in text, "a malformed peer address is a 400")

        # 1. Exactness, one request at a time: cold on both sides, then with prefix-cache hits
        # on the prefill side (same prompt again on a fresh... decode cache also warm now).
        for p in prompts():
            check(complete(dec.url, p, pre.kv) == (200, expected[p]), f"disaggregated == one engine ({len(p)} chars)")
        imports = metric(dec, "koi:kv_transfer_imports_total")
        check(imports == len(prompts()), f"every request took its KV from the prefill worker ({imports})")
        check(metric(dec, "koi:kv_transfer_fallbacks_total") == 0, "no fallback")
        hits_before = metric(dec, "koi:prefix_cache_hits_total")
        check(complete(dec.url, prompts()[3], pre.kv, stream=True) == (200, expected[prompts()[3]]),
              "streamed, with the prompt cached on both sides: still identical")
        check(metric(dec, "koi:prefix_cache_hits_total") > hits_before, "the decode side used its own cache (blocks not sent)")
        fresh_dec = env.replica("decode2", extra=["--role", "decode"])
        check(complete(fresh_dec.url, prompts()[2], pre.kv) == (200, expected[prompts()[2]]),
              "cold decode side, warm prefill side: identical")

        # 2. Concurrent requests through the gateway, which splits the long ones.
        gw = env.gateway(config({"v1": (100, [dec.url, fresh_dec.url])}, os.path.join(env.dir, "l.db")).replace(
            "    versions:\n",
            f"    prefill: {{min_uncached_tokens: 32, replicas: [{{url: {json.dumps(pre.url)}, kv: {json.dumps(pre.kv)}}}]}}\n"
            "    versions:\n"))
        key = new_key(gw)
        many = [STORY * (1 + i % 3) + f"Then number {i} came." for i in range(8)] + ["Lily"]
        want = {p: complete(ref.url, p)[1] for p in many}
        results = {}
        threads = [threading.Thread(target=lambda p=p: results.__setitem__(p, complete(gw.url, p, key=key, stream=True)))
                   for p in many]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        check(all(results[p] == (200, want[p]) for p in many), f"{len(many)} concurrent requests through the gateway: identical")
        _, text, _ = call(gw.url + "/metrics")
        split = re.search(r'koi_gateway_pd_decisions_total\{model="stories",decision="split"\} (\S+)', text)
        local = re.search(r'koi_gateway_pd_decisions_total\{model="stories",decision="local"\} (\S+)', text)
        # Prompts whose prefix the chosen decode worker already holds (as the gateway models
        # its cache) are not worth a transfer either.
        check(split and local and float(split.group(1)) >= 3 and float(local.group(1)) >= 1 and
              float(split.group(1)) + float(local.group(1)) == len(many),
              f"the gateway split {split and split.group(1)} long prompts and kept {local and local.group(1)} local")

        # 3. An incompatible prefill worker is refused by name; the request still completes.
        odd = env.replica("prefill-bs32", extra=["--role", "prefill", "--kv-port", "0", "--block-size", "32"])
        check(complete(dec.url, prompts()[1] + " odd", odd.kv)[1] == complete(ref.url, prompts()[1] + " odd")[1],
              "a mismatched peer: the decode worker prefills locally")
        wait_for(lambda: "the block size is 32 on the prefill worker but 16 on the decode worker" in open(os.path.join(env.dir, "decode.log")).read(),
                 "the decode worker's log to name the mismatch")
        check(True, "the decode worker logs: incompatible KV transfer peer: the block size is 32 on the prefill worker but 16 on the decode worker")

        # 4. kill -9 the prefill worker while a transfer waits on it: fallback, no client error.
        victim = env.replica("prefill-victim", extra=["--role", "prefill", "--kv-port", "0"])
        fallbacks = metric(dec, "koi:kv_transfer_fallbacks_total")
        victim.p.send_signal(signal.SIGSTOP)
        out = {}
        t = threading.Thread(target=lambda: out.setdefault("r", complete(dec.url, prompts()[2] + " kill", victim.kv)))
        t.start()
        wait_for(lambda: metric(dec, "koi:kv_cache_usage_perc") > 0, "the decode worker to reserve blocks")
        victim.kill9()
        t.join(30)
        check(out.get("r") == complete(ref.url, prompts()[2] + " kill"), "prefill worker killed mid-transfer: same answer by fallback")
        check(metric(dec, "koi:kv_transfer_fallbacks_total") == fallbacks + 1, "counted as one fallback")
        wait_for(lambda: metric(dec, "koi:kv_cache_usage_perc") == 0, "the decode worker's lease to be released")
        check(True, "the decode worker's reserved blocks were released")

        # 5. kill -9 a decode worker before its first byte: the gateway retries on the other one,
        # and the prefill worker ends with no blocks in use.
        gw2 = env.gateway(config({"v1": (100, [dec.url, fresh_dec.url])}, os.path.join(env.dir, "l2.db"),
                                 extra="routing: {policy: least_outstanding}\n").replace(
            "    versions:\n",
            f"    prefill: {{min_uncached_tokens: 32, replicas: [{{url: {json.dumps(pre.url)}, kv: {json.dumps(pre.kv)}}}]}}\n"
            "    versions:\n"), name="gateway2")
        key2 = new_key(gw2)
        pre.p.send_signal(signal.SIGSTOP)  # holds every transfer open on the decode side
        out = {}
        t = threading.Thread(target=lambda: out.setdefault("r", complete(gw2.url, prompts()[1] + " retry", key=key2)))
        t.start()
        busy = lambda: [d for d in (dec, fresh_dec) if (metric(d, "koi:kv_cache_usage_perc") or 0) > 0]
        wait_for(lambda: busy(), "a decode worker to take the request")
        victim_dec = busy()[0]
        victim_dec.kill9()
        time.sleep(0.3)
        pre.p.send_signal(signal.SIGCONT)
        t.join(60)
        check(out.get("r") == complete(ref.url, prompts()[1] + " retry"), "decode worker killed before the first byte: retried, same answer")
        wait_for(lambda: metric(pre, "koi:kv_cache_usage_perc") == 0 and metric(pre, "koi:num_requests_running") == 0,
                 "the prefill worker's blocks to return to its baseline")
        check(True, "the prefill worker's KV pool usage is back to 0")
        # 6. KV events: a replica with --kv-events publishes the blocks its prefix cache gains.
        ev = env.replica("events", extra=["--kv-events"])
        check(call(ref.url + "/kv/events")[0] == 404, "no /kv/events without --kv-events")
        complete(ev.url, prompts()[1])
        status, text, _ = call(ev.url + "/kv/events?after=0")
        events = json.loads(text)["events"] if status == 200 else []
        stored = [e for e in events if e["type"] == "stored"]
        check(len(stored) >= 5 and [e["seq"] for e in events] == list(range(1, len(events) + 1)),
              f"/kv/events numbers {len(stored)} stored blocks from 1")
        snap = json.loads(call(ev.url + "/kv/snapshot")[1])
        check(snap["last"] == len(events) and set(snap["hashes"]) == {e["hash"] for e in stored}, "/kv/snapshot matches the events")
        check(json.loads(call(ev.url + f"/kv/events?after={len(events)}")[1])["events"] == [], "nothing after the last event")
        check(call(ev.url + "/kv/events?after=x")[0] == 400, "a bad ?after= is a 400")
        check_long_poll(ev, len(events))
        print("PASS")
    finally:
        env.close()


if __name__ == "__main__":
    main()
