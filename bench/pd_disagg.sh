#!/usr/bin/env bash
# Prefill/decode disaggregation against the colocated engine with chunked prefill, on equal
# core budgets (issue 16, Must show 3): one `koi serve --threads 2` against one prefill worker
# and one decode worker at --threads 1 each, replaying the long-prompt requests of the Azure
# LLM code trace (ContextTokens >= 2048, lengths scaled by 0.25 to a 2048-token context)
# against a random TinyLlama-1.1B-shape q4_0 model at a Poisson rate, through `koi bench
# serve`. Prints both reports (TTFT, ITL, throughput, goodput under the SLO) and, for the
# disaggregated run, the decode side's transfer path time against the prefill worker's own
# prefill time per request.
#
#   [INPUT_SCALE=0.25] [SLO_TTFT_MS=10000] [SLO_ITL_MS=150] bench/pd_disagg.sh [KOI] [NUM_REQUESTS] [RATE] [CHUNK]
set -euo pipefail
koi=$(realpath "${1:-build/koi}"); n=${2:-16}; rate=${3:-0.2}; chunk=${4:-128}
slo_ttft_ms=${SLO_TTFT_MS:-10000}; slo_itl_ms=${SLO_ITL_MS:-150}
# 0.25 maps the trace's longest prompt (7,437 tokens) into the model's 2,048-token context; a
# busy machine may need shorter prompts (INPUT_SCALE=0.0625) to stay under capacity.
input_scale=${INPUT_SCALE:-0.25}
shared=${KOI_SHARED_DIR:-/work/shared}
work=$(mktemp -d); pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

model=$work/tinyllama-q4_0.gguf
"$koi" --log-level warn convert --random tinyllama --type q4_0 -o "$model" >/dev/null
awk -F, 'NR == 1 || $2 >= 2048' "$shared/traces/azure_llm_code.csv" > "$work/long.csv"
common=(--model "$model" --served-model-name tl --kv-cache-memory 1GiB --port 0)
load=(--trace "$work/long.csv" --input-scale "$input_scale" --max-input-len 1900 --max-output-len 64 --num-prompts "$n"
      --request-rate "$rate" --token-range 32000 --seed 1 --slo-ttft-ms "$slo_ttft_ms" --slo-itl-ms "$slo_itl_ms")

# start NAME ARGS...: runs koi serve, waits for its "listening on", sets URL_<NAME> (and KV_<NAME>)
start() {
  local name=$1; shift
  "$koi" --log-level warn serve "${common[@]}" "$@" > "$work/$name.out" 2> "$work/$name.err" &
  pids+=($!)
  for _ in $(seq 3000); do grep -qs "^listening on" "$work/$name.out" && break; sleep 0.1; done
  grep -q "^listening on" "$work/$name.out" || { echo "koi serve ($name) did not start:"; cat "$work/$name.err"; exit 1; }
  printf -v "URL_$name" '%s' "$(awk '/^listening on/ {print $3}' "$work/$name.out")"
  printf -v "KV_$name" '%s' "$(awk '/^kv transfer on/ {print $4}' "$work/$name.out")"
}
stop_all() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; pids=(); }
metric() { curl -s "$1/metrics" | awk -v m="$2" '$1 ~ "^"m"(\\{|$)" {print $2}'; }

echo "== colocated: one engine, --threads 2, chunked prefill at $chunk tokens per step"
start colo --threads 2 --max-num-batched-tokens "$chunk"
"$koi" bench serve --url "$URL_colo" "${load[@]}" --result-file "$work/colo.json"
stop_all

echo "== disaggregated: prefill worker --threads 1 (chunk $chunk) + decode worker --threads 1"
start pre --threads 1 --role prefill --kv-port 0 --max-num-batched-tokens "$chunk"
start dec --threads 1 --role decode --kv-transfer-timeout 600
"$koi" bench serve --url "$URL_dec" --header "x-koi-prefill-peer:$KV_pre" "${load[@]}" --result-file "$work/pd.json"
xfer_sum=$(metric "$URL_dec" 'koi:kv_transfer_seconds_sum'); xfer_n=$(metric "$URL_dec" 'koi:kv_transfer_seconds_count')
pre_sum=$(metric "$URL_pre" 'koi:time_to_first_token_seconds_sum'); pre_n=$(metric "$URL_pre" 'koi:time_to_first_token_seconds_count')
bytes=$(metric "$URL_dec" 'koi:kv_transfer_bytes_total'); fallbacks=$(metric "$URL_dec" 'koi:kv_transfer_fallbacks_total')
awk -v xs="$xfer_sum" -v xn="$xfer_n" -v ps="$pre_sum" -v pn="$pre_n" -v b="$bytes" -v f="$fallbacks" 'BEGIN {
  printf "transfers: %d (%d fallbacks), %.1f MB per request\n", xn, f, b / xn / 1e6
  printf "per request: decode side reservation -> first token %.3f s; prefill worker arrival -> first token %.3f s\n", xs / xn, ps / pn
  printf "transfer overhead (the difference): %.3f s per request, %.1f%% of the prefill time\n", xs / xn - ps / pn, 100 * (xs / xn - ps / pn) / (ps / pn)
}'
python3 - "$work/colo.json" "$work/pd.json" <<'PY'
import json, sys
c, d = (json.load(open(p)) for p in sys.argv[1:3])
print(f"{'':22}{'colocated':>12}{'disaggregated':>15}{'ratio d/c':>11}")
rows = [("TTFT p50 ms", c["ttft"]["p50_ms"], d["ttft"]["p50_ms"]), ("TTFT p99 ms", c["ttft"]["p99_ms"], d["ttft"]["p99_ms"]),
        ("ITL p50 ms", c["itl"]["p50_ms"], d["itl"]["p50_ms"]), ("ITL p99 ms", c["itl"]["p99_ms"], d["itl"]["p99_ms"]),
        ("output tok/s", c["output_throughput"], d["output_throughput"]), ("req/s", c["request_throughput"], d["request_throughput"]),
        ("goodput req/s", c["goodput"], d["goodput"]), ("within SLO", c["good"], d["good"])]
for name, a, b in rows:
    print(f"{name:22}{a:12.2f}{b:15.2f}{(b / a if a else float('nan')):11.2f}")
PY
