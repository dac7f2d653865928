#!/bin/bash
# A real Prometheus (Debian's) scrapes `koi serve`'s /metrics, and its query API returns
# Koi's series (run by serve_test.sh, which exports URL and WORK).
set -euo pipefail
fail() { echo "FAIL: $*"; exit 1; }
command -v prometheus >/dev/null || fail "prometheus is not installed; run scripts/install-deps --test"

target=${URL#http://}
prom_port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat >"$WORK/prometheus.yml" <<YML
global:
  scrape_interval: 1s
scrape_configs:
  - job_name: koi
    static_configs:
      - targets: ["$target"]
YML
prometheus --config.file="$WORK/prometheus.yml" --storage.tsdb.path="$WORK/tsdb" \
  --web.listen-address="127.0.0.1:$prom_port" >"$WORK/prometheus.log" 2>&1 &
prom_pid=$!
trap 'kill $prom_pid 2>/dev/null || true; wait $prom_pid 2>/dev/null || true' EXIT

for _ in 1 2 3; do
  curl -sS -o /dev/null "$URL/v1/completions" -d '{"model":"stories","prompt":"Once upon a time","max_tokens":10}'
done
query() { curl -sS "http://127.0.0.1:$prom_port/api/v1/query" --data-urlencode "query=$1"; }
for _ in $(seq 60); do
  got=$(query 'koi:generation_tokens_total' 2>/dev/null | jq -r '.data.result[0].value[1] // empty' 2>/dev/null || true)
  [[ "$got" == 30 ]] && break
  sleep 0.5
done
[[ "${got:-}" == 30 ]] || { tail -5 "$WORK/prometheus.log"; fail "prometheus has koi:generation_tokens_total=${got:-none}, want 30"; }
[[ $(query 'koi:time_to_first_token_seconds_count' | jq -r '.data.result[0].value[1]') == 3 ]] || fail "ttft count"
[[ $(query 'koi:request_success_total{finished_reason="length"}' | jq -r '.data.result[0].metric.model_name') == stories ]] ||
  fail "request_success labels"
[[ $(query 'up{job="koi"}' | jq -r '.data.result[0].value[1]') == 1 ]] || fail "target not up"
p90=$(query 'histogram_quantile(0.9, koi:e2e_request_latency_seconds_bucket)' | jq -r '.data.result[0].value[1]')
[[ "$p90" != null && "$p90" != NaN ]] || fail "e2e latency quantile: $p90"
echo "prometheus checks passed"
