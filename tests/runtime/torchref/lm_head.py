"""PyTorch reference of the "lm_head" kind (runtime/kernels/lm_head.c): final RMSNorm, then the
projection to the vocabulary (logits; the loss is the model's); a tied head's w is the
embedding's table, [vocab, hidden] (dims "tied"); Gemma's (1 + w) norm (norm_plus_one) and
logit softcapping (softcap)."""
from common import eps, norm_weight, rmsnorm, softcap


def forward(dims, x, p):
    """logits [B*S, vocab] from x [B*S, hidden], p["norm"] [hidden], p["w"] [hidden, vocab]
    ([vocab, hidden] when tied)."""
    h = rmsnorm(x, norm_weight(dims, p["norm"]), eps(dims))
    return softcap(h @ p["w"].T if dims.get("tied") else h @ p["w"], float(dims.get("softcap", 0)))
