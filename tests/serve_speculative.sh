#!/bin/bash
# `koi serve` three ways on stories260K -- no speculation, --speculative ngram, and
# --speculative draft with a q8_0 copy of the model as the draft (it disagrees with the target
# now and then, so drafts are both accepted and rejected) -- must give byte-identical greedy
# completions over the API (single, batched, streamed and chat), and /metrics must count the
# drafts and the accepted drafts of the speculative runs (and none without speculation).
# Constrained requests (a JSON schema, a regex, a forced tool call) are among them: their drafts
# are checked against the grammar, and their greedy output must not change either.
#   tests/serve_speculative.sh <koi> <shared dir>
set -euo pipefail
koi=$1; shared=$2
work=$(mktemp -d)
server=
cleanup() {
  if [[ -n "$server" ]] && kill -0 "$server" 2>/dev/null; then kill -KILL "$server"; fi
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }

m=$shared/models/stories260K
"$koi" --log-level warn convert --llama2c "$m/stories260K.bin" --tokenizer "$m/tok512.bin" -o "$work/stories.gguf" >/dev/null
"$koi" --log-level warn convert "$work/stories.gguf" --type q8_0 -o "$work/draft.gguf" >/dev/null

# run NAME [koi serve flags...]: starts a server, writes every completion to $work/NAME.txt
# and the speculative counters to $work/NAME.metrics, stops the server.
run() {
  local name=$1; shift
  "$koi" serve --model "$work/stories.gguf" --port 0 --served-model-name stories "$@" \
    >"$work/$name.out" 2>"$work/$name.err" &
  server=$!
  for _ in $(seq 100); do
    grep -q "listening on" "$work/$name.out" 2>/dev/null && break
    kill -0 "$server" 2>/dev/null || { cat "$work/$name.err"; fail "$name: server exited at start"; }
    sleep 0.1
  done
  local url; url=$(sed -n 's/^listening on //p' "$work/$name.out")
  [[ -n "$url" ]] || fail "$name: the server did not print its address"
  post() { curl -sS -H 'Content-Type: application/json' "$url$1" -d "$2"; }
  {
    for prompt in "Once upon a time" "Lily and Ben went to the park" "The cat said"; do
      post /v1/completions "{\"model\":\"stories\",\"prompt\":\"$prompt\",\"max_tokens\":80,\"temperature\":0}" |
        jq -c '[.choices[0].text, .choices[0].finish_reason, .usage]'
    done
    # Four prompts in one request run as one batch in the engine.
    post /v1/completions '{"model":"stories","prompt":["Once upon a time","Tom had a red ball","One day","The sun"],"max_tokens":60,"temperature":0,"ignore_eos":true}' |
      jq -c '[.choices[] | [.index, .text, .finish_reason]]'
    post /v1/completions '{"model":"stories","prompt":"Once upon a time","max_tokens":100,"temperature":0,"stream":true}' |
      grep '^data: {' | sed 's/^data: //' | jq -j '.choices[0].text'
    echo
    post /v1/chat/completions '{"model":"stories","messages":[{"role":"user","content":"Tell a story"}],"max_tokens":50,"temperature":0}' |
      jq -c '.choices[0].message.content'
    post /v1/completions '{"model":"stories","prompt":"Once upon a time","max_tokens":60,"temperature":0,"stop":[" park"]}' |
      jq -c '[.choices[0].text, .choices[0].finish_reason]'
    # Constrained requests: drafts are checked against the grammar, greedy output unchanged.
    post /v1/completions '{"model":"stories","prompt":"Once upon a time","max_tokens":80,"temperature":0,"response_format":{"type":"json_schema","json_schema":{"name":"s","schema":{"type":"object","properties":{"story":{"type":"string","maxLength":60},"n":{"type":"integer"}},"required":["story","n"]}}}}' |
      jq -c '[.choices[0].text, .choices[0].finish_reason]'
    post /v1/completions '{"model":"stories","prompt":"Once upon a time","max_tokens":40,"temperature":0,"guided_regex":"( [a-z]+){3,8}\\."}' |
      jq -c '[.choices[0].text, .choices[0].finish_reason]'
    post /v1/chat/completions '{"model":"stories","messages":[{"role":"user","content":"Tell a story"}],"max_tokens":120,"temperature":0,"tools":[{"type":"function","function":{"name":"tell","parameters":{"type":"object","properties":{"title":{"type":"string","maxLength":30}},"required":["title"]}}}],"tool_choice":"required"}' |
      jq -c '[.choices[0].message.tool_calls[0].function, .choices[0].finish_reason]'
  } >"$work/$name.txt"
  curl -sS "$url/metrics" | grep '^koi:spec_decode_num_' >"$work/$name.metrics" || true
  kill -TERM "$server"
  wait "$server" || fail "$name: server exited with $? after SIGTERM"
  server=
}

run plain
run ngram --speculative ngram --num-speculative-tokens 4
run draft --speculative draft --draft-model "$work/draft.gguf" --num-speculative-tokens 3

grep -q "there was a little girl named Lily" "$work/plain.txt" || { cat "$work/plain.txt"; fail "unexpected greedy text"; }
grep -q '^\[" {\\"story\\":' "$work/plain.txt" || { cat "$work/plain.txt"; fail "no constrained JSON output"; }
grep -q '"finish_reason"\|"tool_calls"\]' "$work/plain.txt" || { cat "$work/plain.txt"; fail "no forced tool call"; }
for name in ngram draft; do
  if ! diff "$work/plain.txt" "$work/$name.txt"; then fail "--speculative $name changed the greedy output"; fi
done
# counter NAME METRIC: the value of koi:METRIC_total in NAME's scrape.
counter() { sed -n "s/^koi:$2_total{model_name=\"stories\"} //p" "$work/$1.metrics"; }
for metric in spec_decode_num_draft_tokens spec_decode_num_accepted_tokens; do
  [[ "$(counter plain $metric)" == 0 ]] || fail "plain: koi:${metric}_total is '$(counter plain $metric)', want 0"
  for name in ngram draft; do
    value=$(counter $name $metric)
    [[ "$value" =~ ^[0-9]+$ && "$value" -gt 0 ]] || { cat "$work/$name.metrics"; fail "$name: koi:${metric}_total is '$value'"; }
  done
done
for name in ngram draft; do
  drafts=$(counter $name spec_decode_num_draft_tokens); accepted=$(counter $name spec_decode_num_accepted_tokens)
  [[ $accepted -le $drafts ]] || fail "$name: $accepted accepted of $drafts drafts"
  echo "$name: $accepted of $drafts drafts accepted"
done
echo "PASS greedy output identical with and without speculation"
