#!/bin/bash
# `koi serve` driven with curl (run by serve_test.sh, which exports URL): every endpoint,
# greedy output pinned to the llama2.c reference, SSE framing, usage, errors with status.
set -euo pipefail
fail() { echo "FAIL: $*"; exit 1; }
post() { curl -sS -H 'Content-Type: application/json' "$URL$1" -d "$2"; }
expect_eq() { [[ "$1" == "$2" ]] || fail "$3: expected [$2], got [$1]"; }

# Greedy continuation equals stories260K's reference text.
out=$(post /v1/completions '{"model":"stories","prompt":"Once upon a time","max_tokens":20,"temperature":0}')
expect_eq "$(jq -r '.choices[0].text' <<<"$out")" ", there was a little girl named Lily. She loved to play outsid" "greedy text"
expect_eq "$(jq -c '.usage' <<<"$out")" '{"prompt_tokens":5,"completion_tokens":20,"total_tokens":25,"prompt_tokens_details":{"cached_tokens":0}}' "usage"
expect_eq "$(jq -r '.object + " " + .choices[0].finish_reason' <<<"$out")" "text_completion length" "object"

# Streaming: the deltas concatenate to the same text; usage chunk; [DONE] last.
sse=$(post /v1/completions '{"model":"stories","prompt":"Once upon a time","max_tokens":20,"temperature":0,"stream":true,"stream_options":{"include_usage":true}}')
expect_eq "$(grep '^data: ' <<<"$sse" | tail -1)" "data: [DONE]" "stream end"
text=$(grep '^data: {' <<<"$sse" | sed 's/^data: //' | jq -j '.choices[0].text // empty')
expect_eq "$text" ", there was a little girl named Lily. She loved to play outsid" "streamed text"
expect_eq "$(grep '^data: {' <<<"$sse" | tail -1 | sed 's/^data: //' | jq -c '.usage')" \
  '{"prompt_tokens":5,"completion_tokens":20,"total_tokens":25,"prompt_tokens_details":{"cached_tokens":0}}' "stream usage"
# usage.prompt_tokens_details.cached_tokens: a repeated 40-token prompt hits its 2 full blocks
# before the last token (the engine computes that one whatever it holds).
ids=$(seq -s, 10 49)
expect_eq "$(post /v1/completions "{\"model\":\"stories\",\"prompt\":[$ids],\"max_tokens\":2}" | jq -c '.usage.prompt_tokens_details')" \
  '{"cached_tokens":0}' "first prompt: nothing cached"
expect_eq "$(post /v1/completions "{\"model\":\"stories\",\"prompt\":[$ids],\"max_tokens\":2}" | jq -c '.usage.prompt_tokens_details')" \
  '{"cached_tokens":32}' "repeated prompt: 2 blocks cached"
curl -sS -D "$WORK/headers.txt" -o /dev/null "$URL/v1/completions" -d '{"model":"stories","prompt":"a","max_tokens":2,"stream":true}'
grep -qi '^content-type: text/event-stream' "$WORK/headers.txt" || fail "SSE content type"

# Stop string: the text ends before it, finish_reason stop.
out=$(post /v1/completions '{"model":"stories","prompt":"Once upon a time","max_tokens":40,"temperature":0,"stop":[" Lily"]}')
expect_eq "$(jq -r '.choices[0].text + "|" + .choices[0].finish_reason' <<<"$out")" ", there was a little girl named|stop" "stop"

# Chat with n=2 and a seed: two choices, reproducible.
body='{"model":"stories","messages":[{"role":"user","content":"Tell a story"}],"max_tokens":8,"n":2,"seed":7}'
a=$(post /v1/chat/completions "$body"); b=$(post /v1/chat/completions "$body")
expect_eq "$(jq -c '[.choices[].message.content]' <<<"$a")" "$(jq -c '[.choices[].message.content]' <<<"$b")" "seeded chat"
expect_eq "$(jq -r '.object + " " + (.choices|length|tostring) + " " + .choices[1].message.role' <<<"$a")" \
  "chat.completion 2 assistant" "chat shape"
expect_eq "$(jq '.usage.completion_tokens' <<<"$a")" 16 "chat usage"

# Logprobs: one entry per token, top_logprobs sorted, the sampled greedy token is the top one.
out=$(post /v1/completions '{"model":"stories","prompt":"Once upon a time","max_tokens":3,"temperature":0,"logprobs":2}')
expect_eq "$(jq -c '.choices[0].logprobs.tokens' <<<"$out")" '[","," there"," was"]' "logprob tokens"
expect_eq "$(jq '[.choices[0].logprobs.top_logprobs[] | length] | add' <<<"$out")" 6 "top logprobs"

# Models, health, tokenize/detokenize, metrics.
expect_eq "$(curl -sS "$URL/v1/models" | jq -r '.data[0].id')" stories "models"
expect_eq "$(curl -sS -o /dev/null -w '%{http_code}' "$URL/health")" 200 "health"
expect_eq "$(post /tokenize '{"prompt":"Once upon a time"}' | jq -c '.tokens')" '[1,403,407,261,378]' "tokenize"
expect_eq "$(post /detokenize '{"tokens":[403,407,261,378]}' | jq -r '.prompt')" "Once upon a time" "detokenize"
curl -sS "$URL/metrics" >"$WORK/metrics.txt"
grep -q '^koi:generation_tokens_total{model_name="stories"} [1-9]' "$WORK/metrics.txt" || fail "metrics"

# Errors: status and OpenAI shape.
code=$(curl -sS -o "$WORK/err.json" -w '%{http_code}' "$URL/v1/completions" -d '{"model":"stories","prompt":"x","temperature":9}')
expect_eq "$code" 400 "bad temperature status"
expect_eq "$(jq -c '.error | [.type, .param]' "$WORK/err.json")" '["invalid_request_error","temperature"]' "error shape"
expect_eq "$(curl -sS -o /dev/null -w '%{http_code}' "$URL/v2/nothing")" 404 "unknown path"
# A client that disconnects mid-stream aborts its request in the engine.
curl -sS -m 0.5 -o /dev/null 2>/dev/null "$URL/v1/completions" \
  -d '{"model":"stories","prompt":"Once upon a time","max_tokens":500,"n":64,"ignore_eos":true,"stream":true}' || true
for _ in $(seq 50); do
  curl -sS "$URL/metrics" >"$WORK/metrics.txt"
  grep -q 'finished_reason="abort"} 64$' "$WORK/metrics.txt" && break
  sleep 0.1
done
grep -q 'finished_reason="abort"} 64$' "$WORK/metrics.txt" || fail "disconnect did not abort the request"
# `koi bench serve` as README.md shows it, without --model: it sends the server's only model.
"$KOI" --log-level warn bench serve --url "$URL" --max-concurrency 32 --num-prompts 8 --input-len 8 --output-len 4 \
  >"$WORK/bench.txt" 2>&1 || { cat "$WORK/bench.txt"; fail "koi bench serve without --model"; }
echo "curl checks passed"
