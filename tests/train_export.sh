#!/bin/bash
# A model trained by Koi is served by Koi: train a tiny character model, export it to GGUF
# with its tokenizer, generate from it and evaluate it with koi eval.
# Usage: train_export.sh KOI SHARED_DIR
set -euo pipefail
KOI=$1
SHARED=$2
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
head -c 40000 "$SHARED/data/tinyshakespeare.txt" > "$WORK/corpus.txt"
tail -c 4000 "$WORK/corpus.txt" > "$WORK/val.txt"
cat > "$WORK/tiny.yaml" <<YAML
model: {dim: 32, layers: 2, heads: 4, ffn_dim: 64, context: 32, tied_embeddings: true}
data: {text: $WORK/corpus.txt}
train: {batch_size: 8, steps: 80, lr: 1.0e-2, warmup_steps: 5, seed: 3, log_interval: 0, eval_iters: 4,
        out: $WORK/run}
YAML
"$KOI" train --config "$WORK/tiny.yaml" > "$WORK/train.txt"
grep -q "^steps 80 | val loss" "$WORK/train.txt" || { echo "FAIL: no summary line"; cat "$WORK/train.txt"; exit 1; }
grep -q '"step":80,"loss"' "$WORK/run/metrics.jsonl" || { echo "FAIL: metrics.jsonl lacks step 80"; exit 1; }

"$KOI" train export "$WORK/run" -o "$WORK/model.gguf"
out=$("$KOI" generate -m "$WORK/model.gguf" -p "ROMEO:" -n 20 -t 0 2>/dev/null)
case "$out" in
  "ROMEO:"*) ;;
  *) echo "FAIL: generation does not continue the prompt: $out"; exit 1 ;;
esac
[ "${#out}" -eq 26 ] || { echo "FAIL: generation too short: $out"; exit 1; }

eval_line=$("$KOI" eval -m "$WORK/model.gguf" -d "$WORK/val.txt")
echo "$eval_line"
loss=$(echo "$eval_line" | sed -n 's/.*| loss \([0-9.]*\) |.*/\1/p')
# An untrained model of this vocabulary scores ln(321) = 5.77; 80 steps get well below 3.5.
awk -v l="$loss" 'BEGIN { exit !(l > 0 && l < 3.5) }' || { echo "FAIL: eval loss $loss"; exit 1; }

if "$KOI" train export "$WORK/nothing" -o "$WORK/x.gguf" 2> "$WORK/err.txt"; then echo "FAIL: export of nothing"; exit 1; fi
grep -q "no complete checkpoint (ckpt-\*/COMPLETE) to resume from" "$WORK/err.txt" || { cat "$WORK/err.txt"; exit 1; }
echo "PASS: trained, exported, generated: $out"
