#!/bin/bash
# Pipeline parallel over MPI (issue 17): 2 stages with 4 micro-batches follow the
# single-process loss curve within 1e-5 per step for 20 steps on the same global batch, under
# 1F1B and under GPipe (which accumulate the same gradients in the same order, so they agree
# bitwise); tied embeddings and an uneven split of 3 layers too; the measured bubble and the
# ideal (p-1)/(m+p-1) are logged; a checkpoint saved at PP=2 resumes in 1 process and one
# saved by 1 process resumes at PP=2, on the uninterrupted curve; bad layouts are refused
# with what to change; a frozen stage is reported by the watchdog.
# Usage: train_mpi_pipeline.sh KOI SHARED_DIR
KOI=$1
SHARED=$2
source "$(dirname "$0")/train_mpi_lib.sh"
trap 'rm -rf "$WORK"' EXIT
write_recipe 20
PP=(--pp 2 --pp-microbatches 4)

"$KOI" train --config "$RECIPE" --out "$WORK/one" > /dev/null 2>&1
"${MPIRUN[@]}" -np 2 "$KOI" train --config "$RECIPE" --out "$WORK/1f1b" "${PP[@]}" > "$WORK/1f1b.txt" 2>&1 ||
  { echo "FAIL: the PP=2 run failed"; cat "$WORK/1f1b.txt"; exit 1; }
"${MPIRUN[@]}" -np 2 "$KOI" train --config "$RECIPE" --out "$WORK/gpipe" "${PP[@]}" --pp-schedule gpipe > /dev/null 2>&1
expect_close "$WORK/one" "$WORK/1f1b" 1e-5 "PP=2 1F1B x 4 micro-batches vs 1 process"
expect_close "$WORK/one" "$WORK/gpipe" 1e-5 "PP=2 GPipe x 4 micro-batches vs 1 process"
expect_close "$WORK/1f1b" "$WORK/gpipe" 0 "GPipe vs 1F1B"
expect_same_checkpoint "$WORK/1f1b" "$WORK/gpipe" 00000020 "GPipe vs 1F1B"

# The bubble: every step logs the stages' measured share beside the ideal 1/(4+1) = 0.2.
grep -q '"step":20,"loss":[^}]*"bubble":0\.[0-9]*,"bubble_ideal":0\.2000,"stage_bubble":\[0\.[0-9]*,0\.[0-9]*\]' \
  "$WORK/1f1b/metrics.jsonl" || { echo "FAIL: no bubble in metrics.jsonl"; tail -n 2 "$WORK/1f1b/metrics.jsonl"; exit 1; }
grep -q 'x 2 ranks (dp=1 tp=1 pp=2 ep=1), 1f1b schedule, 4 micro-batches' "$WORK/1f1b.txt" ||
  { echo "FAIL: the run did not announce its pipeline"; cat "$WORK/1f1b.txt"; exit 1; }
grep -q '^koi_train_pipeline_bubble_theory_ratio 0.2$' "$WORK/1f1b/metrics.prom" ||
  { echo "FAIL: no ideal bubble in metrics.prom"; grep bubble "$WORK/1f1b/metrics.prom"; exit 1; }
# 20 steps x 4 micro-batches: at least 80 activation sends from stage 0 (rank 0 writes metrics).
awk '$1 == "koi_train_collectives_total{collective=\"send\"}" { exit !($2 >= 80) }' "$WORK/1f1b/metrics.prom" ||
  { echo "FAIL: sends in metrics.prom"; grep collective "$WORK/1f1b/metrics.prom"; exit 1; }
grep -q '"layout":{"tensors":"full","mesh":"dp=1 tp=1 pp=2 ep=1","zero":0}' "$WORK/1f1b/ckpt-00000010/state.json" ||
  { echo "FAIL: the checkpoint does not record its layout"; cat "$WORK/1f1b/ckpt-00000010/state.json"; exit 1; }

# A PP=2 checkpoint continues in 1 process, and a 1-process one at PP=2.
mkdir "$WORK/pp_to_one" "$WORK/one_to_pp"
cp -r "$WORK/1f1b/ckpt-00000010" "$WORK/pp_to_one/"
cp -r "$WORK/one/ckpt-00000010" "$WORK/one_to_pp/"
"$KOI" train --config "$RECIPE" --out "$WORK/pp_to_one" --resume > /dev/null 2>&1
"${MPIRUN[@]}" -np 2 "$KOI" train --config "$RECIPE" --out "$WORK/one_to_pp" --resume "${PP[@]}" > /dev/null 2>&1
expect_close "$WORK/one" "$WORK/pp_to_one" 1e-5 "PP=2 checkpoint resumed in 1 process"
expect_close "$WORK/one" "$WORK/one_to_pp" 1e-5 "1-process checkpoint resumed at PP=2"

# Tied embeddings (the classifier on stage 1 is stage 0's table) and 3 layers split 2 + 1.
sed -i 's/layers: 2,/layers: 3, tied_embeddings: true,/' "$RECIPE"
"$KOI" train --config "$RECIPE" --out "$WORK/tied_one" > /dev/null 2>&1
"${MPIRUN[@]}" -np 2 "$KOI" train --config "$RECIPE" --out "$WORK/tied_pp" --pp 2 --pp-microbatches 2 > /dev/null 2>&1
expect_close "$WORK/tied_one" "$WORK/tied_pp" 1e-5 "tied embeddings, 3 layers, PP=2 vs 1 process"

# Refused: more stages than layers, micro-batches that do not divide a pipeline's sequences,
# --pp without its ranks, ZeRO with a pipeline, the pipeline's flags without one.
expect_refused "the model has 3 layers, fewer than the 4 pipeline stages; use --pp 3 or less" 4 --pp 4
expect_refused "train.batch_size 4 does not split into 3 micro-batches; use a --pp-microbatches that divides 4" \
  2 --pp 2 --pp-microbatches 3
expect_refused "train.batch_size 4 over --dp 2 leaves each pipeline 2 sequences, which do not split into 4 micro-batches; use a --pp-microbatches that divides 2" \
  4 --pp 2 --pp-microbatches 4
expect_refused "mesh: tp 1 x pp 2 x ep 1 = 2 does not divide the 1 ranks; start a multiple of 2 ranks (mpirun -np)" 0 --pp 2
for z in 1 2 3; do
  expect_refused "--zero $z with --pp 2: the pipeline stages keep their own AdamW and ZeRO does not shard them yet; use --zero 0 with --pp, or --zero $z with --dp alone" \
    2 --pp 2 --zero $z
done
expect_refused "unknown pipeline schedule 'zigzag' (known: 1f1b, gpipe)" 0 --pp 2 --pp-schedule zigzag
# The pipeline's keys without a pipeline: refused, not ignored.
expect_refused "pp_schedule gpipe orders a pipeline's micro-batches and needs pp > 1; leave it out without --pp" \
  0 --pp-schedule gpipe
expect_refused "pp_microbatches needs pp > 1 (without a pipeline, use grad_accum)" 0 --pp-microbatches 2
expect_refused "--no-overlap (train.overlap: false) turns off the overlap of the gradient reduction with the backward pass, which a pipeline does not overlap yet; leave it out" \
  2 --pp 2 --no-overlap

# The watchdog covers send/recv: stage 1 frozen with SIGSTOP leaves stage 0 waiting for a
# micro-batch's gradient (or the next collective); it reports stage 1 and the job ends.
frozen=""
trap 'if [ -n "$frozen" ]; then kill -9 "$frozen" 2>/dev/null || true; fi; rm -rf "$WORK"' EXIT
sed -i 's/steps: 20,/steps: 1000000,/' "$RECIPE"
"${MPIRUN[@]}" -np 2 "$KOI" train --config "$RECIPE" --out "$WORK/frozen" --pp 2 --pp-microbatches 2 \
  --collective-timeout 3 > "$WORK/frozen.txt" 2>&1 &
job=$!
frozen=$(freeze_rank "$WORK/frozen" 5 "$job") || exit 1
rc=0
wait "$job" || rc=$?
[ "$rc" -ne 0 ] || { echo "FAIL: mpirun exited 0 with a frozen stage"; exit 1; }
pattern="watchdog: rank 0 step [0-9]*: collective '[a-z -]*[0-9]*' did not complete within 3 s; not responding: rank 1$"
grep -q "$pattern" "$WORK/frozen.txt" || { echo "FAIL: no watchdog message naming rank 1"; cat "$WORK/frozen.txt"; exit 1; }
grep "$pattern" "$WORK/frozen.txt"
echo "PASS: pipeline parallel follows the single-process run"
