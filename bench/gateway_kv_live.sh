#!/usr/bin/env bash
# KV-aware routing LIVE on the Mooncake conversation trace (issue 16, Must show 4): the first
# NUM requests of ../shared/traces/mooncake_conversation.jsonl replayed by `koi bench serve`
# (each hash id -> a fixed 16-token block, so equal hash ids make equal prefixes; lengths
# scaled by 16/512 and clipped to 480 tokens of stories260K's 512-token context; outputs
# clipped to 4 tokens; Poisson arrivals at RATE) through `koi gateway` to 4 real `koi serve
# --kv-events` replicas with KV_MEM of KV cache each, once per routing policy, with fresh
# replicas every time:
#   round_robin   rotate
#   kv_aware      the approximate prefix tree (each replica's cache modelled as an LRU set)
#   kv_events     the exact index from the replicas' KV events (gateway/kv_index.h)
# Prints per policy the prefix hit rate MEASURED on the replicas (sum of
# koi:prefix_cache_hits_total / koi:prefix_cache_queries_total over the 4), the client's TTFT
# (mean, p50, p99), and for kv_events the gateway's predicted against actual hit tokens.
#
#   [KV_MEM=16MiB] bench/gateway_kv_live.sh [KOI] [NUM_REQUESTS] [RATE]
set -euo pipefail
koi=$(realpath "${1:-build/koi}"); n=${2:-1000}; rate=${3:-20}
kv_mem=${KV_MEM:-16MiB}
shared=${KOI_SHARED_DIR:-/work/shared}
work=$(mktemp -d); pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

model=$work/stories.gguf
m=$shared/models/stories260K
"$koi" --log-level warn convert --llama2c "$m/stories260K.bin" --tokenizer "$m/tok512.bin" -o "$model" >/dev/null

# start NAME ARGS...: runs ARGS, waits for "listening on", sets URL_<NAME> (and ADMIN_<NAME>)
start() {
  local name=$1; shift
  "$@" > "$work/$name.out" 2> "$work/$name.err" &
  pids+=($!)
  for _ in $(seq 600); do grep -qs "^listening on" "$work/$name.out" && break; sleep 0.1; done
  grep -q "^listening on" "$work/$name.out" || { echo "$name did not start:"; cat "$work/$name.err"; exit 1; }
  printf -v "URL_$name" '%s' "$(awk '/^listening on/ {print $3}' "$work/$name.out")"
}
stop_all() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; pids=(); }
metric_sum() {  # URL METRIC: the sum of every series of METRIC
  curl -s "$1/metrics" | awk -v m="$2" '$1 ~ "^"m"(\\{|$)" {s += $2} END {printf "%.0f", s}'
}

printf "%-12s %9s %12s %12s %12s %10s %s\n" policy hit_rate ttft_mean_ms ttft_p50_ms ttft_p99_ms req/s "predicted/actual hit tokens"
for policy in round_robin kv_aware kv_events; do
  urls=()
  for i in 1 2 3 4; do
    start "r$i" "$koi" --log-level warn serve --model "$model" --served-model-name stories --port 0 --threads 1 \
      --http-threads 1 --kv-events --kv-cache-memory "$kv_mem"
    v="URL_r$i"; urls+=("${!v}")
  done
  replicas=$(printf '"%s", ' "${urls[@]}"); replicas=${replicas%, }
  cat > "$work/gw.yaml" <<EOF
listen: 127.0.0.1:0
admin: {listen: 127.0.0.1:0, key: bench-admin-key-0123}
store: $work/ledger-$policy.db
routing: {policy: $policy, block_bytes: 64, kv_events_poll_ms: 10}
models:
  - name: stories
    versions:
      - {name: v1, replicas: [$replicas]}
tenants:
  - {name: bench}
EOF
  start gw "$koi" --log-level warn gateway --config "$work/gw.yaml" --threads 2
  admin=$(awk '/^admin on/ {print $3}' "$work/gw.out")
  for _ in $(seq 50); do [ -n "$admin" ] && break; sleep 0.1; admin=$(awk '/^admin on/ {print $3}' "$work/gw.out"); done
  key=$(curl -s -X POST -H "authorization: Bearer bench-admin-key-0123" -d '{"tenant":"bench"}' "$admin/admin/keys" |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["key"])')
  sleep 0.5  # the kv_events subscriber takes its first snapshots
  "$koi" --log-level warn bench serve --url "$URL_gw" --api-key "$key" --model stories \
    --trace "$shared/traces/mooncake_conversation.jsonl" --trace-block-tokens 16 --max-input-len 480 --max-output-len 4 \
    --num-prompts "$n" --request-rate "$rate" --seed 1 --result-file "$work/$policy.json" > "$work/$policy.bench" ||
    { cat "$work/$policy.bench"; exit 1; }
  hits=0; queries=0
  for u in "${urls[@]}"; do
    hits=$((hits + $(metric_sum "$u" 'koi:prefix_cache_hits_total')))
    queries=$((queries + $(metric_sum "$u" 'koi:prefix_cache_queries_total')))
  done
  pred=$(curl -s "$URL_gw/metrics" | awk '/^koi_gateway_kv_hit_tokens_total/ && /kind="predicted"/ {s += $2} END {printf "%.0f", s}')
  act=$(curl -s "$URL_gw/metrics" | awk '/^koi_gateway_kv_hit_tokens_total/ && /kind="actual"/ {s += $2} END {printf "%.0f", s}')
  python3 - "$work/$policy.json" "$policy" "$hits" "$queries" "$pred" "$act" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
policy, hits, queries, pred, act = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6]
t = {k: r["ttft"][k + "_ms"] for k in ("mean", "p50", "p99")}
extra = f"{pred} / {act}" if policy == "kv_events" else "-"
print(f"{policy:<12} {hits / max(queries, 1):9.3f} {t['mean']:12.1f} {t['p50']:12.1f} {t['p99']:12.1f} "
      f"{r['request_throughput']:10.1f} {extra}   (errors {r['errors']})")
PY
  stop_all
done
