#!/bin/bash
# pp512 with 2 threads, quiet and beside a CPU-burning process (the burner floats, as another
# tenant's process would, unless BURNER_CPU is set), with the engine's threads pinned (--pin-threads, the default) and
# floating (--no-pin-threads), alternated in one session; prints each run's tokens/s and the
# slowdowns (quiet / beside the burner) per placement.
# Usage: bench/pp_busy_core.sh ROUNDS MODEL.gguf [KOI]   (from the repository root)
# Env: BURNER_CPU=N pins the burner to CPU N (a process bound to one core) instead.
set -euo pipefail
rounds=$1 model=$2 koi=${3:-build/koi}
burner_cmd=(timeout 120 sh -c 'while :; do :; done')
if [[ -n ${BURNER_CPU:-} ]]; then burner_cmd=(taskset -c "$BURNER_CPU" "${burner_cmd[@]}"); fi
pp() {
  "$koi" bench model -m "$model" -p 512 -n 1 -r 3 -t 2 "$1" 2>/dev/null | awk '/^pp512/ { print $2 }'
}
for round in $(seq "$rounds"); do
  declare -A quiet busy
  for placement in --no-pin-threads --pin-threads; do quiet[$placement]=$(pp "$placement"); done
  for placement in --no-pin-threads --pin-threads; do
    "${burner_cmd[@]}" &
    burner=$!
    busy[$placement]=$(pp "$placement")
    kill "$burner" 2>/dev/null || true
    wait "$burner" 2>/dev/null || true
  done
  line="round $round:"
  for placement in --no-pin-threads --pin-threads; do
    line="$line $placement ${quiet[$placement]} quiet, ${busy[$placement]} busy ($(awk -v q="${quiet[$placement]}" \
      -v b="${busy[$placement]}" 'BEGIN { printf "%.2fx", q / b }')) |"
  done
  echo "$line load $(cut -d' ' -f1 /proc/loadavg)"
done
