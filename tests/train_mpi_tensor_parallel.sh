#!/bin/bash
# Tensor parallelism on a device mesh (issue 17): TP=2 on 2 ranks and DP=2 x TP=2 on 4 ranks,
# with the same global batch, follow the single-process loss curve within 1e-5 per step for 20
# steps, and every parameter's first gradient matches within 1e-5 of its largest value; the
# mesh is refused with the numbers when it does not match the rank count, and
# --tp is refused when it does not divide the heads.
# Usage: train_mpi_tensor_parallel.sh KOI SHARED_DIR
KOI=$1
SHARED=$2
source "$(dirname "$0")/train_mpi_lib.sh"
trap 'rm -rf "$WORK"' EXIT
write_recipe 20

run_curve one 0
run_curve tp2 2 --tp 2
grep -q "x 2 ranks (dp=1 tp=2 pp=1 ep=1)" "$WORK/tp2.txt" || { echo "FAIL: no mesh line"; cat "$WORK/tp2.txt"; exit 1; }
run_curve dp2tp2 4 --tp 2 --dp 2 --zero 1
expect_close "$WORK/one" "$WORK/tp2" 1e-5 "TP=2 on 2 ranks vs 1 process"
expect_close "$WORK/one" "$WORK/dp2tp2" 1e-5 "DP=2 x TP=2 (ZeRO-1) on 4 ranks vs 1 process"
[ "$(losses "$WORK/dp2tp2" | wc -l)" -eq 20 ] || { echo "FAIL: DP=2 x TP=2 did not log 20 steps"; exit 1; }
# The checkpoint holds whole tensors (the same shapes as one process's) and names the mesh.
grep -q '"layout":{"tensors":"full","mesh":"dp=2 tp=2 pp=1 ep=1","zero":1}' "$WORK/dp2tp2/ckpt-00000020/state.json" ||
  { echo "FAIL: state.json layout"; cat "$WORK/dp2tp2/ckpt-00000020/state.json"; exit 1; }
cmp <(head -c 8 "$WORK/one/ckpt-00000020/model.safetensors") <(head -c 8 "$WORK/dp2tp2/ckpt-00000020/model.safetensors") ||
  { echo "FAIL: the TP checkpoint's header differs from one process's (not whole tensors)"; exit 1; }

# A mesh that does not multiply to the rank count, a --tp that does not divide the heads, and
# ZeRO-2/3 (which do not shard a tensor-parallel shard), each refused naming what to do instead.
expect_refused "mesh: dp 2 x tp 2 x pp 1 x ep 1 = 4 ranks, but the job has 2; make the product equal the rank count (mpirun -np 4)" \
  2 --tp 2 --dp 2
expect_refused "tensor parallel: the number of key/value heads (2) does not divide by --tp 4" 4 --tp 4
for z in 2 3; do
  expect_refused "--zero $z with --tp 2: ZeRO-2/3 do not shard tensor-parallel shards yet; use --zero 1 with --tp, or --zero $z with --dp alone" \
    4 --tp 2 --zero $z
done
# Every tensor's gradient of the first step (AdamW's m = 0.1 g in a step-1 checkpoint) against
# one process, for GQA/untied and for MHA with tied embeddings and q/k/v biases.
grad_check() {
  "$KOI" train --config "$RECIPE" --out "$WORK/g1_$1" --steps 1 > /dev/null 2>&1
  "${MPIRUN[@]}" -np 4 "$KOI" train --config "$RECIPE" --out "$WORK/gtp_$1" --steps 1 --tp 2 > /dev/null 2>&1
  echo -n "$1, DP=2 x TP=2 vs 1 process: "
  /usr/bin/python3 "$(dirname "$0")/train_grad_compare.py" "$WORK/gtp_$1/ckpt-00000001" "$WORK/g1_$1/ckpt-00000001" 1e-5 ||
    exit 1
}
grad_check gqa
sed -i 's/^model: .*/model: {dim: 32, layers: 2, heads: 4, kv_heads: 4, ffn_dim: 64, context: 16, tied_embeddings: true, qkv_bias: true}/' "$RECIPE"
grad_check mha_tied_bias

echo "PASS: tensor parallel follows the single-process run"
