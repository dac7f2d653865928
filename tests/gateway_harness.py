"""Harness for the koi gateway integration tests: real `koi serve` replicas on the
stories260K model, a real PostgreSQL started here (initdb/pg_ctl in a temp dir, as the
postgres user when run as root), the gateway itself, and small HTTP helpers. Stdlib only;
run with Debian's /usr/bin/python3."""
import http.client, json, os, shutil, signal, subprocess, sys, tempfile, threading, time, urllib.request, urllib.error

KOI = os.environ.get("KOI_BIN", "")
GATEWAY = os.environ.get("KOI_GATEWAY_BIN", KOI)  # the gateway may come from another build than the replicas
SHARED = os.environ.get("KOI_SHARED_DIR", "/work/shared")
ADMIN_KEY = "admin-key-0123456789"


LOG_DIRS = []


def fail(msg):
    print("FAIL: " + msg, flush=True)
    for d in LOG_DIRS:
        for name in sorted(os.listdir(d)):
            if name.endswith(".log"):
                with open(os.path.join(d, name)) as f:
                    print(f"--- {name} (last lines)\n" + "".join(f.readlines()[-15:]), flush=True)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)
    print("ok: " + msg, flush=True)


class Proc:
    """A child process that prints 'listening on http://HOST:PORT' when ready."""

    def __init__(self, args, name, log_dir):
        self.name = name
        self.log = open(os.path.join(log_dir, name + ".log"), "w")
        self.p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=self.log, text=True)
        self.url, self.admin, self.kv, self.grpc = None, None, None, None
        deadline = time.time() + 60
        while time.time() < deadline:
            line = self.p.stdout.readline()
            if not line:
                fail(f"{name} exited before listening; see {self.log.name}")
            if line.startswith("kv transfer on "):  # koi serve --role prefill
                self.kv = line.split()[-1].strip()
            if line.startswith("listening on "):
                self.url = line.split()[-1].strip()
                if args[1] != "gateway" and args[2] != "gateway":
                    break
            if line.startswith("grpc on "):  # koi gateway with grpc_listen
                self.grpc = line.split()[-1].strip()
            if line.startswith("admin on "):
                self.admin = line.split()[-1].strip()
                break
        threading.Thread(target=self.p.stdout.read, daemon=True).start()

    def kill9(self):
        self.p.send_signal(signal.SIGKILL)
        self.p.wait()

    def stop(self):
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(10)
            except subprocess.TimeoutExpired:
                self.kill9()


class Env:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="koi-gw-it-")
        LOG_DIRS.append(self.dir)
        os.chmod(self.dir, 0o777)
        self.procs = []
        self.pg = None
        self.model = os.path.join(self.dir, "stories.gguf")
        m = os.path.join(SHARED, "models/stories260K")
        subprocess.run([KOI, "convert", "--llama2c", m + "/stories260K.bin", "--tokenizer", m + "/tok512.bin", "-o", self.model],
                       check=True, stdout=subprocess.DEVNULL)

    def replica(self, name, port=0, extra=(), model=None):
        p = Proc([KOI, "serve", "--model", model or self.model, "--port", str(port), "--served-model-name", "stories",
                  "--threads", "1", "--http-threads", "2", *extra], name, self.dir)
        self.procs.append(p)
        return p

    def gateway(self, config_text, name="gateway", store=None):
        path = os.path.join(self.dir, name + ".yaml")
        with open(path, "w") as f:
            f.write(config_text)
        args = [GATEWAY, "gateway", "--config", path, "--threads", "2"]
        if store:
            args += ["--store", store]
        p = Proc(args, name, self.dir)
        self.procs.append(p)
        return p

    def postgres(self):
        """Starts a private PostgreSQL on a free port; returns its URL."""
        pgbin = "/usr/lib/postgresql/15/bin"
        data = os.path.join(self.dir, "pg")
        as_pg = ["runuser", "-u", "postgres", "--"] if os.getuid() == 0 else []
        os.makedirs(data)
        if os.getuid() == 0:
            shutil.chown(data, "postgres", "postgres")
        subprocess.run(as_pg + [pgbin + "/initdb", "-D", data, "-U", "koi", "--auth=trust"], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        import socket
        s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
        subprocess.run(as_pg + [pgbin + "/pg_ctl", "-D", data, "-l", data + "/log", "-w", "-o",
                                f"-p {port} -k {data} -c listen_addresses=127.0.0.1", "start"],
                       check=True, stdout=subprocess.DEVNULL)
        self.pg = (as_pg, pgbin, data)
        return f"postgres://koi@127.0.0.1:{port}/postgres"

    def close(self):
        for p in self.procs:
            p.stop()
        if self.pg:
            as_pg, pgbin, data = self.pg
            subprocess.run(as_pg + [pgbin + "/pg_ctl", "-D", data, "-m", "immediate", "stop"], stdout=subprocess.DEVNULL)
        shutil.rmtree(self.dir, ignore_errors=True)


def config(replicas_by_version, store, tenants="", extra="", model="stories"):
    versions = "".join(
        f"      - {{name: {v}, weight: {w}, replicas: [{', '.join(json.dumps(u) for u in urls)}]}}\n"
        for v, (w, urls) in replicas_by_version.items())
    return (f"listen: 127.0.0.1:0\nadmin: {{listen: 127.0.0.1:0, key: {ADMIN_KEY}}}\nstore: {json.dumps(store)}\n"
            f"health: {{interval_ms: 200, timeout_ms: 500}}\nbreaker: {{failures: 2, open_ms: 1000}}\n"
            f"timeouts: {{connect_ms: 500, first_byte_ms: 10000, idle_ms: 10000}}\n{extra}"
            f"models:\n  - name: {model}\n    price: {{prompt_per_1k: 0.5, completion_per_1k: 1.5}}\n    versions:\n{versions}"
            f"tenants:\n  - {{name: acme}}\n{tenants}")


def call(url, body=None, key=None, method=None, headers=None, timeout=30):
    """Returns (status, body text, response headers)."""
    h = {"content-type": "application/json"}
    if key:
        h["authorization"] = "Bearer " + key
    h.update(headers or {})
    data = json.dumps(body).encode() if isinstance(body, dict) else body
    req = urllib.request.Request(url, data=data, headers=h, method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode(), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(), dict(e.headers)
    except (urllib.error.URLError, http.client.HTTPException, ConnectionError, TimeoutError, OSError) as e:
        return 0, str(e), {}


def admin(gw, method, target, body=None):
    status, text, _ = call(gw.admin + target, body, ADMIN_KEY, method=method)
    if status != 200:
        fail(f"admin {method} {target}: {status} {text}")
    return json.loads(text)


def new_key(gw, tenant="acme"):
    return admin(gw, "POST", "/admin/keys", {"tenant": tenant})["key"]


def completion(gw, key, prompt="Once upon a time", max_tokens=8, stream=False, rid=None, timeout=30):
    """A completion; returns (status, usage dict or None, text)."""
    body = {"model": "stories", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0}
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    headers = {"x-request-id": rid} if rid else {}
    status, text, _ = call(gw.url + "/v1/completions", body, key, headers=headers, timeout=timeout)
    if status != 200:
        return status, None, text
    if not stream:
        return status, json.loads(text)["usage"], text
    usage = None
    events = [l[6:] for l in text.split("\n") if l.startswith("data: ")]
    if not events or events[-1] != "[DONE]":
        return 599, None, text
    for e in events[:-1]:
        o = json.loads(e)
        if o.get("usage"):
            usage = o["usage"]
    return status, usage, text


def ledger(store_spec, koi=None):
    """Usage rows as dicts, read back through `koi gateway usage`-independent SQL."""
    if store_spec.startswith("postgres"):
        out = subprocess.run(["psql", store_spec, "-At", "-F", "\t", "-c",
                              "select request_id, tenant, status, prompt_tokens, completion_tokens, version, replica from usage"],
                             check=True, capture_output=True, text=True).stdout
    else:
        out = subprocess.run(["sqlite3", "-separator", "\t", store_spec,
                              "select request_id, tenant, status, prompt_tokens, completion_tokens, version, replica from usage"],
                             check=True, capture_output=True, text=True).stdout
    rows = []
    for line in out.split("\n"):
        if line:
            rid, tenant, status, p, c, v, r = line.split("\t")
            rows.append(dict(request_id=rid, tenant=tenant, status=int(status), prompt=int(p), completion=int(c), version=v, replica=r))
    return rows


class Stream:
    """One streaming request on a raw socket, read event by event: the tests see each
    server-sent event the moment its last byte arrives (urllib would buffer). Chunked
    (HTTP/1.1) and close-delimited (HTTP/1.0) bodies both work; `cut` is True when the
    connection ended without the terminating chunk."""

    def __init__(self, url, path, body, key=None, headers=None, timeout=30, version="1.1"):
        import socket
        from urllib.parse import urlsplit
        u = urlsplit(url)
        self.sock = socket.create_connection((u.hostname, u.port), timeout=timeout)
        data = json.dumps(body).encode()
        h = {"Host": f"{u.hostname}:{u.port}", "Content-Type": "application/json", "Content-Length": str(len(data))}
        if key:
            h["Authorization"] = "Bearer " + key
        h.update(headers or {})
        self.sock.sendall((f"POST {path} HTTP/{version}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items()) + "\r\n").encode() + data)
        self.buf = b""
        self.body = b""  # decoded body bytes not yet split into events
        self.eof = False
        self.cut = False
        while b"\r\n\r\n" not in self.buf:
            if not self._recv():
                raise ConnectionError("connection closed before the response headers")
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = head.decode().split("\r\n")
        self.status_line = lines[0]
        self.status = int(lines[0].split()[1])
        self.headers = {l.split(":", 1)[0].strip().lower(): l.split(":", 1)[1].strip() for l in lines[1:]}
        self.chunked = self.headers.get("transfer-encoding", "").lower() == "chunked"
        self.length = int(self.headers["content-length"]) if "content-length" in self.headers else None

    def _recv(self):
        try:
            d = self.sock.recv(65536)
        except (ConnectionResetError, OSError):
            d = b""
        if not d:
            return False
        self.buf += d
        return True

    def _decode(self):
        """Moves whole chunks (or all bytes, when not chunked) from buf to body."""
        if not self.chunked:
            self.body += self.buf
            self.buf = b""
            if self.length is not None and len(self.body) >= self.length:
                self.eof = True
            return
        while b"\r\n" in self.buf:
            size_line, rest = self.buf.split(b"\r\n", 1)
            size = int(size_line.split(b";")[0], 16)
            if len(rest) < size + 2:
                return
            if size == 0:
                self.eof = True
                self.buf = b""
                return
            self.body += rest[:size]
            self.buf = rest[size + 2:]

    def next_event(self):
        """The next event's data ('' for an event without data), or None at the end."""
        while True:
            self._decode()
            if b"\n\n" in self.body:
                ev, self.body = self.body.split(b"\n\n", 1)
                return "\n".join(l[5:].lstrip() for l in ev.decode().split("\n") if l.startswith("data:"))
            if self.eof:
                return None
            if not self._recv():
                self.eof = True
                self.cut = self.chunked or (self.length is not None and len(self.body) < self.length)
                self._decode()

    def events(self):
        while (e := self.next_event()) is not None:
            yield e

    def close(self):
        self.sock.close()


def free_port():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def ledger_row(store, request_id, columns="status, prompt_tokens, completion_tokens, ttft_ms, latency_ms"):
    """One usage row of the SQLite ledger as a dict of `columns` (None when absent)."""
    out = subprocess.run(["sqlite3", "-separator", "\t", store, f"select {columns} from usage where request_id = '{request_id}'"],
                         check=True, capture_output=True, text=True).stdout.strip()
    if not out:
        return None
    def value(v):
        for kind in (int, float):
            try:
                return kind(v)
            except ValueError:
                pass
        return v
    names = [c.strip() for c in columns.split(",")]
    return {n: value(v) for n, v in zip(names, out.split("\n")[0].split("\t"))}


def npm_dir():
    """The pinned `openai` npm client, installed into $KOI_NPM_CACHE (default ~/.cache/koi-npm)
    when missing, as tests/serve_npm.sh does; returns the directory holding node_modules."""
    d = os.environ.get("KOI_NPM_CACHE", os.path.expanduser("~/.cache/koi-npm"))
    try:
        with open(os.path.join(d, "node_modules/openai/package.json")) as f:
            if '"version": "7.59.0"' in f.read():
                return d
    except OSError:
        pass
    os.makedirs(d, exist_ok=True)
    subprocess.run(["npm", "i", "--prefix", d, "--no-audit", "--no-fund", "openai@7.59.0"], check=True, stdout=subprocess.DEVNULL)
    return d
