"""A replica killed (-9) in the middle of 20 concurrent streams: the official openai npm client
(tests/gateway_replica_crash_streams.mjs) sees each stream either complete with [DONE] and a
finish_reason or raise an APIError from the gateway's error event, never a quiet end; the
ledger matches what each client received (502 and the tokens the replica reported in the last
chunk the client got for the cut ones, 200 and all 500 tokens for the others). Two raw-socket streams beside them pin the wire: the cut
one ends with data: {"error":{...,"type":"upstream_error","code":502}}, no [DONE], and no
terminating chunk."""
from gateway_harness import *
import uuid

MAX_TOKENS = 500

env = Env()
try:
    r1, r2 = env.replica("r1"), env.replica("r2")
    store = os.path.join(env.dir, "ledger.db")
    gw = env.gateway(config({"v1": (100, [r1.url, r2.url])}, store, extra="routing: {policy: round_robin}\n"))
    key = new_key(gw)
    npm = npm_dir()
    raw = []  # (request id, events, Stream) of the raw-socket streams, started just before the kill
    raw_started = [threading.Event(), threading.Event()]

    def raw_stream(started):
        rid = "raw-" + str(uuid.uuid4())
        s = Stream(gw.url, "/v1/completions", {"model": "stories", "prompt": "Once upon a time", "max_tokens": MAX_TOKENS,
                                               "temperature": 0, "ignore_eos": True, "stream": True,
                                               "stream_options": {"include_usage": True, "continuous_usage_stats": True}},
                   key=key, headers={"x-request-id": rid}, timeout=60)
        events = [s.next_event()]
        started.set()
        events += list(s.events())
        s.close()
        raw.append((rid, events, s))

    raw_threads = [threading.Thread(target=raw_stream, args=(e,)) for e in raw_started]
    node = subprocess.Popen(["node", os.path.join(os.path.dirname(os.path.abspath(__file__)), "gateway_replica_crash_streams.mjs")],
                            env=dict(os.environ, URL=gw.url, KEY=key, KOI_NPM_DIR=npm), stdout=subprocess.PIPE, text=True)
    results = []
    for line in node.stdout:
        print("node: " + line.rstrip()[:300], flush=True)
        if line.strip() == "KILL":
            for t in raw_threads:
                t.start()
            for e in raw_started:
                e.wait(10)
            r1.kill9()
        elif line.startswith("RESULT "):
            results.append(json.loads(line[7:]))
    check(node.wait() == 0, "the openai client saw every stream complete or raise, none end quietly")
    for t in raw_threads:
        t.join()

    for r in results:
        row = ledger_row(store, "acme/" + r["rid"], "status, completion_tokens, replica")
        if r["error"]:
            reported = r["last_usage"]["completion_tokens"]
            check(row and row["status"] == 502 and row["replica"] == r1.url and row["completion_tokens"] == reported,
                  f"{r['rid']} (cut after {r['chunks']} chunks, the last reporting {reported} tokens): ledger {row}")
        else:
            check(row and row["status"] == 200 and row["replica"] == r2.url and row["completion_tokens"] == MAX_TOKENS,
                  f"{r['rid']} (complete, {r['chunks']} chunks): ledger {row}")

    replicas = set()
    for rid, events, s in raw:
        row = ledger_row(store, "acme/" + rid, "status, completion_tokens, replica")
        replicas.add(row["replica"])
        content = [json.loads(e) for e in events if e and e != "[DONE]" and json.loads(e).get("choices")]
        reported = content[-1]["usage"]["completion_tokens"]
        if row["replica"] == r1.url:
            err = json.loads(events[-1]) if events[-1] else {}
            check(set(err.get("error", {})) >= {"message"} and err["error"].get("type") == "upstream_error" and err["error"].get("code") == 502,
                  f"[raw] the cut stream's last event is the OpenAI-style error: {events[-1]}")
            check("[DONE]" not in events and s.cut, "[raw] the cut stream has no [DONE] and no terminating chunk")
            check(row["status"] == 502 and row["completion_tokens"] == reported,
                  f"[raw] ledger {row} == the {reported} tokens reported in the last of {len(content)} chunks received")
        else:
            check(events[-1] == "[DONE]" and not s.cut and row["status"] == 200 and row["completion_tokens"] == reported == MAX_TOKENS,
                  f"[raw] the stream on the other replica completes: {row}")
    check(replicas == {r1.url, r2.url}, "the raw streams went one to each replica")
    print("PASS")
finally:
    env.close()
