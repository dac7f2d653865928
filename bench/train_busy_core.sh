#!/bin/bash
# 2-thread training step time with and without a CPU-burning process, for one or more koi
# binaries alternated in one session (the thread pool's tolerance of a descheduled thread).
# Median of steps 11-40 of the shakespeare_char recipe; run from the repository root.
# Usage: bench/train_busy_core.sh ROUNDS KOI [KOI...]
set -euo pipefail
rounds=$1
shift
median() {
  sed -n 's/^{"step":\([0-9]*\),"loss".*"step_ms":\([0-9.]*\)}$/\1 \2/p' "$1" |
    awk '$1 > 10 { print $2 }' | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'
}
for round in $(seq "$rounds"); do
  for burner in no yes; do
    for koi in "$@"; do
      work=$(mktemp -d)
      burner_pid=
      if [[ $burner == yes ]]; then
        timeout 60 sh -c 'while :; do :; done' &
        burner_pid=$!
      fi
      "$koi" train --config recipes/shakespeare_char.yaml --out "$work/run" --steps 40 --threads 2 \
        >/dev/null 2>"$work/log"
      if [[ -n $burner_pid ]]; then kill "$burner_pid" 2>/dev/null || true; wait "$burner_pid" 2>/dev/null || true; fi
      echo "round $round burner $burner $koi $(median "$work/run/metrics.jsonl") ms/step (load $(cut -d' ' -f1 /proc/loadavg))"
      rm -rf "$work"
    done
  done
done
