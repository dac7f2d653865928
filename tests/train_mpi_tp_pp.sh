#!/bin/bash
# Tensor x pipeline parallel on one device mesh (issue 17, Must show 2 and 3): TP=2 x PP=2 on
# 4 ranks (1F1B, 4 micro-batches) and DP=2 x PP=2 follow the single-process loss curve within
# 1e-5 per step for 20 steps on the same global batch; a checkpoint saved at TP=2 x PP=2
# resumes at DP=4 and on 1 process, and checkpoints of DP=4 and of 1 process resume at
# TP=2 x PP=2, each continuing within 1e-5 of the uninterrupted run.
# Usage: train_mpi_tp_pp.sh KOI SHARED_DIR
KOI=$1
SHARED=$2
source "$(dirname "$0")/train_mpi_lib.sh"
trap 'rm -rf "$WORK"' EXIT
write_recipe 20
TPPP=(--tp 2 --pp 2 --pp-microbatches 4)

run "$KOI" train --config "$RECIPE" --out "$WORK/one"
run "${MPIRUN[@]}" -np 4 "$KOI" train --config "$RECIPE" --out "$WORK/tp2pp2" "${TPPP[@]}"
grep -q 'x 4 ranks (dp=1 tp=2 pp=2 ep=1), 1f1b schedule, 4 micro-batches' "$WORK/last.txt" ||
  { echo "FAIL: the run did not announce its mesh"; cat "$WORK/last.txt"; exit 1; }
run "${MPIRUN[@]}" -np 4 "$KOI" train --config "$RECIPE" --out "$WORK/dp2pp2" --dp 2 --pp 2 --pp-microbatches 2
run "${MPIRUN[@]}" -np 4 "$KOI" train --config "$RECIPE" --out "$WORK/dp4"
expect_close "$WORK/one" "$WORK/tp2pp2" 1e-5 "TP=2 x PP=2 (1F1B, 4 micro-batches) vs 1 process"
expect_close "$WORK/one" "$WORK/dp2pp2" 1e-5 "DP=2 x PP=2 vs 1 process"
# The gradient norm (clipping is active: it exceeds grad_clip 1.0) sums each stage's split
# tensors over tp and the stages over pp: the same as one process's.
norms() { sed -n 's/^{"step":\([0-9]*\),.*"grad_norm":\([0-9.]*\).*/\1 \2/p' "$1/metrics.jsonl"; }
paste <(norms "$WORK/one") <(norms "$WORK/tp2pp2") |
  awk '{ d = $2 - $4; if (d < 0) d = -d; if (d > m) m = d; if ($2 > 1) clipped = 1 }
       END { printf "TP=2 x PP=2 grad norm vs 1 process: max diff %.2e (clipped: %d)\n", m, clipped; exit !(m <= 1e-5 && clipped && NR == 20) }' ||
  { echo "FAIL: gradient norms differ"; exit 1; }
grep -q '"layout":{"tensors":"full","mesh":"dp=1 tp=2 pp=2 ep=1","zero":0}' "$WORK/tp2pp2/ckpt-00000020/state.json" ||
  { echo "FAIL: state.json layout"; cat "$WORK/tp2pp2/ckpt-00000020/state.json"; exit 1; }
# The evaluation's loss reaches rank 0 (stage 0, which has no head) from the last stage.
grep -q '"step":20,"val_loss":[1-9]' "$WORK/tp2pp2/metrics.jsonl" ||
  { echo "FAIL: no val loss from the last stage"; grep val_loss "$WORK/tp2pp2/metrics.jsonl"; exit 1; }

resume_from tp2pp2 tp2pp2_to_dp4 4
grep -q "saved under dp=1 tp=2 pp=2 ep=1" "$WORK/last.txt" || { echo "FAIL: no saved mesh"; cat "$WORK/last.txt"; exit 1; }
expect_close "$WORK/one" "$WORK/tp2pp2_to_dp4" 1e-5 "TP=2 x PP=2 checkpoint resumed at DP=4"
resume_from tp2pp2 tp2pp2_to_one 0
expect_close "$WORK/one" "$WORK/tp2pp2_to_one" 1e-5 "TP=2 x PP=2 checkpoint resumed on 1 process"
resume_from dp4 dp4_to_tp2pp2 4 "${TPPP[@]}"
expect_close "$WORK/one" "$WORK/dp4_to_tp2pp2" 1e-5 "DP=4 checkpoint resumed at TP=2 x PP=2"
resume_from one one_to_tp2pp2 4 "${TPPP[@]}"
expect_close "$WORK/one" "$WORK/one_to_tp2pp2" 1e-5 "1-process checkpoint resumed at TP=2 x PP=2"
echo "PASS: tensor x pipeline parallel follows the single-process run and reshards"
