"""Admin changes survive a gateway restart, with the SQLite ledger and with a real PostgreSQL:
a partial tenant update, a new tenant and its key, traffic weights, a replica added and one
removed are all there after the gateway is stopped and started again on the same config file
and store; a bad admin call is refused with the field named and changes nothing."""
from gateway_harness import *

env = Env()
try:
    r1, r2 = env.replica("r1"), env.replica("r2")
    tenants = "  - {name: limited, rpm: 60, tpm: 6000, max_concurrency: 4, priority: high, models: [stories]}\n"
    for store in [os.path.join(env.dir, "ledger.db"), env.postgres()]:
        kind = "postgres" if store.startswith("postgres") else "sqlite"
        cfg = config({"v1": (100, [r1.url]), "v2": (0, [r2.url])}, store, tenants=tenants)
        gw = env.gateway(cfg, name="gateway-" + kind)
        admin(gw, "POST", "/admin/tenants", {"name": "limited", "rpm": 5})
        admin(gw, "POST", "/admin/tenants", {"name": "beta", "tpm": 1000})
        key = new_key(gw, "beta")
        admin(gw, "POST", "/admin/weights", {"model": "stories", "weights": {"v1": 30, "v2": 70}})
        admin(gw, "POST", "/admin/replicas", {"model": "stories", "version": "v2", "url": r1.url})
        admin(gw, "DELETE", "/admin/replicas", {"model": "stories", "version": "v1", "url": r1.url})
        status, text, _ = call(gw.admin + "/admin/tenants", {"name": "limited", "rpm": "abc"}, ADMIN_KEY, method="POST")
        check(status == 400 and 'tenants.rpm must be a non-negative number, got \\"abc\\"' in text,
              f"[{kind}] a non-numeric rpm is refused naming the field: {status} {text}")
        before = admin(gw, "GET", "/admin/state")
        gw.stop()

        gw = env.gateway(cfg, name="gateway-" + kind + "-restarted")
        after = admin(gw, "GET", "/admin/state")
        want_limited = {"rpm": 5, "tpm": 6000, "max_concurrency": 4, "priority": "high", "models": ["stories"], "in_flight": 0}
        check(after["tenants"]["limited"] == want_limited, f"[{kind}] the partial update survived: {after['tenants']['limited']}")
        want_beta = {"rpm": 0, "tpm": 1000, "max_concurrency": 0, "priority": "normal", "models": [], "in_flight": 0}
        check(after["tenants"]["beta"] == want_beta, f"[{kind}] the new tenant survived: {after['tenants']['beta']}")
        versions = {v["name"]: (v["weight"], [r["url"] for r in v["replicas"]]) for v in after["models"]["stories"]["versions"]}
        check(versions == {"v1": (30, []), "v2": (70, [r2.url, r1.url])},
              f"[{kind}] weights and replicas survived: {versions}")
        was = {v["name"]: (v["weight"], [r["url"] for r in v["replicas"]]) for v in before["models"]["stories"]["versions"]}
        check(versions == was, f"[{kind}] the fleet is as it was before the restart: {was}")
        status, usage, text = completion(gw, key)
        check(status == 200 and usage is not None, f"[{kind}] the key issued before the restart still works: {status} {text[-200:]}")
        gw.stop()
    print("PASS")
finally:
    env.close()
