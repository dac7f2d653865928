#!/usr/bin/python3
"""PyTorch's CPU training step time for a Llama-style model, the peer of `koi train`.

Usage: /usr/bin/python3 bench/train_vs_pytorch.py --threads N --steps S [shape options]

The model is tests/reference/train_reference.py's loss_fn (the same math as Koi's trainer)
in float32 with torch.optim.AdamW and clip_grad_norm_; batches are random tokens. Prints the
median milliseconds of the steps after the first 10 (warm-up).
"""
import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "reference"))
from train_reference import loss_fn  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--ffn", type=int, default=352)
    ap.add_argument("--vocab", type=int, default=321)
    ap.add_argument("--batch", type=int, default=12)
    ap.add_argument("--context", type=int, default=64)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    c = {"dim": a.dim, "n_layers": a.layers, "n_heads": a.heads, "n_kv_heads": a.heads, "norm_eps": 1e-5,
         "rope_theta": 10000.0, "tied_embeddings": True, "rope_style": "neox"}
    P = {"model.embed_tokens.weight": torch.randn(a.vocab, a.dim) * 0.02, "model.norm.weight": torch.ones(a.dim)}
    for l in range(a.layers):
        p = f"model.layers.{l}."
        P[p + "input_layernorm.weight"] = torch.ones(a.dim)
        P[p + "post_attention_layernorm.weight"] = torch.ones(a.dim)
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            P[p + f"self_attn.{name}.weight"] = torch.randn(a.dim, a.dim) * 0.02
        P[p + "mlp.gate_proj.weight"] = torch.randn(a.ffn, a.dim) * 0.02
        P[p + "mlp.up_proj.weight"] = torch.randn(a.ffn, a.dim) * 0.02
        P[p + "mlp.down_proj.weight"] = torch.randn(a.dim, a.ffn) * 0.02
    for t in P.values():
        t.requires_grad_(True)
    opt = torch.optim.AdamW(list(P.values()), lr=1e-3, betas=(0.9, 0.99), weight_decay=0.1)
    times = []
    for step in range(a.steps):
        inputs = torch.randint(0, a.vocab, (a.batch, a.context))
        targets = torch.randint(0, a.vocab, (a.batch, a.context))
        t0 = time.perf_counter()
        loss = loss_fn(P, c, inputs, targets, {})
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(P.values()), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - t0)
    print(f"{statistics.median(times[10:]) * 1e3:.2f}")


if __name__ == "__main__":
    main()
