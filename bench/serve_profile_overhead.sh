#!/bin/bash
# koi serve with and without --profile (engine and HTTP spans), alternated ROUNDS times, each
# under the same `koi bench serve --url` load; prints each run's requests/s and the ratio of the
# medians (on / off). bench/README.md "HTTP spans".
# Usage: bench/serve_profile_overhead.sh KOI MODEL.gguf [ROUNDS]
set -eu
KOI=$1
MODEL=$2
ROUNDS=${3:-5}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
for round in $(seq "$ROUNDS"); do
  for mode in off on; do
    args=()
    [ "$mode" = on ] && args=(--profile "$WORK/profile.json")
    "$KOI" serve --model "$MODEL" --port 0 --served-model-name m "${args[@]}" > "$WORK/serve.out" 2> "$WORK/serve.err" &
    pid=$!
    for _ in $(seq 100); do grep -q "listening on" "$WORK/serve.out" && break; sleep 0.1; done
    url=$(sed -n 's/.*listening on //p' "$WORK/serve.out")
    "$KOI" bench serve --url "$url" --num-prompts 1000 --max-concurrency 8 --input-len 16 --output-len 32 \
      --result-file "$WORK/$mode-$round.json" > /dev/null
    kill -TERM "$pid"
    wait "$pid"
  done
done
python3 - "$WORK" "$ROUNDS" <<'PY'
import json, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
rate = {m: [json.load(open(f"{work}/{m}-{r}.json"))["request_throughput"] for r in range(1, rounds + 1)] for m in ("off", "on")}
for m in ("off", "on"):
    print(m, "req/s", " ".join(f"{x:.0f}" for x in rate[m]), f"median {statistics.median(rate[m]):.1f}")
print(f"on / off (medians): {statistics.median(rate['on']) / statistics.median(rate['off']):.3f}")
PY
