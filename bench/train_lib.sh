# Shared by the parallel-training benchmarks bench/train_{zero,tensor_parallel,pipeline_bubble}.sh
# (sourced after KOI and SHARED are set): a temporary WORK (removed at exit) with WORK/corpus.txt,
# the first CORPUS_BYTES (default 300000) of tinyshakespeare; MPIRUN (an array: Debian's OpenMPI
# in a container, ranks as root, more ranks than cores, no binding); launch NP ARGS... (koi train
# on NP ranks, 1: one process without mpirun); median_step METRICS FIELD FIRST (the median of
# FIELD over the steps from FIRST on of a metrics.jsonl).
set -euo pipefail
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
head -c "${CORPUS_BYTES:-300000}" "$SHARED/data/tinyshakespeare.txt" > "$WORK/corpus.txt"
MPIRUN=(mpirun --oversubscribe --bind-to none)
if [ "$(id -u)" -eq 0 ]; then MPIRUN+=(--allow-run-as-root); fi

launch() {
  local np=$1
  shift
  if [ "$np" -eq 1 ]; then "$KOI" train "$@"; else "${MPIRUN[@]}" -np "$np" "$KOI" train "$@"; fi
}

median_step() {
  sed -n "s/^{\"step\":\([0-9]*\),\"loss\".*\"$2\":\([0-9.]*\).*/\1 \2/p" "$1" |
    awk -v first="$3" '$1 >= first { print $2 }' | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'
}
