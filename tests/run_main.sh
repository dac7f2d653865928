#!/bin/bash
# `make run` (scripts/run-main) with MODEL given: it starts koi serve on the model, prints
# the commands to query it (the printed curl command, and the node one when the npm `openai`
# client of the tests is installed, are run here as printed), and Ctrl-C (SIGINT to its
# process group, as a terminal sends it) stops the server; exit status 0. Run on a GGUF file
# and on a Hugging Face directory given with a trailing slash (MODEL=dir/), whose printed
# model id must be the one the server serves.
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
(cd "$WORK" && /usr/bin/python3 "$REPO/tests/reference/tiny_models.py" tiny > /dev/null)
set -m  # run-main gets its own process group, as under a terminal

run_case() {  # run_case MODEL WANTED_ID
  local model=$1 want_id=$2
  MODEL="$model" PORT=0 KOI="$KOI" KOI_RUN_DIR="$WORK/run" \
    bash "$REPO/scripts/run-main" > "$WORK/out.txt" 2> "$WORK/err.txt" &
  pid=$!
  for _ in $(seq 1 300); do
    grep -q "Ctrl-C stops the server" "$WORK/out.txt" && break
    sleep 0.1
  done
  grep -q "Ctrl-C stops the server" "$WORK/out.txt" || fail "run-main printed no query commands"
  grep -qF "(model id \"$want_id\")" "$WORK/out.txt" || fail "MODEL=$model: wanted model id $want_id"
  grep -q "openai api" "$WORK/out.txt" && fail "run-main prints the openai CLI, which nothing installs"
  awk '/^  curl -s .*\/v1\/completions/ { p = 1 } p && /^$/ { exit } p' "$WORK/out.txt" > "$WORK/query.sh"
  response=$(bash "$WORK/query.sh")
  echo "$response" | grep -q '"object":"text_completion"' || fail "MODEL=$model: the printed curl command got: $response"
  if [[ -f "${KOI_NPM_CACHE:-$HOME/.cache/koi-npm}/node_modules/openai/package.json" ]]; then
    awk '/^  NODE_PATH=/ { p = 1 } p && /^$/ { exit } p' "$WORK/out.txt" > "$WORK/node.sh"
    [[ -s "$WORK/node.sh" ]] || fail "no node command although the npm openai client is installed"
    bash "$WORK/node.sh" > "$WORK/node.txt" 2>&1 || fail "MODEL=$model: the printed node command failed: $(cat "$WORK/node.txt")"
    [[ -s "$WORK/node.txt" ]] || fail "MODEL=$model: the printed node command printed nothing"
  fi

  kill -INT -- -"$pid"
  rc=0
  wait "$pid" || rc=$?
  pid=""
  [ "$rc" -eq 0 ] || fail "run-main exited $rc after Ctrl-C"
  if pgrep -f "serve --model $model" > /dev/null; then fail "koi serve still runs"; fi
}
run_case "$WORK/stories.gguf" stories.gguf
run_case "$WORK/tiny/llama_gqa/" llama_gqa
echo "PASS: served, queried with the printed commands, stopped by Ctrl-C"
