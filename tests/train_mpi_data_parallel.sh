#!/bin/bash
# Data parallel over MPI (issue 7): 2 ranks with the same global batch follow the
# single-process loss curve within 1e-5 per step; --zero 1 gives bitwise the weights and
# optimizer state of plain data parallel, and the gradient allreduce overlapped with backward
# (the default) bitwise those of --no-overlap; a checkpoint written by 2 ranks resumes on 1 and
# one written by 1 process resumes on 2 (ZeRO-1), on the uninterrupted curve; a batch that
# does not split over the ranks, and ranks that would start from different steps, are refused.
# Usage: train_mpi_data_parallel.sh KOI SHARED_DIR
KOI=$1
SHARED=$2
source "$(dirname "$0")/train_mpi_lib.sh"
trap 'rm -rf "$WORK"' EXIT
write_recipe 20

run_curve one 0
run_curve dp 2 --bucket-mb 0.05
run_curve zero 2 --zero 1
run_curve dp_after 2 --no-overlap --bucket-mb 0.05
run_curve zero_after 2 --zero 1 --no-overlap
grep -q '"step":20,"loss":[^}]*"rank_ms":\[[0-9.]*,[0-9.]*\]' "$WORK/dp/metrics.jsonl" ||
  { echo "FAIL: the 2-rank run logged no per-rank step times"; tail -n 2 "$WORK/dp/metrics.jsonl"; exit 1; }
# Time in the collectives (TimedCommunicator): 20 steps of at least 2 allreduces each (grads,
# loss) on rank 0, some time spent in them; ZeRO-1 also allgathers the parameters every step.
prom_value() { awk -v k="$2" '$1 == k { print $2 }' "$1/metrics.prom"; }
awk -v n="$(prom_value "$WORK/dp" 'koi_train_collectives_total{collective="allreduce"}')" \
    -v s="$(prom_value "$WORK/dp" 'koi_train_collective_seconds_total{collective="allreduce"}')" \
    'BEGIN { exit !(n >= 40 && s > 0) }' ||
  { echo "FAIL: allreduce count/time in metrics.prom"; grep collective "$WORK/dp/metrics.prom"; exit 1; }
awk -v n="$(prom_value "$WORK/zero" 'koi_train_collectives_total{collective="allgather"}')" 'BEGIN { exit !(n >= 20) }' ||
  { echo "FAIL: ZeRO-1 allgathers in metrics.prom"; grep collective "$WORK/zero/metrics.prom"; exit 1; }
expect_close "$WORK/one" "$WORK/dp" 1e-5 "2 ranks vs 1 process"
expect_close "$WORK/dp" "$WORK/zero" 0 "--zero 1 vs plain data parallel"
expect_same_checkpoint "$WORK/dp" "$WORK/zero" 00000020 "--zero 1 vs plain data parallel"
# The allreduce overlapped with backward (per layer, the default) sums what the bucketed
# allreduce after backward (--no-overlap) sums: the same weights and AdamW state, bitwise.
expect_same_checkpoint "$WORK/dp" "$WORK/dp_after" 00000020 "overlapped vs after-backward allreduce"
expect_same_checkpoint "$WORK/zero" "$WORK/zero_after" 00000020 "ZeRO-1 overlapped vs after backward"

# A ZeRO-1 checkpoint of 2 ranks continues on 1 process.
mkdir "$WORK/two_to_one"
cp -r "$WORK/zero/ckpt-00000010" "$WORK/two_to_one/"
"$KOI" train --config "$RECIPE" --out "$WORK/two_to_one" --resume > /dev/null 2>&1
expect_close "$WORK/one" "$WORK/two_to_one" 1e-5 "2-rank checkpoint resumed on 1 process"

# A single-process checkpoint continues on 2 ranks with ZeRO-1.
mkdir "$WORK/one_to_two"
cp -r "$WORK/one/ckpt-00000010" "$WORK/one_to_two/"
"${MPIRUN[@]}" -np 2 "$KOI" train --config "$RECIPE" --out "$WORK/one_to_two" --resume --zero 1 > /dev/null 2>&1
expect_close "$WORK/one" "$WORK/one_to_two" 1e-5 "1-process checkpoint resumed on 2 ranks"

# On the same number of ranks a resume is bitwise the uninterrupted run.
mkdir "$WORK/dp_resumed"
cp -r "$WORK/dp/ckpt-00000010" "$WORK/dp_resumed/"
"${MPIRUN[@]}" -np 2 "$KOI" train --config "$RECIPE" --out "$WORK/dp_resumed" --resume > /dev/null 2>&1
expect_same_checkpoint "$WORK/dp" "$WORK/dp_resumed" 00000020 "2 ranks resumed on 2 ranks"

# 4 sequences do not split over 3 ranks.
expect_refused "train.batch_size 4 does not split over 3 ranks; use a multiple of the rank count" 3
# Ranks that would resume from different points are refused (rank 1 sees no checkpoint).
mkdir "$WORK/empty"
if "${MPIRUN[@]}" -np 1 "$KOI" train --config "$RECIPE" --out "$WORK/dp_resumed" --resume : \
   -np 1 "$KOI" train --config "$RECIPE" --out "$WORK/empty" --resume > "$WORK/mixed.txt" 2>&1; then
  echo "FAIL: ranks at different steps were accepted"; exit 1
fi
grep -q "rank 1 has [0-9]* parameters and starts at step 0 (loader position 0), rank 0 has [0-9]*, 20 and 20; every rank must run the same recipe on the same run directory" "$WORK/mixed.txt" ||
  { echo "FAIL: no mismatch error"; cat "$WORK/mixed.txt"; exit 1; }
echo "PASS: data parallel follows the single-process run"
