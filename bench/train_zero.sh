#!/bin/bash
# Sharded data parallel (issue 17, Must show 5): step time and bytes communicated per step of
# ZeRO-1, ZeRO-2 and ZeRO-3 at 2 and 4 ranks against the theoretical volume, and each with
# overlap on and off (ZeRO-1: the per-layer allreduce during backward vs buckets after it), on
# one model and global batch, alternated in rounds on one machine.
# Bytes: rank 0's collectives' full buffers per step (metrics.jsonl comm_bytes); theory for P
# parameters of 4 bytes: ZeRO-1 allreduce + allgather = 8P, ZeRO-2 reduce-scatter + allgather
# = 8P, ZeRO-3 two allgathers + reduce-scatter = 12P (plus the 40-56 B of the loss and norm).
# On the wire a ring sends (N-1)/N of an allgather's or reduce-scatter's buffer per rank and
# twice that of an allreduce's: 2P(N-1)/N x 4 B for ZeRO-1/2 and 3P(N-1)/N x 4 B for ZeRO-3
# (the ZeRO paper's 2Ψ and 3Ψ). Step time: median of the steps after the 5th.
# Usage: bench/train_zero.sh KOI SHARED_DIR ROUNDS [STEPS]
KOI=$1
SHARED=$2
ROUNDS=$3
STEPS=${4:-25}
source "$(dirname "$0")/train_lib.sh"
cat > "$WORK/model.yaml" <<YAML
model: {dim: 128, layers: 8, heads: 8, kv_heads: 4, ffn_dim: 352, context: 64}
data: {text: $WORK/corpus.txt, tokenizer: char}
train: {batch_size: 8, steps: $STEPS, lr: 1.0e-3, seed: 7, log_interval: 0, eval_iters: 1, threads: 1, out: unused}
YAML
bytes() { sed -n 's/^{"step":.*"comm_bytes":\([0-9]*\).*/\1/p' "$1" | sort -u | tr '\n' ' '; }
printf "%-5s %-6s %-10s %9s %14s %14s %14s\n" round ranks layout ms/step bytes/step theory wire/rank
for round in $(seq "$ROUNDS"); do
  for ranks in 2 4; do
    for layout in "1" "1 --no-overlap" "2" "2 --no-overlap" "3" "3 --no-overlap"; do
      out="$WORK/r$round-$ranks-${layout// /}"
      launch "$ranks" --config "$WORK/model.yaml" --out "$out" --zero $layout \
        > "$out.log" 2>&1 || { cat "$out.log"; exit 1; }
      P=$(sed -n 's/^model: \([0-9]*\) parameters.*/\1/p' "$out.log")
      stage=${layout%% *}
      factor=$([ "$stage" = 3 ] && echo 12 || echo 8)
      wire=$(( (factor / 4) * P * (ranks - 1) / ranks * 4 ))
      printf "%-5s %-6s %-10s %9s %14s %14s %14s\n" "$round" "$ranks" "zero$layout" "$(median_step "$out/metrics.jsonl" step_ms 6)" \
        "$(bytes "$out/metrics.jsonl")" "$((factor * P))" "$wire"
      rm -rf "$out"
    done
  done
done
echo "P = $P parameters; load average $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) cores"
