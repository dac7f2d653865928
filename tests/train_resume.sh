#!/bin/bash
# kill -9 at a random step, resume: the final weights and optimizer state are bitwise
# identical to an uninterrupted run with the same seed (issue 7).
# Usage: train_resume.sh KOI SHARED_DIR
set -euo pipefail
KOI=$1
SHARED=$2
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
head -c 60000 "$SHARED/data/tinyshakespeare.txt" > "$WORK/corpus.txt"
cat > "$WORK/tiny.yaml" <<YAML
model: {dim: 32, layers: 2, heads: 4, kv_heads: 2, ffn_dim: 64, context: 16}
data: {text: $WORK/corpus.txt, tokenizer: char}
train: {batch_size: 4, steps: 60, lr: 3.0e-3, warmup_steps: 5, seed: 7, checkpoint_interval: 4,
        keep_checkpoints: 2, log_interval: 0, eval_iters: 2, out: $WORK/unused}
YAML

"$KOI" train --config "$WORK/tiny.yaml" --out "$WORK/a" --threads 1 > /dev/null

# Kill at a random step twice, resuming each time (with another thread count).
for round in 1 2; do
  target=$(( (RANDOM % 40) + 5 ))
  "$KOI" train --config "$WORK/tiny.yaml" --out "$WORK/b" --threads 2 --resume > /dev/null 2>&1 &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    step=$(tail -n 1 "$WORK/b/metrics.jsonl" 2>/dev/null | sed -n 's/^{"step":\([0-9]*\),"loss".*/\1/p' || true)
    if [ -n "$step" ] && [ "$step" -ge "$target" ]; then kill -9 "$pid"; break; fi
    sleep 0.01
  done
  wait "$pid" 2>/dev/null || true
  echo "round $round: killed near step $target"
done
"$KOI" train --config "$WORK/tiny.yaml" --out "$WORK/b" --threads 2 --resume > /dev/null

for f in model.safetensors optimizer.safetensors; do
  if ! cmp "$WORK/a/ckpt-00000060/$f" "$WORK/b/ckpt-00000060/$f"; then
    echo "FAIL: $f differs between the uninterrupted and the resumed run"
    exit 1
  fi
done
[ "$(ls -d "$WORK"/b/ckpt-* | wc -l)" -eq 2 ] || { echo "FAIL: keep_checkpoints 2 not honoured"; ls "$WORK/b"; exit 1; }
echo "PASS: resumed run is bitwise identical"
