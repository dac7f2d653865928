"""koi gateway in front of two real `koi serve` replicas, with the SQLite ledger and with a
real PostgreSQL: auth accepted and rejected, usage ledger totals equal to what the replicas
reported, for streamed and plain requests; `koi gateway usage` prints the same totals."""
import subprocess
from gateway_harness import *

env = Env()
try:
    r1, r2 = env.replica("r1"), env.replica("r2")
    for store in [os.path.join(env.dir, "ledger.db"), env.postgres()]:
        kind = "postgres" if store.startswith("postgres") else "sqlite"
        gw = env.gateway(config({"v1": (100, [r1.url, r2.url])}, store, extra="routing: {policy: round_robin}\n"),
                         name="gateway-" + kind)
        key = new_key(gw)
        status, _, _ = completion(gw, "koi-00000000-" + "0" * 32)
        check(status == 401, f"[{kind}] a wrong key is rejected with 401")
        status, text, _ = call(gw.url + "/v1/completions", {"model": "stories", "prompt": "x"})
        check(status == 401 and "invalid API key" in text, f"[{kind}] a missing key is rejected with 401")
        status, text, _ = call(gw.url + "/v1/models", key=key)
        check(status == 200 and '"stories"' in text, f"[{kind}] /v1/models lists the model")
        reported = {"prompt": 0, "completion": 0}
        n = 0
        for i in range(12):
            stream = i % 2 == 1
            status, usage, text = completion(gw, key, prompt="Once upon a time " * (1 + i % 3), max_tokens=4 + i, stream=stream,
                                             rid=f"{kind}-{i}")
            check(status == 200 and usage is not None, f"[{kind}] request {i} (stream={stream}) succeeds with usage: {status} {text[-300:]!r}")
            reported["prompt"] += usage["prompt_tokens"]
            reported["completion"] += usage["completion_tokens"]
            n += 1
        rows = ledger(store)
        check(len(rows) == n and len({r["request_id"] for r in rows}) == n, f"[{kind}] one ledger row per request ({len(rows)})")
        got = {"prompt": sum(r["prompt"] for r in rows), "completion": sum(r["completion"] for r in rows)}
        check(got == reported, f"[{kind}] ledger tokens {got} == tokens the replicas reported {reported}")
        check({r["replica"] for r in rows} == {r1.url, r2.url}, f"[{kind}] both replicas served")
        out = subprocess.run([GATEWAY, "gateway", "usage", "--store", store, "--tenant", "acme", "--since", "1h",
                              "--config", os.path.join(env.dir, "gateway-" + kind + ".yaml")],
                             check=True, capture_output=True, text=True).stdout
        total = [l.split() for l in out.splitlines() if l.startswith("total")][0]
        cost = reported["prompt"] * 0.5 / 1000 + reported["completion"] * 1.5 / 1000
        check(total[1:5] == [str(n), "0", str(reported["prompt"]), str(reported["completion"])] and abs(float(total[-1]) - cost) < 1e-6,
              f"[{kind}] koi gateway usage totals {total[1:]} match (cost {cost:.6f})")
        status, text, _ = call(gw.url + "/metrics")
        check(status == 200 and 'koi_gateway_requests_total{tenant="acme",model="stories",version="v1"' in text,
              f"[{kind}] /metrics has per-tenant request counters")
        gw.stop()
    print("PASS")
finally:
    env.close()
