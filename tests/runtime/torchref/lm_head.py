"""PyTorch reference of the "lm_head" kind (runtime/kernels/lm_head.c): final RMSNorm, then the
projection to the vocabulary (logits; the loss is the model's); a tied head's w is the
embedding's table, [vocab, hidden] (dims "tied")."""
from common import eps, rmsnorm


def forward(dims, x, p):
    """logits [B*S, vocab] from x [B*S, hidden], p["norm"] [hidden], p["w"] [hidden, vocab]
    ([vocab, hidden] when tied)."""
    h = rmsnorm(x, p["norm"], eps(dims))
    return h @ p["w"].T if dims.get("tied") else h @ p["w"]
