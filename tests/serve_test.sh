#!/bin/bash
# Integration-test driver for `koi serve`: converts stories260K to GGUF in a temp dir,
# starts `koi serve` on a free port (port 0), waits for "listening on http://...", runs the
# test body with URL, KOI, SERVER_PID and WORK exported, then sends SIGTERM and requires a
# graceful exit with status 0.
#   tests/serve_test.sh <koi> <shared dir> <body: *.sh or *.mjs> [extra koi serve flags...]
set -euo pipefail
export KOI=$1 SHARED=$2
body=$3
shift 3
export WORK=$(mktemp -d)
cleanup() {
  if [[ -n "${SERVER_PID:-}" ]] && kill -0 "$SERVER_PID" 2>/dev/null; then kill -KILL "$SERVER_PID"; fi
  rm -rf "$WORK"
}
trap cleanup EXIT

"$KOI" --log-level warn convert --llama2c "$SHARED/models/stories260K/stories260K.bin" \
  --tokenizer "$SHARED/models/stories260K/tok512.bin" -o "$WORK/stories.gguf" >/dev/null
"$KOI" serve --model "$WORK/stories.gguf" --port 0 --served-model-name stories "$@" \
  >"$WORK/server.out" 2>"$WORK/server.err" &
export SERVER_PID=$!
for _ in $(seq 100); do
  grep -q "listening on" "$WORK/server.out" 2>/dev/null && break
  kill -0 "$SERVER_PID" 2>/dev/null || { cat "$WORK/server.err"; echo "FAIL: server exited at start"; exit 1; }
  sleep 0.1
done
export URL=$(sed -n 's/^listening on //p' "$WORK/server.out")
[[ -n "$URL" ]] || { echo "FAIL: server did not print its address"; exit 1; }

case "$body" in
  *.mjs) node "$body" ;;
  *) bash "$body" ;;
esac

# A body may have sent SIGTERM itself, and the server may have ended already (a short
# --shutdown-timeout): then there is no process left to signal, and wait below has its status.
grep -q "shutting down" "$WORK/server.err" || kill -TERM "$SERVER_PID" 2>/dev/null || true
status=0
wait "$SERVER_PID" || status=$?
SERVER_PID=
if [[ $status -ne 0 ]]; then cat "$WORK/server.err"; echo "FAIL: server exited with $status after SIGTERM"; exit 1; fi
grep -q "shutdown complete" "$WORK/server.err" || { echo "FAIL: no graceful shutdown"; exit 1; }
echo "PASS $(basename "$body")"
