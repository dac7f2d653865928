#!/bin/bash
# ZeRO-3 memory per rank (issue 17): a model of 8 layers whose weights, gradients and AdamW
# state take M bytes in one process trains on 4 ranks; every rank's peak of the tracked
# buffers (its parts, the gathered layers, the model's own weight and gradient buffers) stays
# within M/4 (its parts) plus one layer's working set, a bound well below M; the arithmetic
# and each rank's peak RSS are printed. With overlap the working set holds two layers (the
# next one prefetched, the previous one's gradient in flight); --no-overlap holds one.
# Usage: train_mpi_zero_memory.sh KOI SHARED_DIR
KOI=$1
SHARED=$2
source "$(dirname "$0")/train_mpi_lib.sh"
trap 'rm -rf "$WORK"' EXIT
cat > "$WORK/deep.yaml" <<YAML
model: {dim: 64, layers: 8, heads: 4, kv_heads: 2, ffn_dim: 128, context: 32}
data: {text: $WORK/corpus.txt, tokenizer: char}
train: {batch_size: 4, steps: 3, lr: 3.0e-3, seed: 7, log_interval: 0, eval_iters: 1, threads: 1, out: unused}
YAML
for mode in overlap no-overlap; do
  flag=$([ "$mode" = overlap ] || echo --no-overlap)
  "${MPIRUN[@]}" -np 4 "$KOI" train --config "$WORK/deep.yaml" --out "$WORK/$mode" --zero 3 $flag \
    > "$WORK/$mode.txt" 2>&1 || { echo "FAIL: --zero 3 $flag on 4 ranks"; cat "$WORK/$mode.txt"; exit 1; }
  echo "--- $mode"
  grep '^memory per rank' "$WORK/$mode.txt"
  python3 - "$WORK/$mode/metrics.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{"memory_rank"')]
assert len(rows) == 4, f"FAIL: {len(rows)} memory lines, expected one per rank"
for r in rows:
    M, own, ws, peak = r["one_process_bytes"], r["own_bytes"], r["working_set_bytes"], r["tracked_peak_bytes"]
    # Its parts are M/4, give or take one float per unit and array (uneven splits): 9 units x 4 arrays.
    assert abs(own - M / 4) <= 9 * 4 * 4, f"FAIL: rank {r['memory_rank']} owns {own} B, M/4 = {M / 4}"
    assert peak <= own + ws, f"FAIL: rank {r['memory_rank']}: tracked peak {peak} B > {own} + {ws} B"
    # The bound means something: a rank that kept a whole copy of the weights (M/4 more) would
    # exceed it.
    assert ws < M / 4, f"FAIL: the working set {ws} B is not below a copy of the weights, {M / 4} B"
    print(f"rank {r['memory_rank']}: tracked peak {peak} B <= M/4 {own} B + working set {ws} B "
          f"= {own + ws} B ({(own + ws) / M:.2f} M); peak RSS {r['peak_rss_bytes'] / 2**20:.1f} MiB")
PY
done
echo "PASS: ZeRO-3 on 4 ranks keeps M/4 plus one layer's working set"
