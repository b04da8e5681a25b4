"""PyTorch reference of the "mla" layer kind (runtime/kernels/mla.c): DeepSeek-V2/V3's multi-head
latent attention as transformers' DeepseekV2Attention computes it, pre-norm with its residual.
h = RMSNorm(x) * norm; the queries q = h wq, or with q_rank > 0 q = RMSNorm(h wq_a) * q_a_norm wq_b
(latent_eps); the keys' and values' latent [c | k_pe] = h wkv_a, c = RMSNorm(c) * kv_a_norm
(latent_eps); [k_nope | v] per head = c wkv_b; each head's query is [q_nope | q_pe] (nope_dim,
rope_dim), its key [k_nope | k_pe] with k_pe shared by all heads; q_pe and k_pe turn by the rotary
embedding of interleaved pairs (2i, 2i + 1) at angle t * rope_theta^(-2i/rope_dim); scores
q k^T / sqrt(nope_dim + rope_dim), causal; P = softmax; o = P v; y = x + o wo. With yarn_factor
> 1, YaRN's frequencies and magnitude scales (transformers' _compute_yarn_parameters and
yarn_apply_mscale). Written from the definition, not from the C code (which de-interleaves the
rotary pairs and pads v)."""
import math

import torch

from common import rmsnorm


def _mscale(f, m):
    return 1.0 if f <= 1 else 0.1 * m * math.log(f) + 1.0


def _yarn(dims, r, theta, dtype):
    """YaRN's frequencies of r/2 pairs and the rotary factor (transformers' formulas)."""
    f, orig = float(dims["yarn_factor"]), float(dims["yarn_original_seq"])
    fast, slow = float(dims["yarn_beta_fast"]), float(dims["yarn_beta_slow"])
    corr = lambda rot: r * math.log(orig / (rot * 2 * math.pi)) / (2 * math.log(theta))
    low, high = max(math.floor(corr(fast)), 0), min(math.ceil(corr(slow)), r - 1)
    if low == high:
        high += 0.001
    ramp = ((torch.arange(r // 2, dtype=dtype) - low) / (high - low)).clamp(0, 1)
    pos = theta ** (torch.arange(0, r, 2, dtype=dtype) / r)
    inv = (1.0 / (f * pos)) * ramp + (1.0 / pos) * (1 - ramp)
    af = _mscale(f, float(dims["yarn_mscale"])) / _mscale(f, float(dims["yarn_mscale_all_dim"]))
    return inv, af


def _rope_interleaved(t, theta, dims):
    """t: [B, heads, S, r]; pair (2i, 2i + 1) turned as a complex number by t * theta^(-2i/r)
    (YaRN's frequencies and factor when dims say so)."""
    S, r = t.shape[-2], t.shape[-1]
    inv, af = theta ** (-torch.arange(0, r, 2, dtype=t.dtype) / r), 1.0
    if float(dims.get("yarn_factor", 1)) > 1:
        inv, af = _yarn(dims, r, theta, t.dtype)
    ang = torch.outer(torch.arange(S, dtype=t.dtype), inv)  # [S, r/2]
    a, b = t[..., 0::2], t[..., 1::2]
    cos, sin = ang.cos() * af, ang.sin() * af
    out = torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1)
    return out.flatten(-2)


def forward(dims, x, p):
    B, S, hidden = dims["B"], dims["S"], dims["hidden"]
    H, dn, dr, dv = dims["heads"], dims["nope_dim"], dims["rope_dim"], dims["v_dim"]
    kvr, qr = dims["kv_rank"], dims["q_rank"]
    eps, leps = float(dims["norm_eps"]), float(dims["latent_eps"])
    theta = float(dims["rope_theta"])

    h = rmsnorm(x, p["norm"], eps)
    if qr:
        q = rmsnorm(h @ p["wq_a"], p["q_a_norm"], leps) @ p["wq_b"]
    else:
        q = h @ p["wq"]
    q = q.view(B, S, H, dn + dr).transpose(1, 2)
    q_nope, q_pe = q[..., :dn], q[..., dn:]
    ckv = h @ p["wkv_a"]
    c = rmsnorm(ckv[:, :kvr], p["kv_a_norm"], leps)
    k_pe = ckv[:, kvr:].view(B, 1, S, dr)
    kv = (c @ p["wkv_b"]).view(B, S, H, dn + dv).transpose(1, 2)
    k_nope, v = kv[..., :dn], kv[..., dn:]
    q_pe, k_pe = _rope_interleaved(q_pe, theta, dims), _rope_interleaved(k_pe, theta, dims)
    qs = torch.cat([q_nope, q_pe], dim=-1)
    ks = torch.cat([k_nope, k_pe.expand(B, H, S, dr)], dim=-1)

    scale = 1 / math.sqrt(dn + dr)
    if float(dims.get("yarn_factor", 1)) > 1:
        scale *= _mscale(float(dims["yarn_factor"]), float(dims["yarn_mscale_all_dim"])) ** 2
    scores = qs @ ks.transpose(-1, -2) * scale
    causal = torch.ones(S, S, dtype=torch.bool).tril()
    scores = scores.masked_fill(~causal, float("-inf"))
    o = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(B * S, H * dv)
    return x + o @ p["wo"]
