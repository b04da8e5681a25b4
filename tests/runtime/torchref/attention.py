"""PyTorch reference of the attention layer kind (runtime/kernels/attention.c): pre-norm (RMSNorm)
grouped-query self-attention (q, k, v biases with qkv_bias; per-head RMSNorm of q and k with
qk_norm) with rotary embedding (rotate-half, base rope_theta; none when rope is 0), causal and
sliding-window masks, and a residual connection; Gemma's variants: (1 + w) norms
(norm_plus_one), scores scaled by score_dim^-0.5 and softcapped before the mask (softcap), the
output normalized before the residual (post_norm). Written as the textbook formulation."""
import math

import torch

from common import eps, norm_weight, rmsnorm, softcap


def _rotate_half(t):
    half = t.shape[-1] // 2
    return torch.cat([-t[..., half:], t[..., :half]], dim=-1)


def _llama3_scaling(inv_freq, dims):
    """Llama 3.1's rope scaling (transformers' _compute_llama3_parameters): wavelengths longer
    than original / low_freq_factor slowed by factor, those between original / high_freq_factor
    and that blended, the shorter ones kept."""
    factor = float(dims.get("rope_factor", 1.0))
    if factor == 1.0:
        return inv_freq
    low, high = float(dims["rope_low_freq_factor"]), float(dims["rope_high_freq_factor"])
    orig = float(dims["rope_original_seq"])
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > orig / low, inv_freq / factor, inv_freq)
    smooth = (orig / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < orig / high) & ~(wavelen > orig / low)
    return torch.where(medium, smoothed, scaled)


def _rotary(t, theta, dims):
    """t: [B, heads, S, hd]; rotate each pair (i, i + hd/2) by angle pos * theta^(-2i/hd)
    (rope-scaled as Llama 3.1 when dims say so, and divided by rope_linear: transformers'
    _compute_linear_scaling_rope_parameters)."""
    S, hd = t.shape[-2], t.shape[-1]
    inv_freq = _llama3_scaling(theta ** (-torch.arange(0, hd, 2, dtype=t.dtype) / hd), dims)
    inv_freq = inv_freq / float(dims.get("rope_linear", 1.0))
    angles = torch.outer(torch.arange(S, dtype=t.dtype), inv_freq)  # [S, hd/2]
    angles = torch.cat([angles, angles], dim=-1)  # [S, hd]
    return t * angles.cos() + _rotate_half(t) * angles.sin()


def _mask(S, causal, window):
    """allowed[t, j]: key j is visible from query t."""
    t = torch.arange(S).unsqueeze(1)
    j = torch.arange(S).unsqueeze(0)
    allowed = torch.ones(S, S, dtype=torch.bool)
    if causal:
        allowed &= j <= t
    if window > 0:
        allowed &= (t - j < window) if causal else ((t - j).abs() < window)
    return allowed


def forward(dims, x, p):
    B, S, hidden = dims["B"], dims["S"], dims["hidden"]
    H, KV, hd = dims["heads"], dims["kv_heads"], dims["head_dim"]
    causal, window = bool(dims["causal"]), int(dims["window"])
    theta = float(dims.get("rope_theta", 10000.0))

    nw = lambda w: norm_weight(dims, w)  # noqa: E731
    h = rmsnorm(x, nw(p["norm"]), eps(dims))
    q, k, v = h @ p["wq"], h @ p["wk"], h @ p["wv"]
    if dims.get("qkv_bias"):
        q, k, v = q + p["bq"], k + p["bk"], v + p["bv"]
    q, k = q.view(B, S, H, hd), k.view(B, S, KV, hd)
    if dims.get("qk_norm"):
        q, k = rmsnorm(q, nw(p["q_norm"]), eps(dims)), rmsnorm(k, nw(p["k_norm"]), eps(dims))
    q, k = q.transpose(1, 2), k.transpose(1, 2)
    v = v.view(B, S, KV, hd).transpose(1, 2)
    if dims.get("rope", 1):
        q, k = _rotary(q, theta, dims), _rotary(k, theta, dims)
    k = k.repeat_interleave(H // KV, dim=1)
    v = v.repeat_interleave(H // KV, dim=1)

    scores = q @ k.transpose(-1, -2) / math.sqrt(float(dims.get("score_dim", hd)))
    scores = softcap(scores, float(dims.get("softcap", 0)))
    scores = scores.masked_fill(~_mask(S, causal, window), float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    o = (probs @ v).transpose(1, 2).reshape(B * S, H * hd)
    out = o @ p["wo"]
    if dims.get("post_norm"):
        out = rmsnorm(out, nw(p["post_norm"]), eps(dims))
    return x + out
