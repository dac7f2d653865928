"""Crash safety: kill -9 the gateway under load and restart it on the same ledger. Every
request a client saw complete has exactly one usage record; none is duplicated."""
from gateway_harness import *
import uuid

env = Env()
try:
    r1, r2 = env.replica("r1"), env.replica("r2")
    store = os.path.join(env.dir, "ledger.db")
    text = config({"v1": (100, [r1.url, r2.url])}, store)
    gw = env.gateway(text)
    key = new_key(gw)  # stored in the ledger's key table: survives the restart
    completed, stop = [], threading.Event()

    def load(target):
        while not stop.is_set():
            rid = str(uuid.uuid4())
            status, _, _ = completion(target[0], key, max_tokens=16, stream=len(completed) % 2 == 0, rid=rid, timeout=15)
            if status == 200:
                completed.append(rid)

    target = [gw]
    threads = [threading.Thread(target=load, args=(target,)) for _ in range(4)]
    for t in threads:
        t.start()
    time.sleep(3)
    gw.kill9()
    before = len(completed)
    gw2 = env.gateway(text, name="gateway-restarted")
    target[0] = gw2
    time.sleep(2)
    stop.set()
    for t in threads:
        t.join()
    check(before > 20 and len(completed) > before, f"{before} requests completed before the crash, {len(completed) - before} after")
    rows = ledger(store)
    ids = [r["request_id"] for r in rows]
    check(len(ids) == len(set(ids)), f"no duplicated usage record ({len(ids)} rows)")
    missing = [rid for rid in completed if "acme/" + rid not in set(ids)]
    check(not missing, f"every completed request has its record ({len(missing)} missing of {len(completed)})")
    print("PASS")
finally:
    env.close()
