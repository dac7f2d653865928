#!/bin/bash
# Tensor and data parallel step time and communicated bytes per step (issue 17, Must show 5):
# 1 process, TP=2 and DP=2 on 2 ranks, DP=2 x TP=2 on 4 ranks, on one recipe, alternated
# ROUNDS times in one session. Bytes per step are koi_train_collective_bytes_total (rank 0's
# payload handed to collectives, metrics.prom) of a run of 30 steps minus one of 10, over 20:
# both runs end with the same evaluation and checkpoint, so the difference is the steps alone.
# The theoretical payload is printed beside it (see bench/README.md for the formula).
# Usage: [KOI_SHARED_DIR=DIR] bench/train_tensor_parallel.sh KOI [ROUNDS]
KOI=$1
ROUNDS=${2:-1}
SHARED=${KOI_SHARED_DIR:-/work/shared}
CORPUS_BYTES=200000
source "$(dirname "$0")/train_lib.sh"
# dim 128, 4 layers, 8 heads / 4 kv heads of 16, ffn 384, batch 8 x 64 tokens.
L=4 C=128 B=8 T=64
cat > "$WORK/r.yaml" <<YAML
model: {dim: $C, layers: $L, heads: 8, kv_heads: 4, ffn_dim: 384, context: $T}
data: {text: $WORK/corpus.txt, tokenizer: char}
train: {batch_size: $B, steps: 30, lr: 1.0e-3, warmup_steps: 5, seed: 7, log_interval: 0, eval_iters: 1,
        threads: 1, out: $WORK/unused}
YAML
bytes() { awk '$1 ~ /^koi_train_collective_bytes_total/ { s += $2 } END { printf "%.0f", s }' "$1/metrics.prom"; }
params=$(launch 1 --config "$WORK/r.yaml" --out "$WORK/p" --steps 1 2>&1 | sed -n 's/^model: \([0-9]*\) parameters.*/\1/p')
echo "model: $params parameters, L=$L C=$C, global batch $B x $T; load $(cut -d' ' -f1-3 /proc/loadavg)"
printf "%-12s %10s %14s %14s\n" layout "ms/step" "bytes/step" "theory bytes"
for round in $(seq "$ROUNDS"); do
  for layout in "1 1 1" "2 2 1" "2 1 2" "4 2 2"; do
    read -r np dp tp <<< "$layout"
    for steps in 10 30; do
      rm -rf "$WORK/run$steps"
      launch "$np" --config "$WORK/r.yaml" --out "$WORK/run$steps" --steps "$steps" --dp "$dp" --tp "$tp" \
        > "$WORK/log" 2>&1 || { cat "$WORK/log"; exit 1; }
    done
    measured=$(( ($(bytes "$WORK/run30") - $(bytes "$WORK/run10")) / 20 ))
    # Per step on one rank, under tp: 4 allreduces of N = (B/dp) T tokens x C floats per layer
    # (2 forward, 2 backward), 2 more for the vocabulary-parallel embedding and head input
    # gradient, the cross-entropy's allgather of N x tp row maxima (floats) and allreduce of
    # N + 1 doubles, and the grad-norm double. Under dp: the gradient allreduce of the rank's parameters
    # (its shard: the split tensors over tp, the replicated ones whole) under dp; the
    # world's loss/stop/step-time doubles (2 + ranks; also handed over by one process).
    theory=$(awk -v L=$L -v C=$C -v B=$B -v T=$T -v dp=$dp -v tp=$tp -v np=$np \
      -v shard="$(sed -n 's/^model: \([0-9]*\) parameters.*/\1/p' "$WORK/log")" 'BEGIN {
        t = 0
        N = (B / dp) * T
        if (tp > 1) t += (4 * L + 2) * N * C * 4 + N * tp * 4 + (N + 1) * 8 + 8
        if (dp > 1) t += shard * 4
        t += (2 + np) * 8
        printf "%.0f", t }')
    printf "%-12s %10s %14s %14s   (round %d, load %s)\n" "dp=$dp tp=$tp" "$(median_step "$WORK/run30/metrics.jsonl" step_ms 6)" "$measured" \
      "$theory" "$round" "$(cut -d' ' -f1 /proc/loadavg)"
  done
done
