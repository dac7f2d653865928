#!/bin/bash
# What a quantized KV cache saves and what it costs (issue 18, Must show 6): train a small
# character model on tinyshakespeare with heads of 32 values (so q8_0 fits), export it, and run
# koi eval over text it never trained on with --kv-dtype f32, f16 and q8_0. The KV bytes per
# token come from the engine's own accounting (KvCacheShape::bytes_per_block) and must be
# exactly 1/2 (f16) and 34/128 (q8_0) of f32's; the perplexity may move by at most 0.1% with f16
# and 1% with q8_0 (measured: see bench/README.md, "Quantized KV cache").
# Usage: kv_dtype_eval.sh KOI SHARED_DIR
set -euo pipefail
KOI=$1
SHARED=$2
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
head -c 100000 "$SHARED/data/tinyshakespeare.txt" > "$WORK/corpus.txt"
tail -c 12000 "$SHARED/data/tinyshakespeare.txt" > "$WORK/val.txt"  # the corpus's last lines: never trained on
cat > "$WORK/small.yaml" <<YAML
model: {dim: 64, layers: 2, heads: 2, kv_heads: 2, ffn_dim: 128, context: 64, tied_embeddings: true}
data: {text: $WORK/corpus.txt}
train: {batch_size: 16, steps: 500, lr: 5.0e-3, warmup_steps: 20, seed: 5, log_interval: 0, eval_iters: 2,
        out: $WORK/run}
YAML
"$KOI" train --config "$WORK/small.yaml" > "$WORK/train.txt"
"$KOI" train export "$WORK/run" -o "$WORK/model.gguf"

declare -A ppl bytes
for dtype in f32 f16 q8_0; do
  "$KOI" eval -m "$WORK/model.gguf" -d "$WORK/val.txt" --kv-dtype "$dtype" --threads 2 > "$WORK/eval_$dtype.txt"
  cat "$WORK/eval_$dtype.txt"
  ppl[$dtype]=$(sed -n 's/.*| perplexity \([0-9.]*\)$/\1/p' "$WORK/eval_$dtype.txt")
  bytes[$dtype]=$(sed -n "s/^kv cache $dtype: \([0-9]*\) bytes per token$/\1/p" "$WORK/eval_$dtype.txt")
  [ -n "${ppl[$dtype]}" ] && [ -n "${bytes[$dtype]}" ] || { echo "FAIL: no figures for $dtype"; exit 1; }
done
# 2 layers x K and V x 2 heads x 32 values: f32 4 bytes a value, f16 2, q8_0 34 per 32.
[ "${bytes[f32]}" -eq 1024 ] || { echo "FAIL: f32 KV bytes per token ${bytes[f32]}, expected 1024"; exit 1; }
[ "${bytes[f16]}" -eq 512 ] || { echo "FAIL: f16 KV bytes per token ${bytes[f16]}, expected 512"; exit 1; }
[ "${bytes[q8_0]}" -eq 272 ] || { echo "FAIL: q8_0 KV bytes per token ${bytes[q8_0]}, expected 272"; exit 1; }
# The model learned something (an untrained one scores about the vocabulary size, 321).
awk -v p="${ppl[f32]}" 'BEGIN { exit !(p > 1 && p < 25) }' || { echo "FAIL: f32 perplexity ${ppl[f32]}"; exit 1; }
change() { awk -v a="$1" -v b="$2" 'BEGIN { d = (a - b) / b; printf "%.6f", d < 0 ? -d : d }'; }
f16_change=$(change "${ppl[f16]}" "${ppl[f32]}")
q8_change=$(change "${ppl[q8_0]}" "${ppl[f32]}")
echo "perplexity f32 ${ppl[f32]} | f16 ${ppl[f16]} (change $f16_change) | q8_0 ${ppl[q8_0]} (change $q8_change)"
awk -v c="$f16_change" 'BEGIN { exit !(c <= 0.001) }' || { echo "FAIL: f16 KV moves perplexity by $f16_change > 0.1%"; exit 1; }
awk -v c="$q8_change" 'BEGIN { exit !(c <= 0.01) }' || { echo "FAIL: q8_0 KV moves perplexity by $q8_change > 1%"; exit 1; }

# A model whose heads are not whole q8_0 blocks is refused, naming the flag.
cat > "$WORK/odd.yaml" <<YAML
model: {dim: 32, layers: 1, heads: 4, ffn_dim: 64, context: 32, tied_embeddings: true}
data: {text: $WORK/corpus.txt}
train: {batch_size: 2, steps: 1, lr: 1.0e-3, warmup_steps: 0, seed: 1, log_interval: 0, eval_iters: 1, out: $WORK/odd}
YAML
"$KOI" train --config "$WORK/odd.yaml" > /dev/null
"$KOI" train export "$WORK/odd" -o "$WORK/odd.gguf"
if "$KOI" eval -m "$WORK/odd.gguf" -d "$WORK/val.txt" --kv-dtype q8_0 2> "$WORK/err.txt"; then
  echo "FAIL: q8_0 KV accepted for heads of 8"; exit 1
fi
grep -q "kv-dtype q8_0 stores each head in blocks of 32 values, but this model's heads have 8; use --kv-dtype f16 or f32" \
  "$WORK/err.txt" || { echo "FAIL: wrong error:"; cat "$WORK/err.txt"; exit 1; }
echo "PASS: KV bytes per token f32 ${bytes[f32]}, f16 ${bytes[f16]}, q8_0 ${bytes[q8_0]}; perplexity changes f16 $f16_change, q8_0 $q8_change"
