#!/usr/bin/python3
"""Makes tiny random Llama-family models (Llama, Mistral with and without a sliding window,
Qwen2, Qwen3, Gemma 2, Gemma 3, Phi-3 with and without LongRoPE, and the mixture-of-experts
Mixtral, Qwen2-MoE and Qwen3-MoE) in Hugging Face format and their reference logits.

Usage: /usr/bin/python3 tiny_models.py OUT_DIR

For each model OUT_DIR/<name>/ gets config.json, model.safetensors (written by hand: the
format is an 8-byte header length, a JSON header and the raw tensors) and, for a fixed batch
of prompts, logits_<i>.f64 (float64, [len(prompt), vocab]) from a plain PyTorch
implementation of the architecture computed in float64, plus prompts.json.
This is the independent oracle for Koi's forward pass; it shares no code with Koi.
"""
import json
import math
import os
import struct
import sys

import torch

import moe_reference  # same folder: Mixtral / Qwen2-MoE / Qwen3-MoE blocks

PROMPTS = [[1, 5, 9, 200, 17, 3, 44], [1, 250], [7], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35]]

MODELS = {
    # name: (architecture, hidden, layers, heads, kv_heads, ffn, vocab, tied, theta, bias, rope_scaling, dtype)
    "llama_gqa": ("LlamaForCausalLM", 64, 2, 8, 2, 96, 320, False, 10000.0, False, None, "F32"),
    "qwen2_bias_tied": ("Qwen2ForCausalLM", 64, 2, 4, 2, 128, 288, True, 1e6, True, None, "F32"),
    "llama3_scaled": ("LlamaForCausalLM", 128, 2, 8, 2, 160, 256, False, 500000.0, False,
                      {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                       "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}, "F32"),
    "mistral_bf16": ("MistralForCausalLM", 64, 2, 4, 1, 96, 256, False, 1e6, False, None, "BF16"),
    # Qwen3: per-head Q/K RMSNorm and a head_dim that is not hidden / heads (as in Qwen3-0.6B,
    # 16 heads of 128 over a hidden size of 1024).
    "qwen3_qknorm": ("Qwen3ForCausalLM", 64, 2, 4, 2, 128, 288, False, 1e6, False, None, "F32"),
    "qwen3_tied": ("Qwen3ForCausalLM", 64, 2, 8, 2, 96, 256, True, 1e6, False, None, "F32"),
    # Gemma 2: three layers (sliding, global, sliding) with a window of 5, shorter than the
    # longest prompt (35), and soft-caps small enough to bend these random logits.
    "gemma2_swa": ("Gemma2ForCausalLM", 64, 3, 4, 2, 128, 288, True, 10000.0, False, None, "F32"),
    # Mistral 7B v0.1's sliding window on every layer, here 6 positions of the 35-token prompt.
    "mistral_swa": ("MistralForCausalLM", 64, 2, 4, 2, 96, 256, False, 10000.0, False, None, "F32"),
    # Phi-3: fused qkv_proj and gate_up_proj, a window of 5 on every layer (Phi-3-mini-4k has 2047).
    "phi3_swa": ("Phi3ForCausalLM", 64, 2, 4, 2, 96, 256, False, 10000.0, False, None, "F32"),
    # Phi-3 LongRoPE (as Phi-3-mini-128k): short and long factors around an original context of
    # 8 positions, a context of 256, so an attention factor of sqrt(1 + ln 32 / ln 8).
    "phi3_longrope": ("Phi3ForCausalLM", 64, 2, 4, 4, 96, 288, False, 10000.0, False,
                      {"type": "longrope", "short_factor": [1.0 + 0.15 * i for i in range(8)],
                       "long_factor": [1.0 + 2.5 * i ** 1.5 for i in range(8)]}, "F32"),
    # Gemma 3 (text): four layers, the third global (sliding_window_pattern 3), a window of 6,
    # q/k norms, local rope base 10000 and global 1e6 with linear scaling 4, and a final
    # soft-cap (Gemma 3 releases have none; the config field is honoured where present).
    "gemma3_swa": ("Gemma3ForCausalLM", 64, 4, 4, 2, 128, 288, True, 1e6, False, {"rope_type": "linear", "factor": 4.0},
                   "F32"),
    # Gemma 3 as llama.cpp fixes it (pattern 6, local base 10000, query_pre_attn_scalar =
    # head_dim, no soft-caps), so that llama.cpp can run Koi's GGUF of it too
    # (bench/peer-llamacpp/arch_exactness); a window of 8.
    "gemma3_pattern6": ("Gemma3ForCausalLM", 64, 6, 4, 2, 128, 288, True, 1e6, False,
                        {"rope_type": "linear", "factor": 8.0}, "F32"),
    # Mixture of experts (moe_reference.py): Mixtral (top-2 of 4, softmax over the top-k
    # logits), Qwen2-MoE (top-2 of 6, no renormalisation, a shared expert with its sigmoid
    # gate, q/k/v biases) and Qwen3-MoE (top-3 of 8, norm_topk_prob, per-head Q/K norms).
    "mixtral_moe": ("MixtralForCausalLM", 64, 2, 4, 2, 48, 256, False, 1e6, False, None, "F32"),
    "qwen2_moe_shared": ("Qwen2MoeForCausalLM", 64, 2, 4, 2, 96, 256, False, 1e6, True, None, "F32"),
    "qwen3_moe": ("Qwen3MoeForCausalLM", 64, 2, 4, 2, 96, 256, True, 1e6, False, None, "F32"),
}

# config.json fields beyond the common ones, per model.
EXTRA_CONFIG = {
    "qwen3_qknorm": {"head_dim": 24, "attention_bias": False, "use_sliding_window": False, "sliding_window": None},
    "qwen3_tied": {"head_dim": 8, "attention_bias": False},
    "mixtral_moe": {"num_local_experts": 4, "num_experts_per_tok": 2, "sliding_window": None},
    "qwen2_moe_shared": {"num_experts": 6, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
                         "shared_expert_intermediate_size": 40, "norm_topk_prob": False, "decoder_sparse_step": 1,
                         "mlp_only_layers": []},
    "qwen3_moe": {"num_experts": 8, "num_experts_per_tok": 3, "moe_intermediate_size": 24, "norm_topk_prob": True,
                  "head_dim": 24, "attention_bias": False, "decoder_sparse_step": 1, "mlp_only_layers": []},
    "gemma2_swa": {"head_dim": 32, "query_pre_attn_scalar": 24, "sliding_window": 5, "attn_logit_softcapping": 2.5,
                   "final_logit_softcapping": 10.0, "hidden_activation": "gelu_pytorch_tanh", "model_type": "gemma2"},
    "mistral_swa": {"sliding_window": 6, "model_type": "mistral"},
    "phi3_swa": {"sliding_window": 5, "hidden_act": "silu", "model_type": "phi3"},
    "phi3_longrope": {"sliding_window": None, "hidden_act": "silu", "original_max_position_embeddings": 8,
                      "model_type": "phi3"},
    "gemma3_swa": {"head_dim": 32, "query_pre_attn_scalar": 24, "sliding_window": 6, "sliding_window_pattern": 3,
                   "layer_types": ["sliding_attention", "sliding_attention", "full_attention", "sliding_attention"],
                   "rope_local_base_freq": 10000.0, "attn_logit_softcapping": None, "final_logit_softcapping": 12.0,
                   "hidden_activation": "gelu_pytorch_tanh", "model_type": "gemma3_text"},
    "gemma3_pattern6": {"head_dim": 32, "query_pre_attn_scalar": 32, "sliding_window": 8, "sliding_window_pattern": 6,
                        "layer_types": ["sliding_attention"] * 5 + ["full_attention"], "rope_local_base_freq": 10000.0,
                        "attn_logit_softcapping": None, "final_logit_softcapping": None,
                        "hidden_activation": "gelu_pytorch_tanh", "model_type": "gemma3_text"},
}


def write_safetensors(path, tensors, dtype):
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        if dtype == "BF16":
            raw = t.detach().to(torch.bfloat16).contiguous().view(torch.int16).numpy().tobytes()
        else:
            raw = t.detach().to(torch.float32).contiguous().numpy().tobytes()
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def inv_freq(head_dim, theta, scaling):
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    if scaling is None:
        return inv
    factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
    old = scaling["original_max_position_embeddings"]
    low_wavelen, high_wavelen = old / low, old / high
    out = []
    for f in inv.tolist():
        wavelen = 2 * math.pi / f
        if wavelen < high_wavelen:
            out.append(f)
        elif wavelen > low_wavelen:
            out.append(f / factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            out.append((1 - smooth) * f / factor + smooth * f)
    return torch.tensor(out, dtype=torch.float64)


def rmsnorm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def causal_mask(T, window=None):
    """-inf above the diagonal; with a window, also on keys `window` or more positions back
    (transformers' sliding_window_overlay: a query at i sees keys i - window + 1 .. i)."""
    mask = torch.full((T, T), float("-inf"), dtype=torch.float64).triu(1)
    if window:
        far = torch.tril(torch.ones(T, T, dtype=torch.bool), diagonal=-window)
        mask = mask.masked_fill(far, float("-inf"))
    return mask


def forward(cfg, W, ids):
    """The decoder as transformers' modeling_llama / modeling_mistral / modeling_qwen2 /
    modeling_qwen3 define it (Mistral: the sliding-window mask on every layer)."""
    hidden, layers, heads, kv_heads = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim") or hidden // heads
    eps = cfg["rms_norm_eps"]
    T = len(ids)
    x = W["model.embed_tokens.weight"][torch.tensor(ids)]
    freqs = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq(hd, cfg["rope_theta"], cfg.get("rope_scaling")))
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()
    mistral = cfg["architectures"][0] == "MistralForCausalLM"
    mask = causal_mask(T, cfg.get("sliding_window") if mistral else None)
    for l in range(layers):
        p = f"model.layers.{l}."
        h = rmsnorm(x, W[p + "input_layernorm.weight"], eps)

        def proj(name):
            y = h @ W[p + f"self_attn.{name}.weight"].T
            b = W.get(p + f"self_attn.{name}.bias")
            return y + b if b is not None else y

        q = proj("q_proj").view(T, heads, hd)
        k = proj("k_proj").view(T, kv_heads, hd)
        if p + "self_attn.q_norm.weight" in W:
            # Qwen3Attention: q_norm / k_norm (Qwen3RMSNorm over head_dim) on each head, then rope.
            q = rmsnorm(q, W[p + "self_attn.q_norm.weight"], eps)
            k = rmsnorm(k, W[p + "self_attn.k_norm.weight"], eps)
        q, k = q.transpose(0, 1), k.transpose(0, 1)
        v = proj("v_proj").view(T, kv_heads, hd).transpose(0, 1)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(heads // kv_heads, dim=0)
        v = v.repeat_interleave(heads // kv_heads, dim=0)
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(hd) + mask, dim=-1)
        o = (att @ v).transpose(0, 1).reshape(T, heads * hd)
        x = x + o @ W[p + "self_attn.o_proj.weight"].T
        h = rmsnorm(x, W[p + "post_attention_layernorm.weight"], eps)
        if moe_reference.is_moe(cfg):
            x = x + moe_reference.moe_ffn(cfg, W, p, h)[0]
            continue
        g = torch.nn.functional.silu(h @ W[p + "mlp.gate_proj.weight"].T)
        u = h @ W[p + "mlp.up_proj.weight"].T
        x = x + (g * u) @ W[p + "mlp.down_proj.weight"].T
    x = rmsnorm(x, W["model.norm.weight"], eps)
    head = W["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else W["lm_head.weight"]
    return x @ head.T


def gemma_rmsnorm(x, w, eps):
    # Gemma2RMSNorm: x / rms(x) * (1 + weight)
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * (1.0 + w)


def forward_gemma2(cfg, W, ids):
    """The decoder as transformers' modeling_gemma2 defines it (eager attention)."""
    hidden, layers, heads, kv_heads = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd, eps, T = cfg["head_dim"], cfg["rms_norm_eps"], len(ids)
    x = W["model.embed_tokens.weight"][torch.tensor(ids)] * torch.tensor(hidden ** 0.5, dtype=torch.float32).double()
    freqs = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq(hd, cfg["rope_theta"], None))
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()
    causal = torch.full((T, T), float("-inf"), dtype=torch.float64).triu(1)
    # Sliding layers also mask keys sliding_window or more positions back.
    far = torch.tril(torch.ones(T, T, dtype=torch.bool), diagonal=-cfg["sliding_window"])
    sliding = causal.masked_fill(far, float("-inf"))
    cap = cfg["attn_logit_softcapping"]
    for l in range(layers):
        p = f"model.layers.{l}."
        is_sliding = l % 2 == 0  # Gemma2DecoderLayer: not bool(layer_idx % 2)
        h = gemma_rmsnorm(x, W[p + "input_layernorm.weight"], eps)
        q = (h @ W[p + "self_attn.q_proj.weight"].T).view(T, heads, hd).transpose(0, 1)
        k = (h @ W[p + "self_attn.k_proj.weight"].T).view(T, kv_heads, hd).transpose(0, 1)
        v = (h @ W[p + "self_attn.v_proj.weight"].T).view(T, kv_heads, hd).transpose(0, 1)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(heads // kv_heads, dim=0)
        v = v.repeat_interleave(heads // kv_heads, dim=0)
        s = q @ k.transpose(-1, -2) * cfg["query_pre_attn_scalar"] ** -0.5
        if cap is not None:
            s = torch.tanh(s / cap) * cap
        att = torch.softmax(s + (sliding if is_sliding else causal), dim=-1)
        o = (att @ v).transpose(0, 1).reshape(T, heads * hd) @ W[p + "self_attn.o_proj.weight"].T
        x = x + gemma_rmsnorm(o, W[p + "post_attention_layernorm.weight"], eps)
        h = gemma_rmsnorm(x, W[p + "pre_feedforward_layernorm.weight"], eps)
        g = torch.nn.functional.gelu(h @ W[p + "mlp.gate_proj.weight"].T, approximate="tanh")
        m = (g * (h @ W[p + "mlp.up_proj.weight"].T)) @ W[p + "mlp.down_proj.weight"].T
        x = x + gemma_rmsnorm(m, W[p + "post_feedforward_layernorm.weight"], eps)
    logits = gemma_rmsnorm(x, W["model.norm.weight"], eps) @ W["model.embed_tokens.weight"].T
    final_cap = cfg["final_logit_softcapping"]
    return logits if final_cap is None else torch.tanh(logits / final_cap) * final_cap


def longrope_inv_freq(cfg, hd, seq_len):
    """transformers' _compute_longrope_parameters with its dynamic update: the long factors for
    a forward pass over more than original_max_position_embeddings positions, else the short
    ones; the attention factor from max_position_embeddings / original."""
    rs, original = cfg["rope_scaling"], cfg["original_max_position_embeddings"]
    factor = cfg["max_position_embeddings"] / original
    attention_factor = math.sqrt(1 + math.log(factor) / math.log(original)) if factor > 1 else 1.0
    ext = torch.tensor(rs["long_factor"] if seq_len > original else rs["short_factor"], dtype=torch.float64)
    inv = 1.0 / (ext * cfg["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    return inv, attention_factor


def forward_phi3(cfg, W, ids):
    """The decoder as transformers' modeling_phi3 defines it: fused qkv_proj (q, k, v rows) and
    gate_up_proj (gate, up halves), LongRoPE with its attention factor on cos and sin, the
    sliding-window mask where sliding_window is set."""
    hidden, layers, heads, kv_heads = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd, eps, T = hidden // heads, cfg["rms_norm_eps"], len(ids)
    if cfg.get("rope_scaling"):
        inv, attention_factor = longrope_inv_freq(cfg, hd, T)
    else:
        inv, attention_factor = inv_freq(hd, cfg["rope_theta"], None), 1.0
    freqs = torch.outer(torch.arange(T, dtype=torch.float64), inv)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos() * attention_factor, emb.sin() * attention_factor
    mask = causal_mask(T, cfg.get("sliding_window"))
    x = W["model.embed_tokens.weight"][torch.tensor(ids)]
    q_pos = heads * hd
    for l in range(layers):
        p = f"model.layers.{l}."
        h = rmsnorm(x, W[p + "input_layernorm.weight"], eps)
        qkv = h @ W[p + "self_attn.qkv_proj.weight"].T
        q = qkv[:, :q_pos].reshape(T, heads, hd).transpose(0, 1)
        k = qkv[:, q_pos:q_pos + kv_heads * hd].reshape(T, kv_heads, hd).transpose(0, 1)
        v = qkv[:, q_pos + kv_heads * hd:].reshape(T, kv_heads, hd).transpose(0, 1)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(heads // kv_heads, dim=0)
        v = v.repeat_interleave(heads // kv_heads, dim=0)
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(hd) + mask, dim=-1)
        x = x + (att @ v).transpose(0, 1).reshape(T, heads * hd) @ W[p + "self_attn.o_proj.weight"].T
        h = rmsnorm(x, W[p + "post_attention_layernorm.weight"], eps)
        gate, up = (h @ W[p + "mlp.gate_up_proj.weight"].T).chunk(2, dim=-1)
        x = x + (up * torch.nn.functional.silu(gate)) @ W[p + "mlp.down_proj.weight"].T
    return rmsnorm(x, W["model.norm.weight"], eps) @ W["lm_head.weight"].T


def forward_gemma3(cfg, W, ids):
    """The text decoder as transformers' modeling_gemma3 defines it (eager attention): Gemma 2's
    block plus q_norm / k_norm (Gemma3RMSNorm over head_dim, before rope), sliding layers by
    layer_types, local rope (rope_local_base_freq, unscaled) on those and global rope
    (rope_theta with rope_scaling) on the others."""
    hidden, layers, heads, kv_heads = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd, eps, T = cfg["head_dim"], cfg["rms_norm_eps"], len(ids)
    x = W["model.embed_tokens.weight"][torch.tensor(ids)] * torch.tensor(hidden ** 0.5, dtype=torch.float32).double()

    def rope_tables(theta, linear_factor):
        inv = inv_freq(hd, theta, None) / linear_factor  # _compute_linear_scaling_rope_parameters
        freqs = torch.outer(torch.arange(T, dtype=torch.float64), inv)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos(), emb.sin()

    scaling = cfg.get("rope_scaling") or {}
    global_rope = rope_tables(cfg["rope_theta"], scaling.get("factor", 1.0) if scaling.get("rope_type") == "linear" else 1.0)
    local_rope = rope_tables(cfg["rope_local_base_freq"], 1.0)
    causal, sliding = causal_mask(T), causal_mask(T, cfg["sliding_window"])
    cap = cfg.get("attn_logit_softcapping")
    for l in range(layers):
        p = f"model.layers.{l}."
        is_sliding = cfg["layer_types"][l] == "sliding_attention"
        cos, sin = local_rope if is_sliding else global_rope
        h = gemma_rmsnorm(x, W[p + "input_layernorm.weight"], eps)
        q = gemma_rmsnorm((h @ W[p + "self_attn.q_proj.weight"].T).view(T, heads, hd), W[p + "self_attn.q_norm.weight"], eps)
        k = gemma_rmsnorm((h @ W[p + "self_attn.k_proj.weight"].T).view(T, kv_heads, hd), W[p + "self_attn.k_norm.weight"], eps)
        q, k = q.transpose(0, 1), k.transpose(0, 1)
        v = (h @ W[p + "self_attn.v_proj.weight"].T).view(T, kv_heads, hd).transpose(0, 1)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(heads // kv_heads, dim=0)
        v = v.repeat_interleave(heads // kv_heads, dim=0)
        s = q @ k.transpose(-1, -2) * cfg["query_pre_attn_scalar"] ** -0.5
        if cap is not None:
            s = torch.tanh(s / cap) * cap
        att = torch.softmax(s + (sliding if is_sliding else causal), dim=-1)
        o = (att @ v).transpose(0, 1).reshape(T, heads * hd) @ W[p + "self_attn.o_proj.weight"].T
        x = x + gemma_rmsnorm(o, W[p + "post_attention_layernorm.weight"], eps)
        h = gemma_rmsnorm(x, W[p + "pre_feedforward_layernorm.weight"], eps)
        g = torch.nn.functional.gelu(h @ W[p + "mlp.gate_proj.weight"].T, approximate="tanh")
        m = (g * (h @ W[p + "mlp.up_proj.weight"].T)) @ W[p + "mlp.down_proj.weight"].T
        x = x + gemma_rmsnorm(m, W[p + "post_feedforward_layernorm.weight"], eps)
    logits = gemma_rmsnorm(x, W["model.norm.weight"], eps) @ W["model.embed_tokens.weight"].T
    final_cap = cfg.get("final_logit_softcapping")
    return logits if final_cap is None else torch.tanh(logits / final_cap) * final_cap


FORWARD = {"Gemma2ForCausalLM": forward_gemma2, "Gemma3ForCausalLM": forward_gemma3,
           "Phi3ForCausalLM": forward_phi3}


def make(out_dir, name, spec, seed):
    arch, hidden, layers, heads, kv_heads, ffn, vocab, tied, theta, bias, scaling, dtype = spec
    g = torch.Generator().manual_seed(seed)
    extra = EXTRA_CONFIG.get(name, {})
    hd = extra.get("head_dim") or hidden // heads
    cfg = {"architectures": [arch], "hidden_size": hidden, "intermediate_size": ffn, "num_hidden_layers": layers,
           "num_attention_heads": heads, "num_key_value_heads": kv_heads, "vocab_size": vocab,
           "max_position_embeddings": 256, "rms_norm_eps": 1e-6, "rope_theta": theta, "tie_word_embeddings": tied,
           "torch_dtype": "float32" if dtype == "F32" else "bfloat16"}
    if scaling:
        cfg["rope_scaling"] = scaling
    cfg.update(extra)

    def rand(*shape, scale=0.08):
        return torch.randn(*shape, generator=g, dtype=torch.float64) * scale

    W = {"model.embed_tokens.weight": rand(vocab, hidden, scale=0.5),
         "model.norm.weight": 1.0 + rand(hidden, scale=0.1)}
    if not tied:
        W["lm_head.weight"] = rand(vocab, hidden)
    for l in range(layers):
        p = f"model.layers.{l}."
        W[p + "input_layernorm.weight"] = 1.0 + rand(hidden, scale=0.1)
        W[p + "post_attention_layernorm.weight"] = 1.0 + rand(hidden, scale=0.1)
        W[p + "self_attn.q_proj.weight"] = rand(heads * hd, hidden, scale=0.2)
        W[p + "self_attn.k_proj.weight"] = rand(kv_heads * hd, hidden, scale=0.2)
        W[p + "self_attn.v_proj.weight"] = rand(kv_heads * hd, hidden)
        W[p + "self_attn.o_proj.weight"] = rand(hidden, heads * hd)
        if bias:
            W[p + "self_attn.q_proj.bias"] = rand(heads * hd, scale=0.5)
            W[p + "self_attn.k_proj.bias"] = rand(kv_heads * hd, scale=0.5)
            W[p + "self_attn.v_proj.bias"] = rand(kv_heads * hd, scale=0.5)
        if arch in ("Qwen3ForCausalLM", "Qwen3MoeForCausalLM"):
            W[p + "self_attn.q_norm.weight"] = 1.0 + rand(hd, scale=0.3)
            W[p + "self_attn.k_norm.weight"] = 1.0 + rand(hd, scale=0.3)
        if arch == "Gemma3ForCausalLM":  # Gemma3RMSNorm stores w of (1 + w) too
            W[p + "self_attn.q_norm.weight"] = rand(hd, scale=0.3)
            W[p + "self_attn.k_norm.weight"] = rand(hd, scale=0.3)
        if arch in ("Gemma2ForCausalLM", "Gemma3ForCausalLM"):  # Gemma norms store w of (1 + w)
            for n in ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                      "post_feedforward_layernorm"):
                W[p + n + ".weight"] = rand(hidden, scale=0.3)
        if moe_reference.is_moe(cfg):
            W.update(moe_reference.make_weights(cfg, p, rand))
            continue
        W[p + "mlp.gate_proj.weight"] = rand(ffn, hidden)
        W[p + "mlp.up_proj.weight"] = rand(ffn, hidden)
        W[p + "mlp.down_proj.weight"] = rand(hidden, ffn)
        if arch == "Phi3ForCausalLM":  # Phi3Attention.qkv_proj, Phi3MLP.gate_up_proj
            W[p + "self_attn.qkv_proj.weight"] = torch.cat(
                [W.pop(p + f"self_attn.{n}_proj.weight") for n in ("q", "k", "v")])
            W[p + "mlp.gate_up_proj.weight"] = torch.cat([W.pop(p + f"mlp.{n}_proj.weight") for n in ("gate", "up")])
    # The reference sees exactly the stored weights (rounded to f32 or bf16).
    if arch in ("Gemma2ForCausalLM", "Gemma3ForCausalLM"):
        W["model.norm.weight"] = rand(hidden, scale=0.3)
    store = torch.float32 if dtype == "F32" else torch.bfloat16
    W = {k: v.to(store).to(torch.float64) for k, v in W.items()}

    d = os.path.join(out_dir, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    write_safetensors(os.path.join(d, "model.safetensors"), W, dtype)
    with open(os.path.join(d, "prompts.json"), "w") as f:
        json.dump(PROMPTS, f)
    for i, ids in enumerate(PROMPTS):
        logits = FORWARD.get(arch, forward)(cfg, W, ids)
        with open(os.path.join(d, f"logits_{i}.f64"), "wb") as f:
            f.write(logits.contiguous().numpy().astype("<f8").tobytes())


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + list(range(ord("\xae"), ord("\xff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def write_byte_level_tokenizer(d, vocab_size):
    """A small GPT-2-style byte-level BPE tokenizer.json (256 byte tokens, merges learned
    greedily from a fixed text, two special tokens), so that HF directories are complete."""
    b2u = bytes_to_unicode()
    vocab = {b2u[b]: b for b in range(256)}
    merges = []
    text = "once upon a time there was a little model that liked to talk about the weather and the sea " * 4
    words = [[b2u[b] for b in (" " + w).encode()] for w in text.split()]
    while len(vocab) < vocab_size - 2:
        pairs = {}
        for w in words:
            for a, b in zip(w, w[1:]):
                pairs[(a, b)] = pairs.get((a, b), 0) + 1
        if not pairs:
            break
        a, b = max(sorted(pairs), key=lambda p: pairs[p])
        merges.append(a + " " + b)
        vocab[a + b] = len(vocab)
        for w in words:
            i = 0
            while i < len(w) - 1:
                if w[i] == a and w[i + 1] == b:
                    w[i:i + 2] = [a + b]
                i += 1
    bos, eos = len(vocab), len(vocab) + 1
    tok = {
        "version": "1.0",
        "added_tokens": [
            {"id": bos, "content": "<|begin_of_text|>", "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True},
            {"id": eos, "content": "<|end_of_text|>", "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True},
        ],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "vocab": vocab, "merges": merges},
    }
    with open(os.path.join(d, "tokenizer.json"), "w") as f:
        json.dump(tok, f)
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>", "add_bos_token": True}, f)


def main():
    out = sys.argv[1]
    for seed, (name, spec) in enumerate(MODELS.items()):
        make(out, name, spec, 1234 + seed)
        write_byte_level_tokenizer(os.path.join(out, name), spec[6])
    print("ok")


if __name__ == "__main__":
    main()
