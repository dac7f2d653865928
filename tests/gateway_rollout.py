"""Versions: a weighted canary split moves traffic as configured (within 4 standard
deviations), and `koi gateway rollout` to a version that answers 500s is rolled back
automatically with no failed client request (attempts that fail before the first byte are
retried on the old version)."""
import http.server, subprocess
from gateway_harness import *


class Broken(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.send_header("content-length", "2"); self.end_headers(); self.wfile.write(b"ok")

    def do_POST(self):
        self.rfile.read(int(self.headers["content-length"]))
        self.send_response(500); self.send_header("content-length", "2"); self.end_headers(); self.wfile.write(b"{}")

    def log_message(self, *a):
        pass


env = Env()
try:
    v1a, v1b, v2 = env.replica("v1a"), env.replica("v1b"), env.replica("v2")
    store = os.path.join(env.dir, "ledger.db")
    gw = env.gateway(config({"v1": (80, [v1a.url, v1b.url]), "v2": (20, [v2.url])}, store))
    key = new_key(gw)
    n = 300
    for i in range(n):
        status, _, _ = completion(gw, key, max_tokens=1)
        if status != 200:
            fail(f"canary request {i}: {status}")
    share = sum(1 for r in ledger(store) if r["version"] == "v2")
    sd = (n * 0.2 * 0.8) ** 0.5
    check(abs(share - 0.2 * n) <= 4 * sd, f"v2 served {share} of {n} at weight 20 (expected {0.2 * n:.0f} +- {4 * sd:.0f})")

    broken = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Broken)
    threading.Thread(target=broken.serve_forever, daemon=True).start()
    admin(gw, "POST", "/admin/replicas", {"model": "stories", "version": "v3", "url": f"http://127.0.0.1:{broken.server_port}"})
    admin(gw, "POST", "/admin/weights", {"model": "stories", "weights": {"v1": 100, "v2": 0}})
    results, stop = [], threading.Event()

    def load():
        while not stop.is_set():
            results.append(completion(gw, key, max_tokens=2)[0])

    threads = [threading.Thread(target=load) for _ in range(3)]
    for t in threads:
        t.start()
    time.sleep(0.5)
    r = subprocess.run([GATEWAY, "gateway", "rollout", "--admin", gw.admin, "--admin-key", ADMIN_KEY, "--model", "stories",
                        "--from", "v1", "--to", "v3", "--steps", "10,50,100", "--interval-s", "1", "--min-requests", "10",
                        "--max-error-rate", "0.1"], capture_output=True, text=True, timeout=60)
    time.sleep(0.5)
    stop.set()
    for t in threads:
        t.join()
    print(r.stdout, r.stderr)
    check(r.returncode == 3 and "rolled back: error rate" in r.stdout, "the rollout to the failing version rolled back")
    stats = admin(gw, "GET", "/admin/stats")["stories"]
    check(stats["v3"]["weight"] == 0 and stats["v1"]["weight"] == 100, "traffic is back on v1")
    check(stats["v3"]["errors"] > 0, f"v3 failed {stats['v3']['errors']} attempts")
    failed = [s for s in results if s != 200]
    check(len(results) > 20 and not failed, f"no client request failed ({len(failed)} of {len(results)})")
    print("PASS")
finally:
    env.close()
