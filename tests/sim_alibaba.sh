#!/usr/bin/env bash
# koi sim end to end on a slice of the real Alibaba 2023 trace, plus its error paths.
# Usage: sim_alibaba.sh KOI SHARED_DIR
set -euo pipefail
koi=$1
dir=$2/traces/cluster
nodes=$dir/alibaba2023_openb_node_list_gpu_node.csv
pods=$dir/alibaba2023_openb_pod_list_default.csv
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# Replay of the first 600 pods at 10000x arrival rate: deterministic JSON, an SVG, skip counts.
"$koi" sim --nodes "$nodes" --trace "$pods" --limit 600 --arrival-scale 10000 --json "$tmp/a.json" --svg "$tmp/a.svg" > "$tmp/out"
grep -q "8152 rows, 897 skipped (never scheduled (no scheduled_time): 897)" "$tmp/out" || fail "skip count: $(cat "$tmp/out")"
grep -q '"finished": 600' "$tmp/a.json" || fail "not all 600 jobs finished"
grep -q '<polyline' "$tmp/a.svg" || fail "no allocation curve in the SVG"
"$koi" sim --nodes "$nodes" --trace "$pods" --limit 600 --arrival-scale 10000 --json "$tmp/b.json" > /dev/null
cmp -s "$tmp/a.json" "$tmp/b.json" || fail "two runs differ"
# Fill mode on multigpu50 (no time columns).
"$koi" sim --nodes "$nodes" --trace "$dir/alibaba2023_openb_pod_list_multigpu50.csv" --mode fill --policy best-fit \
  --fill-limit 0.5 --json "$tmp/fill.json" > "$tmp/fill"
grep -q "placed" "$tmp/fill" || fail "fill mode printed no result"
# Fill mode places jobs and never runs them: it prints no completion times or fairness.
if grep -qiE "JCT|fairness" "$tmp/fill" "$tmp/fill.json"; then fail "fill mode reports JCT or fairness: $(cat "$tmp/fill")"; fi
grep -q "GPUs at end" "$tmp/fill" || fail "fill mode queue lines: $(cat "$tmp/fill")"

expect_error() {  # expect_error "message" args...
  local want=$1; shift
  if "$koi" sim "$@" > "$tmp/err" 2>&1; then fail "expected failure for: $*"; fi
  grep -qF -- "$want" "$tmp/err" || fail "wanted '$want', got: $(cat "$tmp/err")"
}
expect_error "--policy: unknown policy 'lottery'" --nodes "$nodes" --trace "$pods" --policy lottery
expect_error "cannot be replayed; use --mode fill" --nodes "$nodes" --trace "$dir/alibaba2023_openb_pod_list_multigpu50.csv"
expect_error "not an Alibaba node list" --nodes "$pods" --trace "$pods"
expect_error "/nonexistent.csv" --nodes /nonexistent.csv --trace "$pods"
expect_error "--arrival-scale must be > 0" --nodes "$nodes" --trace "$pods" --arrival-scale 0
"$koi" sim --help | grep -q -- "--arrival-scale" || fail "--help does not document --arrival-scale"
echo "ok"
