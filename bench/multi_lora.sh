#!/usr/bin/env bash
# Multi-LoRA cost (issue 19, Must show 2): output tokens/s of one engine serving requests spread
# uniformly (round robin) over 1, 4 and 16 LoRA adapters, against the base model alone at the
# same concurrency, in one `koi bench offline --adapters 0,1,4,16` run (each row prints its
# ratio to the base). The base is stories260K; four rank-R adapters on every projection (q, k,
# v, o, gate, up, down) are trained briefly by `koi train --lora-rank` and registered under 16
# names (each name loads its own copy of the weights, so 16 adapters are 16 gathers and 16
# weight sets in the pool; the values do not change the cost).
#
# On a loaded machine one run's rows scatter by 10-20%: RUNS=3 (the default) repeats the whole
# comparison so that the spread shows.
#
#   [RANK=8] [CONCURRENCY=16,64] [RUNS=3] bench/multi_lora.sh [KOI]
set -euo pipefail
koi=$(realpath "${1:-build/koi}")
rank=${RANK:-8}; concurrency=${CONCURRENCY:-16,64}; runs=${RUNS:-3}
shared=${KOI_SHARED_DIR:-/work/shared}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$koi" --log-level warn convert --llama2c "$shared/models/stories260K/stories260K.bin" \
  --tokenizer "$shared/models/stories260K/tok512.bin" -o "$work/base.gguf" > /dev/null
head -c 200000 "$shared/data/tinyshakespeare.txt" > "$work/text.txt"
for i in 0 1 2 3; do
  cat > "$work/a$i.yaml" <<YAML
model: {init_from: $work/base.gguf}
data: {text: $work/text.txt}
train: {batch_size: 4, seq_len: 32, steps: 10, lr: 1.0e-2, seed: $((i + 1)), log_interval: 0, eval_iters: 0,
        lora_targets: [q, k, v, o, gate, up, down], out: $work/run$i}
YAML
  "$koi" --log-level warn train --config "$work/a$i.yaml" --lora-rank "$rank" > /dev/null 2>&1
  "$koi" --log-level warn train export "$work/run$i" --adapter "$work/a$i" > /dev/null
done
loras=()
for n in $(seq 0 15); do loras+=(--lora "l$n=$work/a$((n % 4))"); done
echo "stories260K, rank-$rank adapters on q, k, v, o, gate, up, down; $(nproc) cores; $(date -u +%Y-%m-%d)"
for run in $(seq "$runs"); do
  echo "run $run of $runs (load average $(cut -d' ' -f1 /proc/loadavg))"
  "$koi" --log-level warn bench offline --model "$work/base.gguf" "${loras[@]}" --max-loras 16 \
    --adapters 0,1,4,16 --concurrency "$concurrency" --input-len 64 --output-len 128 --kv-cache-memory 256MiB
done
