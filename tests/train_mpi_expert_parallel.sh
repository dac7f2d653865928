#!/bin/bash
# Expert parallel over MPI (issue 17): a mixture-of-experts model (4 experts, 2 per token,
# the router's load-balancing loss on) with its experts split over 2 ranks, tokens dispatched
# to the experts' owners and combined back with all-to-all, follows the single-process loss
# curve within 1e-5 per step for 20 steps on the same global batch; an EP=2 checkpoint resumes
# in 1 process on that curve; the MoE model at PP=2, DP=2 and DP=2 with ZeRO-3 follows it too
# (the load-balancing statistics summed over the dp group); bad layouts are refused
# with what to change.
# Usage: train_mpi_expert_parallel.sh KOI SHARED_DIR
KOI=$1
SHARED=$2
source "$(dirname "$0")/train_mpi_lib.sh"
trap 'rm -rf "$WORK"' EXIT
write_recipe 20
DENSE=$WORK/dense.yaml
cp "$RECIPE" "$DENSE"
sed -i 's/ffn_dim: 64,/ffn_dim: 32, experts: 4, experts_per_token: 2,/' "$RECIPE"
grep -q 'experts: 4' "$RECIPE" || { echo "FAIL: the recipe has no experts"; cat "$RECIPE"; exit 1; }

"$KOI" train --config "$RECIPE" --out "$WORK/one" > /dev/null 2>&1
"${MPIRUN[@]}" -np 2 "$KOI" train --config "$RECIPE" --out "$WORK/ep" --ep 2 > "$WORK/ep.txt" 2>&1 ||
  { echo "FAIL: the EP=2 run failed"; cat "$WORK/ep.txt"; exit 1; }
expect_close "$WORK/one" "$WORK/ep" 1e-5 "EP=2 vs 1 process"
grep -q 'x 2 ranks (dp=1 tp=1 pp=1 ep=2)' "$WORK/ep.txt" ||
  { echo "FAIL: the run did not announce expert parallelism"; cat "$WORK/ep.txt"; exit 1; }
# Per step and layer: inputs and outputs forward, gradients backward = 4 all-to-alls on rank 0.
awk '$1 == "koi_train_collectives_total{collective=\"alltoall\"}" { exit !($2 >= 20 * 2 * 4) }' "$WORK/ep/metrics.prom" ||
  { echo "FAIL: all-to-alls in metrics.prom"; grep collective "$WORK/ep/metrics.prom"; exit 1; }

# Plain data parallel (and ZeRO-3) on the MoE model: the router's load-balancing statistics
# are summed over the dp group, so the aux loss is the whole batch's as in one process.
run_curve dp 2 --dp 2
expect_close "$WORK/one" "$WORK/dp" 1e-5 "MoE at DP=2 vs 1 process"
run_curve dp_zero3 2 --dp 2 --zero 3
expect_close "$WORK/one" "$WORK/dp_zero3" 1e-5 "MoE at DP=2 with ZeRO-3 vs 1 process"

# A pipeline over the MoE model: each stage adds its layers' router term to the loss and
# backward (one micro-batch: the load-balancing statistics are a micro-batch's, see train.md).
"${MPIRUN[@]}" -np 2 "$KOI" train --config "$RECIPE" --out "$WORK/pp" --pp 2 > /dev/null 2>&1
expect_close "$WORK/one" "$WORK/pp" 1e-5 "MoE at PP=2 vs 1 process"

# An EP=2 checkpoint continues in 1 process.
mkdir "$WORK/ep_to_one"
cp -r "$WORK/ep/ckpt-00000010" "$WORK/ep_to_one/"
"$KOI" train --config "$RECIPE" --out "$WORK/ep_to_one" --resume > /dev/null 2>&1
expect_close "$WORK/one" "$WORK/ep_to_one" 1e-5 "EP=2 checkpoint resumed in 1 process"

RECIPE=$DENSE expect_refused "--ep 2 needs a mixture-of-experts model with at least that many experts (model.experts is 0)" \
  2 --ep 2
expect_refused "mesh: tp 1 x pp 1 x ep 2 = 2 does not divide the 1 ranks; start a multiple of 2 ranks (mpirun -np)" 0 --ep 2
# Expert parallelism beside any other axis, and with ZeRO-2/3.
expect_refused "mesh dp=2 tp=1 pp=1 ep=2: expert parallelism (--ep) does not combine with --dp, --tp or --pp yet; run --ep 2 alone (mpirun -np 2, its ranks also split the batch)" \
  4 --ep 2
expect_refused "mesh dp=1 tp=2 pp=1 ep=2: expert parallelism (--ep) does not combine" 4 --ep 2 --tp 2
expect_refused "mesh dp=1 tp=1 pp=2 ep=2: expert parallelism (--ep) does not combine" 4 --ep 2 --pp 2
expect_refused "--zero 2 with --ep: ZeRO-2/3 do not shard expert-parallel models yet; use --zero 0 or 1 with --ep" \
  2 --ep 2 --zero 2
echo "PASS: expert parallel follows the single-process run"
