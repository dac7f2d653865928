#!/usr/bin/env python3
"""Placement quality on the Alibaba openb traces, the FGD paper's measure: `koi sim --mode fill`
(tasks sampled with replacement until arrived GPU demand reaches 130% of capacity; a task that
cannot be placed fails) and the share of GPUs left unallocated when arrived demand reaches
100%, for each placement policy on each trace, over several sampling seeds. Prints a Markdown
table: mean and standard deviation across seeds (and the min-max), and FGD against each baseline.

    python3 bench/fgd_quality.py build/koi [SEEDS] [SHARED_DIR] [TRACES]   (SEEDS default 5;
        TRACES a comma list of default, multigpu50, gpushare40; default all three)
`koi` is not a column: in fill mode its placement is FGD's (preemption and elastic resize are
off), and it gave the same figures as `fgd` on every seed of the default trace.
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

koi = sys.argv[1] if len(sys.argv) > 1 else "build/koi"
seeds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
shared = sys.argv[3] if len(sys.argv) > 3 else os.environ.get("KOI_SHARED_DIR", "../shared")
traces_dir = os.path.join(shared, "traces", "cluster")
nodes = os.path.join(traces_dir, "alibaba2023_openb_node_list_gpu_node.csv")
traces = sys.argv[4].split(",") if len(sys.argv) > 4 else ["default", "multigpu50", "gpushare40"]
# fifo = arrival order + first-fit; best-fit = tightest node; fgd = FGD placement alone;
policies = ["fifo", "best-fit", "fgd"]


def run(trace, policy, seed, out):
    r = subprocess.run([koi, "sim", "--nodes", nodes, "--trace",
                        os.path.join(traces_dir, "alibaba2023_openb_pod_list_%s.csv" % trace),
                        "--policy", policy, "--mode", "fill", "--seed", str(seed), "--json", out],
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("koi sim failed: " + r.stderr)
    with open(out) as f:
        return json.load(f)["unallocated_gpu_at_full"]


def main():
    results = {}
    started = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        for trace in traces:
            for policy in policies:
                values = [run(trace, policy, seed, os.path.join(tmp, "r.json")) for seed in range(1, seeds + 1)]
                results[(trace, policy)] = values
                print("# %s %s: %s (%.0f s so far)" % (trace, policy, " ".join("%.4f" % v for v in values),
                                                       time.time() - started), file=sys.stderr, flush=True)
    print("| trace | " + " | ".join(policies) + " | FGD vs first-fit | FGD vs best-fit |")
    print("| --- |" + " ---: |" * (len(policies) + 2))
    for trace in traces:
        cells = []
        for policy in policies:
            v = results[(trace, policy)]
            sd = statistics.stdev(v) if len(v) > 1 else 0.0
            cells.append("%.2f%% ± %.2f (%.2f-%.2f)" % (100 * statistics.mean(v), 100 * sd, 100 * min(v), 100 * max(v)))
        fgd = statistics.mean(results[(trace, "fgd")])
        rel = ["%.0f%% fewer" % (100 * (1 - fgd / statistics.mean(results[(trace, b)]))) for b in ("fifo", "best-fit")]
        print("| %s | %s | %s |" % (trace, " | ".join(cells), " | ".join(rel)))
    print("\n%d seeds per cell; %.0f s in all" % (seeds, time.time() - started))


if __name__ == "__main__":
    main()
