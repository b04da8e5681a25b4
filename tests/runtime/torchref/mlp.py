"""PyTorch reference of the "mlp" kind (runtime/kernels/mlp.c): a pre-norm residual feed-forward
block, y = x + FFN(RMSNorm(x) * norm), FFN(h) = (act(h w1) [* (h w3)]) w2 (gated: SwiGLU for silu,
GeGLU for gelu). Written from the definition, not from the C code."""
from common import act, eps, rmsnorm


def forward(dims, x, p):
    """y [B*S, hidden] from x [B*S, hidden] and parameters p ("norm", "w1", ["w3",] "w2")."""
    h = rmsnorm(x, p["norm"], eps(dims))
    z = act(dims["act"], h @ p["w1"])
    if dims["gated"]:
        z = z * (h @ p["w3"])
    return x + z @ p["w2"]
