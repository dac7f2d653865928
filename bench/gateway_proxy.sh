#!/usr/bin/env bash
# The gateway's own cost: added latency (p50, p99) and requests/s proxying a fast backend,
# side by side with nginx (Debian's) proxying the same backend, both given 2 worker threads.
# The backend is a third nginx answering a fixed OpenAI-shaped completion with `return 200`.
# nginx opens a new upstream connection per request (its default HTTP/1.0 proxy); the gateway
# reuses pooled keep-alive connections and also authenticates, admits, routes and commits a
# usage record to its SQLite ledger before answering.
#   bench/gateway_proxy.sh BUILD_DIR [SECONDS] [CONNECTIONS]     (needs: scripts/install-deps --bench)
set -euo pipefail
build=${1:?usage: gateway_proxy.sh BUILD_DIR [SECONDS] [CONNECTIONS]}
secs=${2:-10}
conns=${3:-16}
dir=$(mktemp -d /tmp/koi-gw-bench-XXXXXX)
chmod 755 "$dir"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; sleep 0.5; rm -rf "$dir"; }
trap cleanup EXIT
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

backend=$(free_port); proxy=$(free_port)
nginx_conf() {  # name port body
  mkdir -p "$dir/$1"
  cat > "$dir/$1/nginx.conf" <<CONF
worker_processes 2;
daemon off;
pid $dir/$1/nginx.pid;
error_log $dir/$1/error.log;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $dir/$1; proxy_temp_path $dir/$1; fastcgi_temp_path $dir/$1; uwsgi_temp_path $dir/$1; scgi_temp_path $dir/$1;
  server { listen 127.0.0.1:$2; $3 }
}
CONF
}
nginx_conf backend "$backend" "location / { default_type application/json; return 200 '{\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"choices\":[{\"index\":0,\"text\":\"hello\",\"finish_reason\":\"length\"}],\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":8,\"total_tokens\":12}}'; }"
nginx_conf proxy "$proxy" "location / { proxy_pass http://127.0.0.1:$backend; }"
nginx -c "$dir/backend/nginx.conf" & pids+=($!)
nginx -c "$dir/proxy/nginx.conf" & pids+=($!)

key_line=$("$build/koi" gateway keygen --tenant bench)
key=$(echo "$key_line" | sed -n 's/^key: //p')
entry=$(echo "$key_line" | tail -1)
cat > "$dir/gateway.yaml" <<YAML
listen: 127.0.0.1:0
store: $dir/ledger.db
models:
  - name: stories
    versions: [{name: v1, weight: 100, replicas: ["http://127.0.0.1:$backend"]}]
tenants:
  - name: bench
    keys:
      $entry
YAML
"$build/koi" gateway --config "$dir/gateway.yaml" --threads 2 > "$dir/gateway.out" 2> "$dir/gateway.err" & pids+=($!)
for _ in $(seq 50); do grep -q listening "$dir/gateway.out" 2>/dev/null && break; sleep 0.1; done
gw=$(sed -n 's/^listening on //p' "$dir/gateway.out")
sleep 0.5

load="$build/bench/koi_bench_http_load"
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); $(date -u +%Y-%m-%d); ${secs}s x ${conns} connections"
direct=$("$load" "http://127.0.0.1:$backend/v1/completions" --connections "$conns" --seconds "$secs")
via_nginx=$("$load" "http://127.0.0.1:$proxy/v1/completions" --connections "$conns" --seconds "$secs")
via_gw=$("$load" "$gw/v1/completions" --connections "$conns" --seconds "$secs" --key "$key")
echo "direct   $direct"
echo "nginx    $via_nginx"
echo "gateway  $via_gw"
/usr/bin/python3 - "$direct" "$via_nginx" "$via_gw" <<'PY'
import sys
def parse(s):
    t = s.split(); return {t[i]: float(t[i + 1]) for i in range(0, len(t) - 1, 2)}
d, n, g = (parse(s) for s in sys.argv[1:])
for name, x in (("nginx", n), ("gateway", g)):
    print(f"{name:8} added p50 {x['p50_us'] - d['p50_us']:8.0f} us  added p99 {x['p99_us'] - d['p99_us']:8.0f} us  rps {x['rps']:8.0f}")
print(f"ratio gateway/nginx: added p50 {(g['p50_us'] - d['p50_us']) / max(1, n['p50_us'] - d['p50_us']):.2f}x, "
      f"rps {g['rps'] / n['rps']:.2f}x")
PY
