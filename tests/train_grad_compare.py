#!/usr/bin/python3
"""Compares the gradients two training runs took in their first step, tensor by tensor.

Usage: train_grad_compare.py CKPT_A CKPT_B TOL

After one AdamW step a checkpoint's optimizer.safetensors holds m = (1 - beta1) g for every
parameter ("m.<name>"), so two step-1 checkpoints of the same recipe compare their (clipped)
gradients. Fails unless, for every tensor, max |a - b| <= TOL * max |b|; prints the worst ratio.
Debian's python3-numpy only (run as /usr/bin/python3; no torch: it starts in milliseconds).
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "reference"))
from safetensors_f32 import read_f32_safetensors  # noqa: E402  (numpy only: the one F32 reader)


def main():
    a = read_f32_safetensors(sys.argv[1] + "/optimizer.safetensors")
    b = read_f32_safetensors(sys.argv[2] + "/optimizer.safetensors")
    tol = float(sys.argv[3])
    if sorted(a) != sorted(b):
        sys.exit("FAIL: the checkpoints hold different tensors")
    worst, worst_name, count = 0.0, "", 0
    for name in sorted(a):
        if not name.startswith("m."):
            continue
        if a[name].shape != b[name].shape:
            sys.exit(f"FAIL: {name} has shape {a[name].shape} against {b[name].shape}")
        scale = float(np.abs(b[name]).max())
        if scale == 0.0:
            sys.exit(f"FAIL: {name} has no gradient in the reference")
        ratio = float(np.abs(a[name].astype(np.float64) - b[name]).max()) / scale
        count += 1
        if ratio > worst:
            worst, worst_name = ratio, name
    print(f"{count} gradients, worst max|diff|/max|ref| {worst:.2e} ({worst_name})")
    if worst > tol:
        sys.exit(f"FAIL: {worst_name} differs by {worst:.2e} of its largest value (bound {tol})")


main()
