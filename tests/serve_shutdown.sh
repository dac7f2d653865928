#!/bin/bash
# Graceful shutdown (run by serve_test.sh, which then requires exit status 0): SIGTERM during
# a stream of 16 choices x 400 tokens. The listener closes at once; the stream either
# finishes (EXPECT_FINISH=length, the default deadline) or is cancelled at the deadline
# (EXPECT_FINISH=abort with a --shutdown-timeout far shorter than the stream), and ends with
# [DONE] either way.
set -euo pipefail
fail() { echo "FAIL: $*"; exit 1; }
expect=${EXPECT_FINISH:-length}
curl -sN "$URL/v1/completions" -o "$WORK/stream.txt" \
  -d '{"model":"stories","prompt":"Once upon a time","max_tokens":400,"n":16,"ignore_eos":true,"stream":true}' &
client=$!
for _ in $(seq 600); do [[ -s "$WORK/stream.txt" ]] && break; sleep 0.05; done  # 30 s: a loaded machine
[[ -s "$WORK/stream.txt" ]] || fail "the stream did not start"
kill -TERM "$SERVER_PID"
sleep 0.2
if curl -sS -o /dev/null -m 2 "$URL/health" 2>/dev/null; then fail "still accepting connections while draining"; fi
wait "$client" || fail "the streaming client failed"
[[ $(grep '^data: ' "$WORK/stream.txt" | tail -1) == "data: [DONE]" ]] || fail "no [DONE] at the end"
got=$({ grep -o "\"finish_reason\":\"$expect\"" "$WORK/stream.txt" || true; } | wc -l)  # 0 is a failure, said below
[[ $got == 16 ]] || fail "$got of 16 choices finished with '$expect' ($(grep -o "\"finish_reason\":\"[a-z]*\"" "$WORK/stream.txt" | sort | uniq -c | tr "\n" " "))"
echo "shutdown checks passed ($expect)"
