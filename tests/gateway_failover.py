"""Failover: kill -9 one of three `koi serve` replicas under steady load. No client request
fails (an attempt that fails before the first byte is retried on another replica), the
replica's breaker opens, nothing hangs past its timeout, and the replica rejoins after it is
restarted on its port."""
from gateway_harness import *

env = Env()
try:
    reps = [env.replica(f"r{i}") for i in range(3)]
    gw = env.gateway(config({"v1": (100, [r.url for r in reps])}, os.path.join(env.dir, "ledger.db"),
                            extra="routing: {policy: round_robin}\n"))
    key = new_key(gw)
    results, stop = [], threading.Event()

    def load():
        while not stop.is_set():
            t0 = time.time()
            status, usage, _ = completion(gw, key, max_tokens=12, timeout=15)
            results.append((t0, time.time() - t0, status))

    threads = [threading.Thread(target=load) for _ in range(4)]
    for t in threads:
        t.start()
    time.sleep(3)
    victim = reps[0]
    port = victim.url.rsplit(":", 1)[1]
    kill_time = time.time()
    victim.kill9()
    time.sleep(3)
    state = admin(gw, "GET", "/admin/state")
    breaker = {r["url"]: r["breaker"] for r in state["models"]["stories"]["versions"][0]["replicas"]}
    check(breaker[victim.url] in ("open", "half_open"), f"the killed replica's breaker is {breaker[victim.url]}")
    restarted = env.replica("r0-restarted", port=int(port))
    time.sleep(2.5)
    stop.set()
    for t in threads:
        t.join()
    state = admin(gw, "GET", "/admin/state")
    breaker = {r["url"]: r["breaker"] for r in state["models"]["stories"]["versions"][0]["replicas"]}
    check(breaker[victim.url] == "closed", "the restarted replica's breaker closed again")
    failed = [r for r in results if r[2] != 200]
    check(len(results) > 50, f"steady load: {len(results)} requests")
    check(not failed, f"no request failed ({len(failed)} of {len(results)}; statuses {sorted({r[2] for r in failed})})")
    check(max(r[1] for r in results) < 15, f"no request hung (slowest {max(r[1] for r in results):.2f} s)")
    rows = ledger(os.path.join(env.dir, "ledger.db"))
    late = [r for r in rows if r["replica"] == victim.url]
    check(len(late) > 0, f"the rejoined replica served again ({len(late)} rows in all on its URL)")
    print("PASS")
finally:
    env.close()
