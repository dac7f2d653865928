#!/bin/bash
# LoRA fine-tuning of a real model: stories260K (imported from llama2.c) gets rank-8 adapters
# on its attention and MLP projections, trained on a short story; its perplexity on that
# story must fall. The run exports the merged model (GGUF, which koi eval and koi generate
# load) and the adapters alone (PEFT's adapter_model.safetensors + adapter_config.json).
# Usage: train_lora.sh KOI SHARED_DIR
set -euo pipefail
KOI=$1
SHARED=$2
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$KOI" convert --llama2c "$SHARED/models/stories260K/stories260K.bin" \
  --tokenizer "$SHARED/models/stories260K/tok512.bin" -o "$WORK/base.gguf" > /dev/null
cat > "$WORK/story.txt" <<'TEXT'
Once upon a time, there was a little robot named Bolt. Bolt lived in a big red barn with a
cow named Daisy and a duck named Quack. Every morning, Bolt would roll to the pond and say,
"Good morning, Quack! Good morning, Daisy!" Quack would flap his wings and Daisy would moo.

One day, Bolt found a shiny blue key in the mud. He did not know what the key was for. He
asked Daisy, "Do you know what this key opens?" Daisy shook her head. He asked Quack, "Do
you know what this key opens?" Quack shook his head too. Bolt was sad, but he did not give up.

Bolt rolled all around the farm. He tried the key on the barn door, but it did not fit. He
tried the key on the gate, but it did not fit. He tried the key on the old tool box, and
click! The box opened. Inside the box, there was a small silver wheel. Bolt was so happy!

Bolt put the silver wheel on his arm. Now he could spin and dance. He rolled to the pond and
danced for Quack and Daisy. Quack flapped his wings and Daisy said, "Moo, moo!" They all
laughed and played together until the sun went down. From that day on, Bolt danced every
morning, and the farm was the happiest place in the whole world.

The next day, Bolt found a shiny green key in the grass. He smiled and said, "I know what
to do!" He rolled all around the farm and tried the key on every box, and every door, until
he found what it opened. Bolt learned that if you keep trying, you will find your way.
TEXT
cat > "$WORK/lora.yaml" <<YAML
model: {init_from: $WORK/base.gguf}
data: {text: $WORK/story.txt}
train: {batch_size: 8, seq_len: 32, steps: 80, lr: 1.0e-2, min_lr: 1.0e-3, warmup_steps: 5, seed: 1,
        log_interval: 0, eval_iters: 4, lora_alpha: 16,
        lora_targets: [q, k, v, o, gate, up, down], out: $WORK/run}
YAML
perplexity() { "$KOI" eval -m "$1" -d "$WORK/story.txt" --context 64 | sed -n 's/.*| perplexity \([0-9.]*\)$/\1/p'; }
before=$(perplexity "$WORK/base.gguf")
"$KOI" train --config "$WORK/lora.yaml" --lora-rank 8 > "$WORK/train.txt" 2>&1
grep -q "^LoRA rank 8, alpha 16: 46240 trained parameters, the base is frozen$" "$WORK/train.txt" ||
  fail "no LoRA line: $(cat "$WORK/train.txt")"
"$KOI" train export "$WORK/run" -o "$WORK/merged.gguf" --adapter "$WORK/adapter" > /dev/null
after=$(perplexity "$WORK/merged.gguf")
echo "stories260K perplexity on the story: before LoRA $before, after $after"
awk -v b="$before" -v a="$after" 'BEGIN { exit !(b > 0 && a > 0 && a < 0.7 * b) }' ||
  fail "perplexity did not fall by 30%: $before -> $after"

[ -f "$WORK/adapter/adapter_model.safetensors" ] || fail "no adapter_model.safetensors"
grep -q '"peft_type":"LORA"' "$WORK/adapter/adapter_config.json" || fail "adapter_config.json is not PEFT LoRA"
grep -q '"r":8' "$WORK/adapter/adapter_config.json" || fail "adapter_config.json lacks r"
grep -q 'base_model.model.model.layers.4.mlp.down_proj.lora_B.weight' "$WORK/adapter/adapter_model.safetensors" ||
  fail "adapter tensors lack PEFT names"
out=$("$KOI" generate -m "$WORK/merged.gguf" -p "Bolt" -n 30 -t 0 2>/dev/null)
case "$out" in Bolt*) ;; *) fail "merged model does not generate: $out" ;; esac
if "$KOI" train export "$WORK/run" 2> "$WORK/err.txt"; then fail "export with no output"; fi
grep -q "koi train export needs -o MODEL.gguf, --adapter DIR or both" "$WORK/err.txt" || fail "$(cat "$WORK/err.txt")"
printf 'model: {dim: 8, heads: 2}\ndata: {text: story.txt}\ntrain: {out: run}\n' > "$WORK/char.yaml"
if "$KOI" train --config "$WORK/char.yaml" --lora-rank 4 2> "$WORK/err.txt"; then fail "LoRA without a base"; fi
grep -q -- "--lora-rank needs a recipe with model.init_from (the model to adapt)" "$WORK/err.txt" ||
  fail "$(cat "$WORK/err.txt")"
echo "PASS: $out"
