#!/bin/bash
# Training step time of Koi over PyTorch's (CPU, fp32), for the shakespeare_char recipe's model
# (4 layers, width 128, context 64, batch 12, vocabulary 321), both on the same threads.
# Usage: bench/train_vs_pytorch.sh [KOI] [THREADS] [STEPS]   (run from the repository root;
# needs Debian's python3-torch with libopenblas0-pthread: scripts/install-deps --test)
set -euo pipefail
KOI=${1:-build/koi}
THREADS=${2:-$(nproc)}
STEPS=${3:-40}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
"$KOI" train --config recipes/shakespeare_char.yaml --out "$WORK/run" --steps "$STEPS" --threads "$THREADS" \
  > /dev/null 2> "$WORK/log"
# Median step time of the steps after the first 10, from metrics.jsonl.
koi_ms=$(sed -n 's/^{"step":\([0-9]*\),"loss".*"step_ms":\([0-9.]*\)}$/\1 \2/p' "$WORK/run/metrics.jsonl" |
  awk '$1 > 10 { print $2 }' | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')
# PyTorch at its best on this machine, THREADS OpenMP threads with OpenBLAS on one thread
# (matmuls single-threaded, the other ops parallel) or on THREADS threads (OpenBLAS's own
# pthreads, which can fight PyTorch's OpenMP threads for the cores): the faster counts.
torch_ms_blas1=$(OPENBLAS_NUM_THREADS=1 /usr/bin/python3 "$(dirname "$0")/train_vs_pytorch.py" --threads "$THREADS" --steps "$STEPS")
torch_ms_blasn=$(OPENBLAS_NUM_THREADS=$THREADS /usr/bin/python3 "$(dirname "$0")/train_vs_pytorch.py" --threads "$THREADS" --steps "$STEPS")
torch_ms=$(awk -v a="$torch_ms_blas1" -v b="$torch_ms_blasn" 'BEGIN { print (a < b ? a : b) }')
echo "threads $THREADS | koi ${koi_ms} ms/step | pytorch ${torch_ms} ms/step (openblas 1 thread: $torch_ms_blas1, $THREADS: $torch_ms_blasn) | koi/pytorch $(awk -v a="$koi_ms" -v b="$torch_ms" 'BEGIN { printf "%.2f", a / b }')"
