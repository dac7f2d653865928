#!/bin/bash
# Fine-tuning Hugging Face directories: tiny random models made by PyTorch
# (tests/reference/tiny_models.py: Llama with GQA, Qwen2 with QKV bias and tied embeddings,
# each with a byte-level BPE tokenizer.json) are fine-tuned on a text with their own
# tokenizer, fully and with LoRA, exported to GGUF with that tokenizer, and their perplexity
# on the text falls. A model with rope scaling is refused with a clear error.
# Usage: train_finetune_hf.sh KOI SOURCE_DIR
set -euo pipefail
KOI=$1
SRC=$2
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

/usr/bin/python3 "$SRC/tests/reference/tiny_models.py" "$WORK/hf" > /dev/null
for i in $(seq 1 12); do
  echo "Fine-tuning continues the training of an existing model on new text, line $i."
done > "$WORK/text.txt"
perplexity() { "$KOI" eval -m "$1" -d "$WORK/text.txt" --context 32 | sed -n 's/.*| perplexity \([0-9.]*\)$/\1/p'; }

for model in llama_gqa qwen2_bias_tied; do
  for rank in 0 4; do
    run="$WORK/run-$model-$rank"
    cat > "$WORK/ft.yaml" <<YAML
model: {init_from: $WORK/hf/$model}
data: {text: $WORK/text.txt}
train: {batch_size: 4, seq_len: 32, steps: 30, lr: 1.0e-2, warmup_steps: 2, seed: 1, log_interval: 0,
        eval_iters: 2, lora_rank: $rank, out: $run}
YAML
    "$KOI" train --config "$WORK/ft.yaml" > /dev/null 2>&1 || fail "$model rank $rank: koi train failed"
    "$KOI" train export "$run" -o "$run.gguf" > /dev/null
    before=$(perplexity "$WORK/hf/$model")
    after=$(perplexity "$run.gguf")
    echo "$model, LoRA rank $rank: perplexity $before -> $after"
    awk -v b="$before" -v a="$after" 'BEGIN { exit !(b > 0 && a > 0 && a < 0.5 * b) }' ||
      fail "$model rank $rank: perplexity did not halve"
  done
done
sed -i "s|hf/qwen2_bias_tied|hf/llama3_scaled|" "$WORK/ft.yaml"
if "$KOI" train --config "$WORK/ft.yaml" 2> "$WORK/err.txt"; then fail "trained a rope-scaled model"; fi
grep -q "training a model with rope scaling is not supported; train without it" "$WORK/err.txt" ||
  fail "$(cat "$WORK/err.txt")"
echo "PASS"
