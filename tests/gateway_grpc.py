"""The gateway's gRPC API (proto/koi/v1/inference.proto) against a real `koi serve` of
stories260K, with Debian's python3-grpcio as the client and message classes protoc
generates here from the tree's .proto. Checks: Complete and Chat stream the same text as the
REST answer to the same greedy request (CompleteUnary and ChatUnary answer it whole, metered as
REST's non-streamed request, with the same status codes), and its first message arrives while the request is still
running (before the gateway has metered it, which it does only after the last token); the
usage in the last message and the ledger rows equal REST's; ListModels and Health; and the
status codes: UNAUTHENTICATED (no key, wrong key), INVALID_ARGUMENT (no model, bad
max_tokens), NOT_FOUND (unknown model), RESOURCE_EXHAUSTED (over the tenant's rpm),
CANCELLED by the client (recorded 499) and UNAVAILABLE (the only replica dead). Then, as
tests/gateway_streaming.py does for REST, a test upstream that sends chunk i+1 only after the
gRPC client has received chunk i (5 s cap, which fails the test): a path that buffers cannot
pass."""
from gateway_harness import *
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
import grpc

SRC = os.environ.get("KOI_SOURCE_DIR", os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
PROMPT = "Once upon a time"


def stubs(out_dir):
    """Generates and imports koi/v1/inference_pb2 from the tree's .proto."""
    subprocess.run(["protoc", "-I", os.path.join(SRC, "proto"), "--python_out=" + out_dir,
                    os.path.join(SRC, "proto/koi/v1/inference.proto")], check=True)
    sys.path.insert(0, out_dir)
    from koi.v1 import inference_pb2
    return inference_pb2


N_PACED, ACK_CAP_S = 6, 5.0
acks = [threading.Event() for _ in range(N_PACED)]
late = []


class PacedUpstream(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        body = b'{"status":"ok"}'
        self.send_response(200 if self.path == "/health" else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def chunk(self, ev):
        data = f"data: {ev if isinstance(ev, str) else json.dumps(ev, separators=(',', ':'))}\n\n".encode()
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def do_POST(self):
        prompt = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["prompt"]
        cut, hang = prompt == "cut", prompt == "hang"
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for i in range(N_PACED):
            if cut and i == 2:  # the replica dies mid-stream
                self.close_connection = True
                self.connection.shutdown(2)
                return
            self.chunk({"id": "cmpl-paced", "object": "text_completion", "created": 1, "model": "stories",
                        "choices": [{"index": 0, "text": f" tok{i}", "finish_reason": "length" if i == N_PACED - 1 else None}],
                        "usage": {"prompt_tokens": 4, "completion_tokens": i + 1, "total_tokens": 5 + i}})
            if hang:  # until the gateway goes away
                time.sleep(10)
                return
            if i + 1 < N_PACED and not acks[i].wait(ACK_CAP_S):
                late.append(i)
        self.chunk({"id": "cmpl-paced", "object": "text_completion", "created": 1, "model": "stories", "choices": [],
                    "usage": {"prompt_tokens": 4, "completion_tokens": N_PACED, "total_tokens": 4 + N_PACED}})
        self.chunk("[DONE]")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


def paced(env, pb):
    """Each message reaches the gRPC client before the upstream produces the next one."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), PacedUpstream)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    store = os.path.join(env.dir, "paced.db")
    gw = env.gateway(config({"v1": (100, [f"http://127.0.0.1:{server.server_address[1]}"])}, store,
                            extra="grpc_listen: 127.0.0.1:0\n"), name="gateway-paced")
    key = new_key(gw)
    time.sleep(0.5)  # a health probe marks the upstream healthy
    with grpc.insecure_channel(gw.grpc) as ch:
        complete = ch.unary_stream("/koi.v1.Inference/Complete", request_serializer=pb.CompleteRequest.SerializeToString,
                                   response_deserializer=pb.CompleteChunk.FromString)
        texts, usage = [], None
        for c in complete(pb.CompleteRequest(model="stories", prompt="x", max_tokens=N_PACED, request_id="paced"),
                          metadata=(("authorization", "Bearer " + key),), timeout=60):
            if c.text:
                texts.append(c.text)
                acks[len(texts) - 1].set()
            if c.HasField("usage"):
                usage = c.usage
        texts_before_cut = []
        try:
            for c in complete(pb.CompleteRequest(model="stories", prompt="cut", max_tokens=N_PACED, request_id="cut"),
                              metadata=(("authorization", "Bearer " + key),), timeout=60):
                texts_before_cut.append(c.text)
            fail("a stream the replica broke off ended OK")
        except grpc.RpcError as e:
            check(e.code() == grpc.StatusCode.UNAVAILABLE, f"the replica broke off mid-stream: UNAVAILABLE ({e.code()}, {e.details()!r})")
        check(texts_before_cut == [" tok0", " tok1"], f"the messages before the cut arrived: {texts_before_cut}")
        # Stopping the gateway with a call in flight cancels it and exits cleanly.
        hanging = complete(pb.CompleteRequest(model="stories", prompt="hang", max_tokens=N_PACED, request_id="stop"),
                           metadata=(("authorization", "Bearer " + key),), timeout=60)
        next(hanging)  # tok0 arrives; the upstream waits for an ack that never comes
        t0 = time.time()
        gw.p.terminate()
        rc = gw.p.wait(15)
        check(rc == 0, f"SIGTERM with a gRPC call in flight: the gateway exits 0 ({rc}) in {time.time() - t0:.1f} s")
        try:
            list(hanging)
            fail("the call in flight ended OK after the gateway stopped")
        except grpc.RpcError as e:
            check(e.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED), f"the call in flight ended with {e.code()}")
    server.shutdown()
    time.sleep(0.3)
    row = ledger_row(store, "acme/cut")
    check(row and row["status"] == 502 and row["completion_tokens"] == 2, f"the cut stream is metered as 502 with 2 tokens: {row}")
    check(not late, f"every message reached the gRPC client before the upstream sent the next (late: {late})")
    check(texts == [f" tok{i}" for i in range(N_PACED)], f"the paced stream's text: {texts}")
    check(usage is not None and usage.completion_tokens == N_PACED, f"the paced stream's usage: {usage}")
    time.sleep(0.3)
    row = ledger_row(store, "acme/paced")
    check(row and row["status"] == 200 and row["completion_tokens"] == N_PACED, f"the paced stream is metered: {row}")


def main():
    env = Env()
    try:
        pb = stubs(env.dir)
        store = os.path.join(env.dir, "usage.db")
        rep = env.replica("r1")
        tenants = "  - {name: tight, rpm: 1}\n"
        gw = env.gateway(config({"v1": (100, [rep.url])}, store, tenants=tenants, extra="grpc_listen: 127.0.0.1:0\n"))
        check(gw.grpc is not None, "the gateway prints 'grpc on HOST:PORT' with grpc_listen set")
        key, tight = new_key(gw), new_key(gw, "tight")
        ch = grpc.insecure_channel(gw.grpc)
        grpc.channel_ready_future(ch).result(timeout=10)
        complete = ch.unary_stream("/koi.v1.Inference/Complete", request_serializer=pb.CompleteRequest.SerializeToString,
                                   response_deserializer=pb.CompleteChunk.FromString)
        list_models = ch.unary_unary("/koi.v1.Inference/ListModels", request_serializer=pb.ListModelsRequest.SerializeToString,
                                     response_deserializer=pb.ListModelsResponse.FromString)
        health = ch.unary_unary("/koi.v1.Inference/Health", request_serializer=pb.HealthRequest.SerializeToString,
                                response_deserializer=pb.HealthResponse.FromString)
        auth = lambda k: (("authorization", "Bearer " + k),)

        def req(**kw):
            kw.setdefault("model", "stories")
            kw.setdefault("prompt", PROMPT)
            return pb.CompleteRequest(**kw)

        def code_of(request, k):
            try:
                for _ in complete(request, metadata=auth(k), timeout=30):
                    pass
                return grpc.StatusCode.OK, ""
            except grpc.RpcError as e:
                return e.code(), e.details()

        check(health(pb.HealthRequest(), timeout=10).status == "ok", "Health answers ok")
        check(list(list_models(pb.ListModelsRequest(), metadata=auth(key), timeout=10).models) == ["stories"],
              "ListModels lists the tenant's models")
        try:
            list_models(pb.ListModelsRequest(), metadata=auth("koi-wrong"), timeout=10)
            fail("ListModels with a wrong key succeeded")
        except grpc.RpcError as e:
            check(e.code() == grpc.StatusCode.UNAUTHENTICATED, f"ListModels with a wrong key: UNAUTHENTICATED ({e.code()})")

        # The same greedy request over REST and gRPC: same text, same usage, same ledger rows.
        n = 48
        status, text, _ = call(gw.url + "/v1/completions", {"model": "stories", "prompt": PROMPT, "max_tokens": n, "temperature": 0},
                               key, headers={"x-request-id": "rest-1"})
        check(status == 200, f"REST completion: {status}")
        rest = json.loads(text)
        chunks = list(complete(req(max_tokens=n, temperature=0.0, request_id="grpc-1"), metadata=auth(key), timeout=30))
        grpc_text = "".join(c.text for c in chunks)
        check(len(chunks) > 2, f"Complete streamed {len(chunks)} messages")
        check(grpc_text == rest["choices"][0]["text"], f"gRPC text equals REST's: {grpc_text!r}")
        last = chunks[-1]
        check(last.HasField("usage") and all(not c.HasField("usage") for c in chunks[:-1]), "usage comes in the last message only")
        u = rest["usage"]
        check((last.usage.prompt_tokens, last.usage.completion_tokens) == (u["prompt_tokens"], u["completion_tokens"]),
              f"gRPC usage {last.usage.prompt_tokens}+{last.usage.completion_tokens} equals REST's {u['prompt_tokens']}+{u['completion_tokens']}")
        check(any(c.finish_reason == rest["choices"][0]["finish_reason"] for c in chunks), "finish_reason as REST's")
        time.sleep(0.3)  # the ledger writes in the background
        rows = {r["request_id"]: r for r in ledger(store)}
        a, b = rows.get("acme/rest-1"), rows.get("acme/grpc-1")
        check(a is not None and b is not None, "both requests are in the usage ledger")
        check((a["status"], a["prompt"], a["completion"]) == (b["status"], b["prompt"], b["completion"]) == (200, u["prompt_tokens"], u["completion_tokens"]),
              f"the ledger meters gRPC as REST: {b} vs {a}")
        check(a["replica"] == b["replica"] == rep.url, "both went to the replica")

        # Unary: the same greedy request answered whole, metered as REST's non-streamed one.
        complete_unary = ch.unary_unary("/koi.v1.Inference/CompleteUnary", request_serializer=pb.CompleteRequest.SerializeToString,
                                        response_deserializer=pb.CompleteResponse.FromString)
        whole = complete_unary(req(max_tokens=n, temperature=0.0, request_id="grpc-unary"), metadata=auth(key), timeout=30)
        check(whole.text == rest["choices"][0]["text"] and whole.finish_reason == rest["choices"][0]["finish_reason"],
              f"CompleteUnary answers REST's text and finish_reason in one message: {whole.text!r}")
        check((whole.usage.prompt_tokens, whole.usage.completion_tokens) == (u["prompt_tokens"], u["completion_tokens"]),
              f"CompleteUnary usage equals REST's ({whole.usage.prompt_tokens}+{whole.usage.completion_tokens})")
        time.sleep(0.3)
        unary_row = {r["request_id"]: r for r in ledger(store)}.get("acme/grpc-unary")
        check(unary_row and (unary_row["status"], unary_row["prompt"], unary_row["completion"]) == (a["status"], a["prompt"], a["completion"]),
              f"the ledger meters CompleteUnary as REST: {unary_row} vs {a}")
        unary_stream = ledger_row(store, "acme/grpc-unary", "stream")["stream"]
        check(unary_stream == ledger_row(store, "acme/rest-1", "stream")["stream"] == 0, "both recorded as not streamed")
        for bad, want, what in [(req(max_tokens=-3), grpc.StatusCode.INVALID_ARGUMENT, "max_tokens"),
                                (req(model="nope", max_tokens=4), grpc.StatusCode.NOT_FOUND, "nope")]:
            try:
                complete_unary(bad, metadata=auth(key), timeout=30)
                fail(f"CompleteUnary with a bad {what} succeeded")
            except grpc.RpcError as e:
                check(e.code() == want and what in e.details(), f"CompleteUnary, bad {what}: {want} ({e.code()}, {e.details()!r})")
        try:
            complete_unary(req(max_tokens=4), metadata=auth("koi-wrong"), timeout=30)
            fail("CompleteUnary with a wrong key succeeded")
        except grpc.RpcError as e:
            check(e.code() == grpc.StatusCode.UNAUTHENTICATED, f"CompleteUnary with a wrong key: UNAUTHENTICATED ({e.code()})")

        # Chat: the same greedy chat request over REST and gRPC.
        msgs = [{"role": "user", "content": "Tell me a story"}]
        status, text, _ = call(gw.url + "/v1/chat/completions", {"model": "stories", "messages": msgs, "max_tokens": 24,
                                                                  "temperature": 0}, key, headers={"x-request-id": "rest-chat"})
        check(status == 200, f"REST chat completion: {status} {text[:200]}")
        rest_chat = json.loads(text)
        chat = ch.unary_stream("/koi.v1.Inference/Chat", request_serializer=pb.ChatRequest.SerializeToString,
                               response_deserializer=pb.CompleteChunk.FromString)
        chat_chunks = list(chat(pb.ChatRequest(model="stories", messages=[pb.ChatMessage(**m) for m in msgs], max_tokens=24,
                                               temperature=0.0, request_id="grpc-chat"), metadata=auth(key), timeout=30))
        chat_text = "".join(c.text for c in chat_chunks)
        check(all(c.text or c.finish_reason or c.HasField("usage") for c in chat_chunks), "no empty messages (the role-only delta)")
        check(len(chat_chunks) > 2 and chat_text == rest_chat["choices"][0]["message"]["content"],
              f"gRPC Chat streams REST's answer in {len(chat_chunks)} messages: {chat_text!r}")
        cu = rest_chat["usage"]
        check((chat_chunks[-1].usage.prompt_tokens, chat_chunks[-1].usage.completion_tokens) == (cu["prompt_tokens"], cu["completion_tokens"]),
              f"gRPC Chat usage equals REST's ({cu['prompt_tokens']}+{cu['completion_tokens']})")
        time.sleep(0.3)
        rows = {r["request_id"]: r for r in ledger(store)}
        a, b = rows.get("acme/rest-chat"), rows.get("acme/grpc-chat")
        check(a and b and (a["status"], a["prompt"], a["completion"]) == (b["status"], b["prompt"], b["completion"]),
              f"the ledger meters gRPC Chat as REST chat: {b} vs {a}")
        chat_unary = ch.unary_unary("/koi.v1.Inference/ChatUnary", request_serializer=pb.ChatRequest.SerializeToString,
                                    response_deserializer=pb.CompleteResponse.FromString)
        whole_chat = chat_unary(pb.ChatRequest(model="stories", messages=[pb.ChatMessage(**m) for m in msgs], max_tokens=24,
                                               temperature=0.0, request_id="grpc-chat-unary"), metadata=auth(key), timeout=30)
        check(whole_chat.text == rest_chat["choices"][0]["message"]["content"] and
              (whole_chat.usage.prompt_tokens, whole_chat.usage.completion_tokens) == (cu["prompt_tokens"], cu["completion_tokens"]),
              f"ChatUnary answers REST's content and usage: {whole_chat.text!r}")
        try:
            list(chat(pb.ChatRequest(model="stories", max_tokens=4), metadata=auth(key), timeout=30))
            fail("Chat without messages succeeded")
        except grpc.RpcError as e:
            check(e.code() == grpc.StatusCode.INVALID_ARGUMENT and "messages" in e.details(),
                  f"Chat without messages: INVALID_ARGUMENT ({e.code()}, {e.details()!r})")

        # Streaming, for timing: a long generation's first message arrives while the request
        # still runs — the gateway meters a request only after its last token, so its ledger
        # row must not exist yet — and well before the last message.
        t0 = time.time()
        stream = complete(req(max_tokens=400, temperature=0.0, request_id="grpc-long"), metadata=auth(key), timeout=60)
        first = next(stream)
        t_first = time.time()
        row_at_first = ledger_row(store, "acme/grpc-long")
        rest_of = list(stream)
        t_last = time.time()
        print(f"long stream: first message {1e3 * (t_first - t0):.1f} ms, last {1e3 * (t_last - t0):.1f} ms, "
              f"{1 + len(rest_of)} messages", flush=True)
        check(row_at_first is None, "when the first message arrived the request was not yet metered (still generating)")
        check(t_first - t0 < 0.5 * (t_last - t0), "the first message came in the first half of the stream's time")
        check(rest_of[-1].usage.completion_tokens > 100, f"the long stream generated {rest_of[-1].usage.completion_tokens} tokens")
        time.sleep(0.3)
        long_row = ledger_row(store, "acme/grpc-long")
        check(long_row and long_row["completion_tokens"] == rest_of[-1].usage.completion_tokens, "the long stream is metered with its tokens")

        # TTFT through the gateway, REST stream against gRPC (medians of 20; printed, not asserted).
        ttft_rest, ttft_grpc = [], []
        for i in range(20):
            t0 = time.time()
            st = Stream(gw.url, "/v1/completions", {"model": "stories", "prompt": PROMPT, "max_tokens": 16, "temperature": 0,
                                                    "stream": True}, key=key)
            st.next_event()
            ttft_rest.append(time.time() - t0)
            list(st.events())
            st.close()
            t0 = time.time()
            it = complete(req(max_tokens=16, temperature=0.0), metadata=auth(key), timeout=30)
            next(it)
            ttft_grpc.append(time.time() - t0)
            list(it)
        print(f"TTFT through the gateway, median of 20: REST stream {1e3 * median(ttft_rest):.2f} ms, "
              f"gRPC {1e3 * median(ttft_grpc):.2f} ms", flush=True)

        # Status codes.
        code, _ = code_of(req(max_tokens=4), "koi-wrong")
        check(code == grpc.StatusCode.UNAUTHENTICATED, f"a wrong key: UNAUTHENTICATED ({code})")
        try:
            for _ in complete(req(max_tokens=4), timeout=30):
                pass
            fail("Complete without a key succeeded")
        except grpc.RpcError as e:
            check(e.code() == grpc.StatusCode.UNAUTHENTICATED, f"no key: UNAUTHENTICATED ({e.code()})")
        code, details = code_of(pb.CompleteRequest(prompt=PROMPT, max_tokens=4), key)
        check(code == grpc.StatusCode.INVALID_ARGUMENT and "model" in details, f"no model: INVALID_ARGUMENT naming it ({code}, {details!r})")
        code, details = code_of(req(max_tokens=-3), key)
        check(code == grpc.StatusCode.INVALID_ARGUMENT and "max_tokens" in details, f"max_tokens -3: INVALID_ARGUMENT ({code}, {details!r})")
        code, details = code_of(req(model="nope", max_tokens=4), key)
        check(code == grpc.StatusCode.NOT_FOUND, f"an unknown model: NOT_FOUND ({code}, {details!r})")
        code, _ = code_of(req(max_tokens=4, request_id="tight-1"), tight)
        check(code == grpc.StatusCode.OK, "the tight tenant's first request passes")
        try:
            for _ in complete(req(max_tokens=4, request_id="tight-2"), metadata=auth(tight), timeout=30):
                pass
            fail("a request over the tenant's rpm passed")
        except grpc.RpcError as e:
            check(e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "per minute" in e.details(),
                  f"over rpm: RESOURCE_EXHAUSTED ({e.code()}, {e.details()!r})")
            retry = dict(e.trailing_metadata() or ()).get("retry-after", "")
            check(retry.isdigit() and int(retry) > 0, f"with a retry-after trailer ({retry!r})")

        # A client that cancels mid-stream is a client gone: recorded 499.
        stream = complete(req(max_tokens=400, temperature=0.0, request_id="grpc-cancel"), metadata=auth(key), timeout=60)
        next(stream)
        stream.cancel()
        deadline = time.time() + 10
        while time.time() < deadline and not ledger_row(store, "acme/grpc-cancel"):
            time.sleep(0.1)
        row = ledger_row(store, "acme/grpc-cancel")
        check(row is not None and row["status"] == 499, f"a cancelled stream is recorded as 499 ({row})")
        rows = {r["request_id"]: r for r in ledger(store)}
        check(rows.get("tight/tight-2", {}).get("status") == 429, "the refused request is in the ledger as 429, as over REST")

        rep.kill9()
        time.sleep(0.5)
        code, details = code_of(req(max_tokens=4), key)
        check(code == grpc.StatusCode.UNAVAILABLE, f"the replica dead: UNAVAILABLE ({code}, {details!r})")
        ch.close()
        paced(env, pb)
        print("PASS", flush=True)
    finally:
        env.close()


if __name__ == "__main__":
    main()
