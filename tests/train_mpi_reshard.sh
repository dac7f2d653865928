#!/bin/bash
# Checkpoints across device meshes (issue 17): a checkpoint saved at DP=2 x TP=2 resumes at
# DP=4 and on 1 process, and checkpoints of 1 process and of DP=4 resume at DP=2 x TP=2 and
# TP=2, each continuing within 1e-5 per step of the uninterrupted single-process run.
# Usage: train_mpi_reshard.sh KOI SHARED_DIR
KOI=$1
SHARED=$2
source "$(dirname "$0")/train_mpi_lib.sh"
trap 'rm -rf "$WORK"' EXIT
write_recipe 20

run "$KOI" train --config "$RECIPE" --out "$WORK/one"
run "${MPIRUN[@]}" -np 4 "$KOI" train --config "$RECIPE" --out "$WORK/dp2tp2" --dp 2 --tp 2
run "${MPIRUN[@]}" -np 4 "$KOI" train --config "$RECIPE" --out "$WORK/dp4"

resume_from dp2tp2 dp2tp2_to_dp4 4
grep -q "saved under dp=2 tp=2 pp=1 ep=1" "$WORK/last.txt" || { echo "FAIL: no saved mesh"; cat "$WORK/last.txt"; exit 1; }
expect_close "$WORK/one" "$WORK/dp2tp2_to_dp4" 1e-5 "DP=2 x TP=2 checkpoint resumed at DP=4"
resume_from dp2tp2 dp2tp2_to_one 0
expect_close "$WORK/one" "$WORK/dp2tp2_to_one" 1e-5 "DP=2 x TP=2 checkpoint resumed on 1 process"
resume_from one one_to_dp2tp2 4 --tp 2
expect_close "$WORK/one" "$WORK/one_to_dp2tp2" 1e-5 "1-process checkpoint resumed at DP=2 x TP=2"
resume_from dp4 dp4_to_tp2 2 --tp 2
expect_close "$WORK/one" "$WORK/dp4_to_tp2" 1e-5 "DP=4 checkpoint resumed at TP=2"
# Each resumed run logged steps 11-20 only, so the comparisons above are the continuation.
[ "$(losses "$WORK/dp4_to_tp2" | head -n 1 | cut -d' ' -f1)" -eq 11 ] || { echo "FAIL: resume did not start at 11"; exit 1; }
echo "PASS: checkpoints move between meshes"
