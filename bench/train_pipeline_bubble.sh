#!/bin/bash
# Pipeline parallel (issue 17): step time and the measured bubble of 2 stages against the
# ideal (p-1)/(m+p-1) for m = 1, 2, 4, 8 micro-batches, 1F1B and GPipe, beside the
# single-process step on the same global batch (8 sequences of 64 tokens, a 4-layer dim-128
# model, one thread per rank). Medians over steps 4-12 of metrics.jsonl per run; the rounds
# alternate the layouts so that the machine's drift touches them alike, and the summary gives
# each layout's median over the rounds. Run from the repository root.
# Usage: bench/train_pipeline_bubble.sh KOI [ROUNDS]
KOI=$1
ROUNDS=${2:-1}
SHARED=${KOI_SHARED_DIR:-/work/shared}
source "$(dirname "$0")/train_lib.sh"
cat > "$WORK/bench.yaml" <<YAML
model: {dim: 128, layers: 4, heads: 4, kv_heads: 4, ffn_dim: 512, context: 64}
data: {text: $WORK/corpus.txt, tokenizer: char}
train: {batch_size: 8, steps: 12, lr: 1.0e-3, warmup_steps: 2, log_interval: 0, eval_iters: 1, threads: 1,
        out: $WORK/unused}
YAML
# median RUN FIELD: the median of FIELD over steps 4.. of RUN/metrics.jsonl.
median() { median_step "$1/metrics.jsonl" "$2" 4; }

echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
printf "%-6s %-5s %3s %10s %9s %9s %7s %8s\n" round sched m "ms/step" bubble ideal ratio "vs 1 proc" | tee "$WORK/table"
for round in $(seq "$ROUNDS"); do
  rm -rf "$WORK/one"
  launch 1 --config "$WORK/bench.yaml" --out "$WORK/one" > /dev/null 2>&1
  one_ms=$(median "$WORK/one" step_ms)
  printf "%-6s %-5s %3s %10.1f %9s %9s %7s %8s\n" "$round" "-" 1 "$one_ms" - - - 1.00 | tee -a "$WORK/table"
  for m in 1 2 4 8; do
    for sched in 1f1b gpipe; do
      run=$WORK/pp_${sched}_$m
      rm -rf "$run"
      launch 2 --config "$WORK/bench.yaml" --out "$run" --pp 2 --pp-microbatches "$m" \
        --pp-schedule "$sched" > /dev/null 2>&1
      ms=$(median "$run" step_ms)
      bubble=$(median "$run" bubble)
      ideal=$(awk -v m="$m" 'BEGIN { printf "%.4f", 1 / (m + 1) }')
      printf "%-6s %-5s %3d %10.1f %9.4f %9s %7.2f %8.2f\n" "$round" "$sched" "$m" "$ms" "$bubble" "$ideal" \
        "$(awk -v a="$bubble" -v b="$ideal" 'BEGIN { print a / b }')" "$(awk -v a="$one_ms" -v b="$ms" 'BEGIN { print a / b }')" |
        tee -a "$WORK/table"
    done
  done
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "median over $ROUNDS rounds:"
printf "%-5s %3s %10s %9s %9s %7s\n" sched m "ms/step" bubble ideal ratio
med() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
for key in "- 1" "1f1b 1" "gpipe 1" "1f1b 2" "gpipe 2" "1f1b 4" "gpipe 4" "1f1b 8" "gpipe 8"; do
  set -- $key
  rows=$(awk -v s="$1" -v m="$2" 'NR > 1 && $2 == s && $3 == m' "$WORK/table")
  ms=$(echo "$rows" | awk '{ print $4 }' | med)
  if [ "$1" = "-" ]; then printf "%-5s %3d %10.1f\n" "$1" "$2" "$ms"; continue; fi
  bubble=$(echo "$rows" | awk '{ print $5 }' | med)
  awk -v s="$1" -v m="$2" -v ms="$ms" -v b="$bubble" \
    'BEGIN { i = 1 / (m + 1); printf "%-5s %3d %10.1f %9.4f %9.4f %7.2f\n", s, m, ms, b, i, b / i }'
done
