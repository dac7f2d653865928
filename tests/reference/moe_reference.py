"""Mixture-of-experts FFN blocks in plain PyTorch, as transformers' modeling_mixtral,
modeling_qwen2_moe and modeling_qwen3_moe define them, for tiny_models.py (logits) and
train_reference.py (gradients). Shares no code with Koi.

cfg keys: "architectures" (Mixtral / Qwen2-MoE / Qwen3-MoE), num_local_experts or num_experts,
num_experts_per_tok, norm_topk_prob (Qwen), shared_expert_intermediate_size (Qwen2-MoE).
"""
import torch


def is_moe(cfg):
    return cfg["architectures"][0] in ("MixtralForCausalLM", "Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM")


def is_mixtral(cfg):
    return cfg["architectures"][0] == "MixtralForCausalLM"


def n_experts(cfg):
    return cfg["num_local_experts"] if is_mixtral(cfg) else cfg["num_experts"]


def expert_names(cfg, p, e):
    """(gate, up, down) weight names of expert e under layer prefix p."""
    if is_mixtral(cfg):
        q = f"{p}block_sparse_moe.experts.{e}."
        return q + "w1.weight", q + "w3.weight", q + "w2.weight"
    q = f"{p}mlp.experts.{e}."
    return q + "gate_proj.weight", q + "up_proj.weight", q + "down_proj.weight"


def router_name(cfg, p):
    return p + ("block_sparse_moe.gate.weight" if is_mixtral(cfg) else "mlp.gate.weight")


def make_weights(cfg, p, rand):
    """Random weights of one layer's MoE block: router, experts, shared expert and its gate."""
    hidden, E = cfg["hidden_size"], n_experts(cfg)
    F = cfg["intermediate_size"] if is_mixtral(cfg) else cfg["moe_intermediate_size"]
    W = {router_name(cfg, p): rand(E, hidden, scale=0.5)}  # a sharp router: clear top-k choices
    for e in range(E):
        g, u, d = expert_names(cfg, p, e)
        W[g], W[u], W[d] = rand(F, hidden), rand(F, hidden), rand(hidden, F)
    Fs = cfg.get("shared_expert_intermediate_size", 0)
    if Fs:
        W[p + "mlp.shared_expert.gate_proj.weight"] = rand(Fs, hidden)
        W[p + "mlp.shared_expert.up_proj.weight"] = rand(Fs, hidden)
        W[p + "mlp.shared_expert.down_proj.weight"] = rand(hidden, Fs)
        W[p + "mlp.shared_expert_gate.weight"] = rand(1, hidden, scale=0.3)
    return W


def swiglu(h, W, g, u, d):
    return (torch.nn.functional.silu(h @ W[g].T) * (h @ W[u].T)) @ W[d].T


def moe_ffn(cfg, W, p, h):
    """The block's output for h (..., hidden) and its router logits (tokens, experts)."""
    E, k = n_experts(cfg), cfg["num_experts_per_tok"]
    logits = h @ W[router_name(cfg, p)].T
    if is_mixtral(cfg):
        # MixtralSparseMoeBlock as the brief states it: softmax over the top-k logits.
        top_logits, idx = torch.topk(logits, k, dim=-1)
        weights = torch.softmax(top_logits, dim=-1)
    else:
        # Qwen2MoeSparseMoeBlock / Qwen3MoeSparseMoeBlock: softmax over all, top-k, norm_topk_prob.
        weights, idx = torch.topk(torch.softmax(logits, dim=-1), k, dim=-1)
        if cfg.get("norm_topk_prob", False):
            weights = weights / weights.sum(dim=-1, keepdim=True)
    out = torch.zeros_like(h)
    for e in range(E):
        # Every expert runs on every token; tokens that did not choose it weigh it by 0.
        w_e = (weights * (idx == e)).sum(dim=-1, keepdim=True)
        out = out + w_e * swiglu(h, W, *expert_names(cfg, p, e))
    if cfg.get("shared_expert_intermediate_size", 0):
        q = p + "mlp.shared_expert."
        gate = torch.sigmoid(h @ W[p + "mlp.shared_expert_gate.weight"].T)
        out = out + gate * swiglu(h, W, q + "gate_proj.weight", q + "up_proj.weight", q + "down_proj.weight")
    return out, logits.reshape(-1, E)


def aux_loss(cfg, router_logits):
    """Switch Transformer / Megatron-LM load-balancing loss of one layer: E * sum_e f_e * P_e,
    f_e = the fraction of the N*k routing choices that picked expert e (no gradient),
    P_e = the mean router probability of e over the N tokens."""
    E, k = n_experts(cfg), cfg["num_experts_per_tok"]
    probs = torch.softmax(router_logits, dim=-1)
    idx = torch.topk(router_logits, k, dim=-1).indices
    f = torch.nn.functional.one_hot(idx, E).sum(dim=(0, 1)).to(probs.dtype) / (router_logits.shape[0] * k)
    return E * (f * probs.mean(dim=0)).sum()
