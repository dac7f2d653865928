#!/bin/bash
# The 32-sequence batched decode step against the int8 peak measured in the same minutes (issue
# 21, Must show 1), for one or more koi binaries alternated. Per round: BM_Int8Peak (median of 3
# repetitions, all pool threads), then each binary's `koi bench offline` step time at 32
# sequences, and the step's multiply-adds per second as a share of that peak. Beside them, two
# ceilings in the same minute, as shares of the peak: BM_Int8TileMix/scales:1 (the q8_0 tile's
# instructions in registers: the dots and the exact-sum contract's per-block float work), and
# the 32-token matmul with its weights in cache (small_hot_TYPE, gate/up and down summed). A step
# cannot beat the second even if streaming its weights cost nothing, and its other ops
# (attention, norms, sampling) bring it lower.
# MACS: multiply-adds of one step, 32 tokens x the matrices' weights (default: TinyLlama-1.1B,
# 1.035 G weights less the embedding table, which is only read: 33.1e9).
# Usage: bench/batched_decode_peak.sh ROUNDS MODEL.gguf KOI [KOI...]   (from the repository root)
# Env: KERNELS=build/bench/koi_bench_kernels  MACS=33.1e9  TYPE=q8_0 (or q4_0: the model's weights)
set -euo pipefail
rounds=$1 model=$2
shift 2
kernels="${KERNELS:-build/bench/koi_bench_kernels}"
macs="${MACS:-33.1e9}"
type="${TYPE:-q8_0}"
for round in $(seq "$rounds"); do
  peak=$("$kernels" --benchmark_filter=Int8Peak --benchmark_repetitions=3 --benchmark_report_aggregates_only=true 2>/dev/null |
    sed -n 's/.*_median.*GMAC\/s=\([0-9.]*\).*/\1/p')
  # Gate/up and down at 32 tokens: 2 x 2048 x 5632 x 32 multiply-adds in the two calls' summed time.
  hot_us=$("$kernels" --benchmark_filter="small_hot_${type}/in:(2048|5632)/out:(5632|2048)/tokens:32/" \
    --benchmark_min_time=0.2 2>/dev/null | awk '/^BM_/ { s += $2 } END { print s }')
  hot=$(awk -v us="$hot_us" -v p="$peak" 'BEGIN { printf "%.0f G/s, %.1f%%", 738.2e6 / (us * 1e-6) * 1e-9, 738.2e6 / (us * 1e-6) / (p * 1e9) * 100 }')
  mix=$("$kernels" --benchmark_filter='Int8TileMix/scales:1/' --benchmark_min_time=0.2 2>/dev/null |
    sed -n 's/.*GMAC\/s=\([0-9.]*\).*/\1/p')
  mix=$(awk -v m="$mix" -v p="$peak" 'BEGIN { printf "%.0f G/s, %.1f%%", m, m / p * 100 }')
  line="round $round: BM_Int8Peak $peak G/s | tile mix $mix | in-cache tile $hot of the peak"
  for koi in "$@"; do
    ms=$("$koi" bench offline -m "$model" --concurrency 32 --input-len 16 --output-len 32 --requests-per-slot 1 \
      --kv-cache-memory 1GiB 2>/dev/null | tail -1 | awk '{ print $NF }')
    share=$(awk -v m="$macs" -v ms="$ms" -v p="$peak" 'BEGIN { printf "%.1f", m / (ms * 1e-3) / (p * 1e9) * 100 }')
    line="$line | $koi $ms ms/step, $share% of the peak"
  done
  echo "$line (load $(cut -d' ' -f1 /proc/loadavg))"
done
