"""PyTorch reference of the "lm_head" layer kind (runtime/k_basic.c): final RMSNorm, then the
projection to the vocabulary (logits; the loss is the model's)."""
import torch

EPS = 1e-5  # RT_NORM_EPS


def forward(dims, x, p):
    """logits [B*S, vocab] from x [B*S, hidden], p["norm"] [hidden], p["w"] [hidden, vocab]."""
    h = x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + EPS) * p["norm"]
    return h @ p["w"]
