#!/usr/bin/python3
"""PyTorch oracle for Koi's trainer: loss, gradients and AdamW steps of a Llama-family model.

Usage: /usr/bin/python3 train_reference.py DIR

Reads DIR/case.json (model shape, batch, optimizer settings) and DIR/init.safetensors (the
initial weights, Hugging Face names, float32), computes in float64 with autograd:
  - the mean cross-entropy loss of the batch and the gradient of every parameter,
  - the losses of `steps` training steps (forward, backward, clip_grad_norm_, nanoGPT's
    warmup + cosine learning rate, torch.optim.AdamW with weight decay on matrices only),
and writes DIR/reference.safetensors: "loss" [1], "grad.<name>" and "losses" [steps]
(float32). Shares no code with Koi (llm.c's test_gpt2 approach).

With "lora": {"alpha", "rank"} in case.json, DIR/adapter_model.safetensors holds LoRA
adapters with PEFT's names; every projection that has one computes
x W^T + alpha/rank (x A^T) B^T (PEFT's LoRA Linear), the base weights are frozen, and the
gradients and the AdamW steps are those of the adapters.

With "moe" in the model ({"family": "mixtral" | "qwen2_moe", "experts", "experts_per_token",
"expert_ffn", "shared_ffn", "norm_topk_prob", "aux_coef"}), every FFN is moe_reference's block
and the loss is the mean cross-entropy plus aux_coef times the mean over layers of the
load-balancing loss (moe_reference.aux_loss).
"""
import json
import math
import os
import sys

import torch

import moe_reference  # same folder: the Mixtral / Qwen2-MoE blocks and the load-balancing loss
from safetensors_f32 import read_f32_safetensors  # same folder: the one F32 reader
from tiny_models import rmsnorm, write_safetensors  # same folder: one safetensors writer, one RMSNorm


def read_safetensors(path):
    return {name: torch.tensor(arr.copy(), dtype=torch.float64) for name, arr in read_f32_safetensors(path).items()}


def rope(x, pos, theta, style):
    # x: (B, T, heads, D); rotates pair i by pos * theta^(-2i/D).
    d = x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    ang = pos[:, None].to(torch.float64) * inv[None, :]  # (T, D/2)
    cos = torch.cos(ang)[None, :, None, :].to(x.dtype)
    sin = torch.sin(ang)[None, :, None, :].to(x.dtype)
    if style == "interleaved":
        x0, x1 = x[..., 0::2], x[..., 1::2]
        return torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1).flatten(-2)
    x0, x1 = x[..., : d // 2], x[..., d // 2:]
    return torch.cat((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1)


def moe_config(m):
    """The config.json fields moe_reference reads, for the case's "moe" settings."""
    if m["family"] == "mixtral":
        return {"architectures": ["MixtralForCausalLM"], "num_local_experts": m["experts"],
                "num_experts_per_tok": m["experts_per_token"], "intermediate_size": m["expert_ffn"]}
    return {"architectures": ["Qwen2MoeForCausalLM"], "num_experts": m["experts"],
            "num_experts_per_tok": m["experts_per_token"], "moe_intermediate_size": m["expert_ffn"],
            "shared_expert_intermediate_size": m["shared_ffn"], "norm_topk_prob": m["norm_topk_prob"]}


def loss_fn(P, c, inputs, targets, lora):
    B, T = inputs.shape
    moe = moe_config(c["moe"]) if "moe" in c else None
    aux = []

    def linear(x, module):
        y = x @ P[module + ".weight"].T
        a = lora.get("base_model.model." + module + ".lora_A.weight")
        if a is not None:
            y = y + lora["scale"] * (x @ a.T) @ lora["base_model.model." + module + ".lora_B.weight"].T
        return y

    H, KV, D = c["n_heads"], c["n_kv_heads"], c["dim"] // c["n_heads"]
    pos = torch.arange(T)
    x = P["model.embed_tokens.weight"][inputs]
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    for l in range(c["n_layers"]):
        p = f"model.layers.{l}."
        h = rmsnorm(x, P[p + "input_layernorm.weight"], c["norm_eps"])

        def proj(name):
            y = linear(h, p + f"self_attn.{name}")
            bias = P.get(p + f"self_attn.{name}.bias")
            return y if bias is None else y + bias

        q = rope(proj("q_proj").view(B, T, H, D), pos, c["rope_theta"], c["rope_style"])
        k = rope(proj("k_proj").view(B, T, KV, D), pos, c["rope_theta"], c["rope_style"])
        v = proj("v_proj").view(B, T, KV, D)
        k = k.repeat_interleave(H // KV, dim=2)
        v = v.repeat_interleave(H // KV, dim=2)
        att = torch.einsum("bthd,bshd->bhts", q, k) / math.sqrt(D)
        att = att.masked_fill(mask, float("-inf")).softmax(-1)
        o = torch.einsum("bhts,bshd->bthd", att, v).reshape(B, T, H * D)
        x = x + linear(o, p + "self_attn.o_proj")
        h = rmsnorm(x, P[p + "post_attention_layernorm.weight"], c["norm_eps"])
        if moe is not None:
            y, router_logits = moe_reference.moe_ffn(moe, P, p, h)
            x = x + y
            aux.append(moe_reference.aux_loss(moe, router_logits))
            continue
        g = torch.nn.functional.silu(linear(h, p + "mlp.gate_proj")) * linear(h, p + "mlp.up_proj")
        x = x + linear(g, p + "mlp.down_proj")
    x = rmsnorm(x, P["model.norm.weight"], c["norm_eps"])
    head = P["model.embed_tokens.weight"] if c["tied_embeddings"] else P["lm_head.weight"]
    logits = x @ head.T
    loss = torch.nn.functional.cross_entropy(logits.view(B * T, -1), targets.view(-1))
    if moe is not None:
        loss = loss + c["moe"]["aux_coef"] * torch.stack(aux).mean()
    return loss


def lr_at(o, step):
    if step < o["warmup_steps"]:
        return o["lr"] * (step + 1) / (o["warmup_steps"] + 1)
    if step > o["decay_steps"]:
        return o["min_lr"]
    ratio = (step - o["warmup_steps"]) / (o["decay_steps"] - o["warmup_steps"])
    return o["min_lr"] + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (o["lr"] - o["min_lr"])


def main():
    d = sys.argv[1]
    with open(os.path.join(d, "case.json")) as f:
        case = json.load(f)
    c, o = case["model"], case["optim"]
    P = read_safetensors(os.path.join(d, "init.safetensors"))
    lora = {}
    trained = P
    if "lora" in case:
        trained = read_safetensors(os.path.join(d, "adapter_model.safetensors"))
        lora = dict(trained, scale=case["lora"]["alpha"] / case["lora"]["rank"])
    for t in trained.values():
        t.requires_grad_(True)
    inputs = torch.tensor(case["inputs"], dtype=torch.long)
    targets = torch.tensor(case["targets"], dtype=torch.long)

    out = {}
    loss = loss_fn(P, c, inputs, targets, lora)
    loss.backward()
    out["loss"] = loss.detach().reshape(1)
    for name, t in trained.items():
        out["grad." + name] = t.grad.clone()
        t.grad = None

    names = sorted(trained)
    decay = [trained[n] for n in names if trained[n].dim() >= 2]
    no_decay = [trained[n] for n in names if trained[n].dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": o["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=o["lr"], betas=(o["beta1"], o["beta2"]), eps=o["eps"])
    losses = []
    for step in range(o["steps"]):
        for group in opt.param_groups:
            group["lr"] = lr_at(o, step)
        loss = loss_fn(P, c, inputs, targets, lora)
        losses.append(loss.item())
        loss.backward()
        torch.nn.utils.clip_grad_norm_([trained[n] for n in names], o["grad_clip"])
        opt.step()
        opt.zero_grad()
    out["losses"] = torch.tensor(losses, dtype=torch.float64)
    write_safetensors(os.path.join(d, "reference.safetensors"), out, "F32")


if __name__ == "__main__":
    main()
