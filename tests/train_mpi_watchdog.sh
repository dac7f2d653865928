#!/bin/bash
# The collective watchdog (issue 7): rank 1 frozen with SIGSTOP is detected by rank 0 within
# the timeout; the message names the detecting rank, the step, the collective and the rank
# that stopped answering, and mpirun exits non-zero. Extra arguments go to koi train (the
# ZeRO-3 variant: its non-blocking per-layer collectives).
# Usage: train_mpi_watchdog.sh KOI SHARED_DIR [TRAIN_ARGS...]
KOI=$1
SHARED=$2
shift 2
source "$(dirname "$0")/train_mpi_lib.sh"
frozen=""
trap 'if [ -n "$frozen" ]; then kill -9 "$frozen" 2>/dev/null || true; fi; rm -rf "$WORK"' EXIT
write_recipe 1000000
TIMEOUT=3

"${MPIRUN[@]}" -np 2 "$KOI" train --config "$RECIPE" --out "$WORK/run" --bucket-mb 0.05 \
  --collective-timeout "$TIMEOUT" "$@" > "$WORK/out.txt" 2>&1 &
job=$!
wait_for_step "$WORK/run" 5 "$job"
frozen=$(rank_pid "$WORK/run" 1) || { echo "FAIL: rank 1 not found"; exit 1; }
kill -STOP "$frozen"
start=$(date +%s.%N)
rc=0
wait "$job" || rc=$?
elapsed=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
echo "frozen rank detected and the job ended in ${elapsed} s (timeout ${TIMEOUT} s), exit status $rc"
[ "$rc" -ne 0 ] || { echo "FAIL: mpirun exited 0"; exit 1; }
# The timeout, the roll call (at most 2 s) and mpirun's teardown.
awk -v e="$elapsed" -v t="$TIMEOUT" 'BEGIN { exit !(e >= t && e < t + 10) }' ||
  { echo "FAIL: took ${elapsed} s"; cat "$WORK/out.txt"; exit 1; }
pattern="watchdog: rank 0 step [0-9]*: collective '[a-z -]*[0-9]*' did not complete within $TIMEOUT s; not responding: rank 1$"
grep -q "$pattern" "$WORK/out.txt" || { echo "FAIL: no watchdog message naming rank 1"; cat "$WORK/out.txt"; exit 1; }
grep "$pattern" "$WORK/out.txt"
echo "PASS: the frozen rank is reported"
