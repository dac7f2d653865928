#!/bin/bash
# Where the CPU goes beside a burner: 2-thread pp512 (-r 8, long enough to measure in) next to
# a CPU-burning process, and each Koi thread's CPU seconds over 3 s of it (from
# /proc/PID/task/*/stat, after 4 s of loading) as a share of the wall time, with the CPUs each
# thread may use.
# Usage: bench/pp_thread_share.sh MODEL.gguf [--pin-threads|--no-pin-threads] [KOI]
# Env: BURNER_CPU=N binds the burner to CPU N (default: it floats).
set -euo pipefail
model=$1 placement=${2:---pin-threads} koi=${3:-build/koi}
burner_cmd=(timeout 120 sh -c 'while :; do :; done')
if [[ -n ${BURNER_CPU:-} ]]; then burner_cmd=(taskset -c "$BURNER_CPU" "${burner_cmd[@]}"); fi
"${burner_cmd[@]}" &
burner=$!
out=$(mktemp)
trap 'kill "$burner" 2>/dev/null || true; rm -f "$out"' EXIT
"$koi" bench model -m "$model" -p 512 -n 1 -r 8 -t 2 "$placement" >"$out" 2>&1 &
koi_pid=$!
sleep 4
ticks() { awk '{ print $14 + $15 }' "$1/stat"; }
declare -A before
start=$(date +%s.%N)
for task in /proc/$koi_pid/task/*; do before[$task]=$(ticks "$task"); done
sleep 3
wall=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')
hz=$(getconf CLK_TCK)
for task in /proc/$koi_pid/task/*; do
  [[ -n ${before[$task]:-} ]] || continue  # started during the 3 s
  awk -v tid="${task##*/}" -v a="${before[$task]}" -v b="$(ticks "$task")" -v w="$wall" -v hz="$hz" \
    -v cpus="$(awk '/Cpus_allowed_list/ { print $2 }' "$task/status")" \
    'BEGIN { printf "thread %s: %.0f%% of the wall time, CPUs %s\n", tid, (b - a) / hz / w * 100, cpus }'
done
wait "$koi_pid"
grep pp512 "$out"
