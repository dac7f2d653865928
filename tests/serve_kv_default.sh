#!/bin/bash
# `koi serve` with no KV flag on a TinyLlama-shape q4_0 file (random weights, 0.6 GB): the KV
# default follows the machine (logged with its reason), the KV pool is not touched at start-up,
# and the server still answers a completion. Resident memory (VmRSS), at start and after the
# completion, stays within 10% of the file size plus an allowance of 64 MiB for everything else
# (tokenizer, threads, HTTP server, the scratch of a short prompt); before the default followed
# the machine, start-up zero-filled room for 256 x 2048 tokens (22 GiB).
#   tests/serve_kv_default.sh <koi>
set -euo pipefail
KOI=$1
WORK=$(mktemp -d)
SERVER_PID=
cleanup() {
  if [[ -n "$SERVER_PID" ]] && kill -0 "$SERVER_PID" 2>/dev/null; then kill -KILL "$SERVER_PID"; fi
  rm -rf "$WORK"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; [[ -f "$WORK/server.err" ]] && cat "$WORK/server.err"; exit 1; }

"$KOI" --log-level warn convert --random tinyllama --type q4_0 -o "$WORK/tinyllama-q4_0.gguf" >/dev/null
file_kib=$(( $(stat -c %s "$WORK/tinyllama-q4_0.gguf") / 1024 ))
allowance_kib=$(( 64 * 1024 ))
limit_kib=$(( file_kib * 110 / 100 + allowance_kib ))

"$KOI" serve --model "$WORK/tinyllama-q4_0.gguf" --port 0 >"$WORK/server.out" 2>"$WORK/server.err" &
SERVER_PID=$!
for _ in $(seq 600); do
  grep -q "listening on" "$WORK/server.out" 2>/dev/null && break
  kill -0 "$SERVER_PID" 2>/dev/null || fail "server exited at start"
  sleep 0.1
done
URL=$(sed -n 's/^listening on //p' "$WORK/server.out")
[[ -n "$URL" ]] || fail "server did not print its address"
grep -q "KV cache memory by default: .* GiB, .*available after the model's" "$WORK/server.err" ||
  fail "no start-up line giving the KV default and its reason"

rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$SERVER_PID/status"; }
check_rss() {
  local rss
  rss=$(rss_kib)
  echo "$1: VmRSS $((rss / 1024)) MiB; file $((file_kib / 1024)) MiB; limit $((limit_kib / 1024)) MiB"
  (( rss <= limit_kib )) || fail "$1: VmRSS $rss kB is more than 110% of the file ($file_kib kB) + $allowance_kib kB"
}
check_rss "at start"

out=$(curl -sS -H 'Content-Type: application/json' "$URL/v1/completions" \
  -d '{"model":"tinyllama-q4_0.gguf","prompt":"Once upon a time","max_tokens":8,"temperature":0}')
[[ "$(jq -r '.usage.completion_tokens' <<<"$out")" == 8 ]] || fail "completion: $out"
check_rss "after a completion"

kill -TERM "$SERVER_PID"
status=0
wait "$SERVER_PID" || status=$?
SERVER_PID=
(( status == 0 )) || fail "server exited with $status after SIGTERM"
echo "PASS serve_kv_default"
