#!/bin/bash
# The 32-sequence batched decode step against the int8 peak measured in the same minutes (issue
# 21, Must show 1), for one or more koi binaries alternated. Per round: BM_Int8Peak (median of 3
# repetitions, all pool threads), then each binary's `koi bench offline` step time at 32
# sequences, and the step's multiply-adds per second as a share of that peak.
# MACS: multiply-adds of one step, 32 tokens x the matrices' weights (default: TinyLlama-1.1B,
# 1.035 G weights less the embedding table, which is only read: 33.1e9).
# Usage: bench/batched_decode_peak.sh ROUNDS MODEL.gguf KOI [KOI...]   (from the repository root)
# Env: KERNELS=build/bench/koi_bench_kernels  MACS=33.1e9
set -euo pipefail
rounds=$1 model=$2
shift 2
kernels="${KERNELS:-build/bench/koi_bench_kernels}"
macs="${MACS:-33.1e9}"
for round in $(seq "$rounds"); do
  peak=$("$kernels" --benchmark_filter=Int8Peak --benchmark_repetitions=3 --benchmark_report_aggregates_only=true 2>/dev/null |
    sed -n 's/.*_median.*GMAC\/s=\([0-9.]*\).*/\1/p')
  line="round $round: BM_Int8Peak $peak G/s"
  for koi in "$@"; do
    ms=$("$koi" bench offline -m "$model" --concurrency 32 --input-len 16 --output-len 32 --requests-per-slot 1 \
      --kv-cache-memory 1GiB 2>/dev/null | tail -1 | awk '{ print $NF }')
    share=$(awk -v m="$macs" -v ms="$ms" -v p="$peak" 'BEGIN { printf "%.1f", m / (ms * 1e-3) / (p * 1e9) * 100 }')
    line="$line | $koi $ms ms/step, $share% of the peak"
  done
  echo "$line (load $(cut -d' ' -f1 /proc/loadavg))"
done
