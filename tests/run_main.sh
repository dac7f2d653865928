#!/bin/bash
# `make run` (scripts/run-main) with MODEL given: it starts koi serve on the model, prints
# the commands to query it (the printed curl command is run here as printed), and Ctrl-C
# (SIGINT to its process group, as a terminal sends it) stops the server; exit status 0.
# Usage: run_main.sh KOI SHARED_DIR REPO
set -euo pipefail
KOI=$1
SHARED=$2
REPO=$3
WORK=$(mktemp -d)
pid=""
trap '[ -n "$pid" ] && kill -TERM -- -"$pid" 2>/dev/null; rm -rf "$WORK"' EXIT
fail() { echo "FAIL: $*"; cat "$WORK/out.txt" "$WORK/err.txt" 2>/dev/null; exit 1; }

"$KOI" convert --llama2c "$SHARED/models/stories260K/stories260K.bin" \
  --tokenizer "$SHARED/models/stories260K/tok512.bin" -o "$WORK/stories.gguf" > /dev/null
set -m  # run-main gets its own process group, as under a terminal
MODEL="$WORK/stories.gguf" PORT=0 KOI="$KOI" KOI_RUN_DIR="$WORK/run" \
  bash "$REPO/scripts/run-main" > "$WORK/out.txt" 2> "$WORK/err.txt" &
pid=$!
for _ in $(seq 1 300); do
  grep -q "Ctrl-C stops the server" "$WORK/out.txt" && break
  sleep 0.1
done
grep -q "Ctrl-C stops the server" "$WORK/out.txt" || fail "run-main printed no query commands"
awk '/^  curl -s .*\/v1\/completions/ { p = 1 } p && /^$/ { exit } p' "$WORK/out.txt" > "$WORK/query.sh"
response=$(bash "$WORK/query.sh")
echo "$response" | grep -q '"object":"text_completion"' || fail "the printed curl command got: $response"

kill -INT -- -"$pid"
rc=0
wait "$pid" || rc=$?
pid=""
[ "$rc" -eq 0 ] || fail "run-main exited $rc after Ctrl-C"
if pgrep -f "serve --model $WORK/stories.gguf" > /dev/null; then fail "koi serve still runs"; fi
echo "PASS: served, queried with the printed command, stopped by Ctrl-C"
