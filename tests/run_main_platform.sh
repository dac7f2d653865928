#!/bin/bash
# `make run` (scripts/run-main -> scripts/run-platform) without MODEL: the platform's main job,
# with a short pipeline (KOI_PIPELINE) of the same shape as the fortunes one: train a tiny
# model, export, eval, a perplexity gate, register, promote to production, deploy. It must end
# by printing the gateway URL and a tenant API key; the printed curl command and (when the
# npm `openai` client of the tests is installed) the printed node command get completions
# through koi gateway with that key; Ctrl-C drains the deployment and stops everything (no koi
# process of the run is left). A second run finds fortunes@production registered, trains
# nothing, and serves again.
# Usage: run_main_platform.sh KOI SHARED_DIR REPO
set -euo pipefail
KOI=$1
SHARED=$2
REPO=$3
WORK=$(mktemp -d)
pid=""
# On a failure, what the run left (its replicas outlive a control plane by design) is ended
# too: every process whose command line names this test's directory.
cleanup() {
  [ -n "$pid" ] && kill -INT -- -"$pid" 2>/dev/null && sleep 2
  pkill -KILL -f "$WORK/" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; tail -n 40 "$WORK/out.txt" "$WORK/err.txt" 2>/dev/null; exit 1; }

head -c 60000 "$SHARED/data/tinyshakespeare.txt" > "$WORK/corpus.txt"
tail -c 5000 "$WORK/corpus.txt" > "$WORK/valid.txt"
cat > "$WORK/tiny.yaml" <<YAML
model: {dim: 32, layers: 2, heads: 4, kv_heads: 2, ffn_dim: 64, context: 128}
data: {text: $WORK/corpus.txt, tokenizer: char}
train: {batch_size: 4, steps: 200, lr: 3.0e-3, warmup_steps: 5, seed: 7, checkpoint_interval: 100,
        keep_checkpoints: 1, log_interval: 50, eval_iters: 2, out: $WORK/unused}
YAML
cat > "$WORK/pipeline.yaml" <<YAML
apiVersion: koi/v1
kind: Pipeline
metadata: {name: fortunes}
spec:
  steps:
    - name: train
      job: {kind: train, recipe: $WORK/tiny.yaml, args: [--threads, "1"], resources: {cpu: 1, memoryMiB: 1024}}
    - name: export
      job: {command: ["\${koi}", train, export, "\${steps.train.checkpointDir}", -o, "\${dir}/fortunes.gguf"]}
    - name: eval
      job: {kind: eval, args: [-m, "\${dir}/fortunes.gguf", -d, $WORK/valid.txt]}
    - name: quality
      gate: {metricsFrom: eval, condition: "perplexity <= 1000"}
    - name: register
      register: {model: fortunes, from: train, artifact: "\${dir}/fortunes.gguf", format: gguf, metricsFrom: eval}
    - name: promote
      promote: {alias: production}
    - name: serve
      deploy: {name: fortunes, replicas: {min: 1, max: 1}, resources: {cpu: 1, memoryMiB: 1024}}
YAML
set -m  # run-main gets its own process group, as under a terminal

run_once() {  # run_once LABEL
  KOI_PIPELINE="$WORK/pipeline.yaml" PORT=0 ADMIN_PORT=0 KOI="$KOI" KOI_RUN_DIR="$WORK/run" \
    bash "$REPO/scripts/run-main" > "$WORK/out.txt" 2> "$WORK/err.txt" &
  pid=$!
  for _ in $(seq 1 1800); do
    grep -q "Ctrl-C drains the deployment" "$WORK/out.txt" && break
    kill -0 "$pid" 2>/dev/null || fail "$1: run-main exited early"
    sleep 0.1
  done
  grep -q "Ctrl-C drains the deployment" "$WORK/out.txt" || fail "$1: run-main printed no query commands"
  grep -q "API key koi-" "$WORK/out.txt" || fail "$1: no tenant API key printed"
  awk '/^  curl -s .*\/v1\/completions/ { p = 1 } p && /^$/ { exit } p' "$WORK/out.txt" > "$WORK/query.sh"
  response=$(bash "$WORK/query.sh")
  echo "$response" | grep -q '"object":"text_completion"' || fail "$1: the printed curl command got: $response"
  if [[ -f "${KOI_NPM_CACHE:-$HOME/.cache/koi-npm}/node_modules/openai/package.json" ]]; then
    awk '/^  NODE_PATH=/ { p = 1 } p && /^$/ { exit } p' "$WORK/out.txt" > "$WORK/node.sh"
    [[ -s "$WORK/node.sh" ]] || fail "$1: no node command although the npm openai client is installed"
    bash "$WORK/node.sh" > "$WORK/node.txt" 2>&1 || fail "$1: the printed node command failed: $(cat "$WORK/node.txt")"
    [[ -s "$WORK/node.txt" ]] || fail "$1: the printed node command printed nothing"
  fi
  # The printed console address serves the console, and the printed token logs in.
  console_url=$(sed -n 's/^or in a browser: \(http:[^ ]*\) (the web console; log in with the token \(.*\))$/\1/p' "$WORK/out.txt")
  console_token=$(sed -n 's/^or in a browser: http:[^ ]* (the web console; log in with the token \(.*\))$/\1/p' "$WORK/out.txt")
  [[ -n "$console_url" && -n "$console_token" ]] || fail "$1: no console address and token printed"
  curl -sf "$console_url" | grep -q "<title>Koi console</title>" || fail "$1: $console_url is not the console"
  curl -sf "${console_url}apis/v1/whoami" -H "Authorization: Bearer $console_token" | grep -q '"admin":false' ||
    fail "$1: the printed console token is not a tenant's"
  kill -INT -- -"$pid"
  rc=0
  wait "$pid" || rc=$?
  pid=""
  [ "$rc" -eq 0 ] || fail "$1: run-main exited $rc after Ctrl-C"
  for _ in $(seq 1 50); do
    pgrep -f "$WORK/run" > /dev/null || break
    sleep 0.2
  done
  if pgrep -f "$WORK/run" > /dev/null; then fail "$1: processes of the run are left: $(pgrep -af "$WORK/run")"; fi
}

run_once "first run"
grep -q "submitted pipeline fortunes" "$WORK/err.txt" || fail "the first run submitted no pipeline"
grep -q "all 7 steps succeeded" "$WORK/err.txt" || fail "the first run's pipeline did not succeed"
run_once "second run"
grep -q "fortunes@production is registered: deploying it" "$WORK/err.txt" || fail "the second run did not reuse the model"
grep -q "submitted pipeline" "$WORK/err.txt" && fail "the second run trained again"
echo "PASS: make run trained, registered and deployed through the pipeline, served through the gateway, and reused the model"
