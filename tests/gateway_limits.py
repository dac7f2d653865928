"""Limits over a one-minute window (label slow): a tenant at 120 requests per minute and one
at 3000 tokens per minute are driven as fast as they are let through for 60 s; what is
admitted must be within 5% of the limit plus the bucket each starts with (a whole minute's
allowance, docs/gateway.md)."""
from gateway_harness import *

env = Env()
try:
    reps = [env.replica(f"r{i}") for i in range(2)]
    store = os.path.join(env.dir, "ledger.db")
    tenants = "  - {name: rpm-tenant, rpm: 120}\n  - {name: tpm-tenant, tpm: 3000}\n"
    gw = env.gateway(config({"v1": (100, [r.url for r in reps])}, store, tenants=tenants))
    keys = {t: new_key(gw, t) for t in ("rpm-tenant", "tpm-tenant")}
    counts = {t: {} for t in keys}
    retry_after_ok = [True]
    stop = threading.Event()

    def load(tenant):
        while not stop.is_set():
            body = {"model": "stories", "prompt": "Once upon a time", "max_tokens": 20, "temperature": 0}
            status, text, headers = call(gw.url + "/v1/completions", body, keys[tenant])
            counts[tenant][status] = counts[tenant].get(status, 0) + 1
            if status == 429 and not int(headers.get("Retry-After", "0")) >= 1:
                retry_after_ok[0] = False

    threads = [threading.Thread(target=load, args=(t,)) for t in keys for _ in range(2)]
    t0 = time.time()
    for t in threads:
        t.start()
    time.sleep(60)
    stop.set()
    for t in threads:
        t.join()
    elapsed = time.time() - t0
    ok = counts["rpm-tenant"].get(200, 0)
    limit = 120 * elapsed / 60 + 120
    check(counts["rpm-tenant"].get(429, 0) > 0 and retry_after_ok[0], "RPM: over-limit requests got 429 with Retry-After")
    check(0.95 * limit <= ok <= 1.05 * limit, f"RPM: {ok} admitted in {elapsed:.1f} s, limit {limit:.0f} (within 5%)")
    rows = [r for r in ledger(store) if r["tenant"] == "tpm-tenant" and r["status"] == 200]
    tokens = sum(r["prompt"] + r["completion"] for r in rows)
    limit = 3000 * elapsed / 60 + 3000 + 50
    check(counts["tpm-tenant"].get(429, 0) > 0, "TPM: over-limit requests got 429")
    check(0.95 * limit <= tokens <= 1.05 * limit, f"TPM: {tokens} tokens in {len(rows)} requests in {elapsed:.1f} s, limit {limit:.0f} (within 5%)")
    print("PASS")
finally:
    env.close()
