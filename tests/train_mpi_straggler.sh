#!/bin/bash
# Straggler detection (issue 7): rank 1, slowed to a tenth of its speed by SIGSTOP/SIGCONT,
# is flagged by rank 0 after 5 slow steps in a row, and every rank's step time is logged.
# Usage: train_mpi_straggler.sh KOI SHARED_DIR
KOI=$1
SHARED=$2
source "$(dirname "$0")/train_mpi_lib.sh"
slow=""
trap 'if [ -n "$slow" ]; then kill -CONT "$slow" 2>/dev/null || true; fi; rm -rf "$WORK"' EXIT
write_recipe 1000000
# Steps long enough (~10-20 ms on a quiet machine; a 2 ms step fits in a run window between
# two stops and breaks the streak) that each of rank 1's steps spans a SIGSTOP, and no checkpoint
# writes in between (the stop checkpoints).
sed -i 's/^model: .*/model: {dim: 256, layers: 4, heads: 4, ffn_dim: 704, context: 64}/' "$RECIPE"
sed -i 's/checkpoint_interval: 5/checkpoint_interval: 0/' "$RECIPE"

"${MPIRUN[@]}" -np 2 "$KOI" train --config "$RECIPE" --out "$WORK/run" > "$WORK/out.txt" 2>&1 &
job=$!
wait_for_step "$WORK/run" 5 "$job"
slow=$(rank_pid "$WORK/run" 1) || { echo "FAIL: rank 1 not found"; exit 1; }
# Stopped 50 ms of every ~52: rank 1 must be over 3x rank 0 (1.5x the median of two) for 5
# steps in a row, and the short run windows stretch under load (each kill and sleep is a
# process), so the stop is long enough to keep the ratio far above 3 even then.
for i in $(seq 400); do
  kill -STOP "$slow"; sleep 0.05; kill -CONT "$slow"; sleep 0.002
  if grep -q "^straggler: rank 1 " "$WORK/out.txt"; then break; fi
done
kill -TERM "$job"  # the ranks checkpoint and stop
wait "$job" || true
pattern="^straggler: rank 1 at step [0-9]*: [0-9.]* ms of compute per step, more than 1.5x the median ([0-9.]* ms) for 5 steps in a row$"
grep -q "$pattern" "$WORK/out.txt" || { echo "FAIL: rank 1 not flagged"; cat "$WORK/out.txt"; exit 1; }
grep "$pattern" "$WORK/out.txt" | head -n 1
grep -q '"rank_ms":\[[0-9.]*,[0-9.]*\]' "$WORK/run/metrics.jsonl" || { echo "FAIL: no per-rank step times"; exit 1; }
echo "PASS: the slow rank is flagged"
