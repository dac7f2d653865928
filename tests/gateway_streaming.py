"""The gateway relays each server-sent event the moment it is complete. A test upstream sends
8 completion chunks but sends chunk i+1 only after the test client has received chunk i
through the gateway (or after a 5 s cap, which fails the test): a proxy that buffers cannot
pass. The ledger's ttft_ms is the first event's time, not the last's; the continuous usage
the gateway asked the upstream for is stripped from what the client sees. Then, with a real
`koi serve` replica, TTFT through the gateway against direct (medians of 20; printed, for
bench/README.md, not asserted)."""
from gateway_harness import *
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
import uuid

N_CHUNKS, PERIOD_S, ACK_CAP_S = 8, 0.3, 5.0
acks = [threading.Event() for _ in range(N_CHUNKS)]
sent_at = [0.0] * N_CHUNKS  # when the upstream finished writing chunk i
request_at = [0.0]           # when the upstream had read the gateway's request
late = []                    # chunks the upstream sent on after the cap
upstream_bodies = []  # compact JSON below, as vLLM and koi serve write it
health_probes = [0]


class Upstream(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        health_probes[0] += 1
        body = b'{"status":"ok"}' if self.path == "/health" else b"{}"
        self.send_response(200 if self.path == "/health" else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def do_POST(self):
        upstream_bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        request_at[0] = time.time()
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        for i in range(N_CHUNKS):
            began = time.time()
            ev = {"id": "cmpl-test", "object": "text_completion", "created": 1, "model": "stories",
                  "choices": [{"index": 0, "text": f" tok{i}", "finish_reason": "length" if i == N_CHUNKS - 1 else None}],
                  "usage": {"prompt_tokens": 4, "completion_tokens": i + 1, "total_tokens": 5 + i}}
            data = f"data: {json.dumps(ev, separators=(',', ':'))}\n\n".encode()
            if i == 3:  # one event in two writes: the gateway must relay it whole, once complete
                self.chunk(data[:20])
                time.sleep(0.05)
                self.chunk(data[20:])
            else:
                self.chunk(data)
            sent_at[i] = time.time()
            if i + 1 < N_CHUNKS:
                if not acks[i].wait(ACK_CAP_S):
                    late.append(i)
                time.sleep(max(0.0, PERIOD_S - (time.time() - began)))
        usage = {"id": "cmpl-test", "object": "text_completion", "created": 1, "model": "stories", "choices": [],
                 "usage": {"prompt_tokens": 4, "completion_tokens": N_CHUNKS, "total_tokens": 4 + N_CHUNKS}}
        self.chunk(f"data: {json.dumps(usage, separators=(',', ':'))}\n\n".encode())
        self.chunk(b"data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


env = Env()
try:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    upstream_url = f"http://127.0.0.1:{server.server_address[1]}"
    store = os.path.join(env.dir, "ledger.db")
    gw = env.gateway(config({"v1": (100, [upstream_url])}, store))
    key = new_key(gw)
    deadline = time.time() + 10
    while health_probes[0] == 0 and time.time() < deadline:
        time.sleep(0.05)
    check(health_probes[0] > 0, "the gateway probes the test upstream's /health")

    rid = str(uuid.uuid4())
    t0 = time.time()
    s = Stream(gw.url, "/v1/completions", {"model": "stories", "prompt": "Once upon a time", "max_tokens": N_CHUNKS,
                                           "stream": True, "stream_options": {"include_usage": True}},
               key=key, headers={"x-request-id": rid})
    check(s.status == 200 and s.chunked, f"the stream's headers: {s.status_line} {s.headers}")
    got_at, texts, content_usage, final_usage, done = [], [], [], None, False
    for data in s.events():
        if data == "[DONE]":
            done = True
            continue
        ev = json.loads(data)
        if ev["choices"]:
            got_at.append(time.time())
            texts.append(ev["choices"][0]["text"])
            if "usage" in ev:
                content_usage.append(ev["usage"])
            acks[len(got_at) - 1].set()
        elif ev.get("usage"):
            final_usage = ev["usage"]
    s.close()
    check(not late, f"the client received every chunk before the upstream sent the next (late: {late})")
    check(texts == [f" tok{i}" for i in range(N_CHUNKS)] and done and not s.cut, f"all {N_CHUNKS} chunks then [DONE]: {texts}")
    check(all(got_at[i] < sent_at[i + 1] for i in range(N_CHUNKS - 1)),
          "each chunk reached the client before the upstream wrote the next one")
    gaps = [round((got_at[i] - sent_at[i]) * 1000, 1) for i in range(N_CHUNKS)]
    print(f"upstream write -> client receive, ms: {gaps}")
    check(not content_usage, "the continuous usage the gateway asked for is stripped from the client's chunks")
    check(final_usage == {"prompt_tokens": 4, "completion_tokens": N_CHUNKS, "total_tokens": 4 + N_CHUNKS},
          f"the client's final usage chunk: {final_usage}")
    so = upstream_bodies[0].get("stream_options", {})
    check(so.get("continuous_usage_stats") is True and so.get("include_usage") is True,
          f"the gateway asked the upstream for continuous usage: {so}")
    row = None
    deadline = time.time() + 5
    while row is None and time.time() < deadline:
        row = ledger_row(store, "acme/" + rid)
        time.sleep(0.05)
    check(row is not None, "the stream has its ledger record")
    second_ms = (got_at[1] - t0) * 1000
    check(row["status"] == 200 and row["prompt_tokens"] == 4 and row["completion_tokens"] == N_CHUNKS,
          f"ledger: status 200, 4 + {N_CHUNKS} tokens: {row}")
    check(0 < row["ttft_ms"] < second_ms,
          f"ledger ttft_ms {row['ttft_ms']:.1f} is the first event's, before the second's ({second_ms:.1f} ms after start)")
    # The gateway's clock starts before the upstream has its request and stops after the upstream
    # wrote chunk N-2 (the gateway still reads chunk N-1 and [DONE] after it): a bound that holds
    # however slowly a loaded machine schedules the client.
    span_ms = (sent_at[N_CHUNKS - 2] - request_at[0]) * 1000
    check(row["latency_ms"] >= span_ms,
          f"ledger latency_ms {row['latency_ms']:.1f} spans the stream (at least {span_ms:.1f})")
    server.shutdown()

    # TTFT through the gateway against direct, on a real replica (printed, not asserted).
    r = env.replica("r1")
    gw2 = env.gateway(config({"v1": (100, [r.url])}, os.path.join(env.dir, "ledger2.db")), name="gateway-real")
    key2 = new_key(gw2)
    body = {"model": "stories", "prompt": "Once upon a time", "max_tokens": 32, "temperature": 0, "stream": True}

    def ttft(url, key):
        t = time.time()
        st = Stream(url, "/v1/completions", body, key=key)
        first = None
        for data in st.events():
            if first is None:
                first = time.time() - t
        st.close()
        if st.status != 200 or first is None:
            fail(f"stream to {url}: {st.status_line}")
        return first * 1000

    for _ in range(3):  # warm both paths
        ttft(r.url, None), ttft(gw2.url, key2)
    direct, via = [], []
    for _ in range(20):
        direct.append(ttft(r.url, None))
        via.append(ttft(gw2.url, key2))
    print(f"TTFT median of 20 (stream, max_tokens 32): direct {median(direct):.2f} ms, through the gateway {median(via):.2f} ms, "
          f"added {median(via) - median(direct):.2f} ms")
    print("PASS")
finally:
    env.close()
