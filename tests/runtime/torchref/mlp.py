"""PyTorch reference of the "mlp" kind (runtime/kernels/mlp.c): a pre-norm residual feed-forward
block, y = x + FFN(RMSNorm(x) * norm), FFN(h) = (act(h w1) [* (h w3)]) w2 (gated: SwiGLU for silu,
GeGLU for gelu); Gemma's variants: (1 + w) norms (norm_plus_one) and the sandwich norm, y = x +
RMSNorm(FFN(RMSNorm(x) * pre_norm)) * post_norm (post_norm). Written from the definition, not
from the C code."""
from common import act, eps, norm_weight, rmsnorm


def forward(dims, x, p):
    """y [B*S, hidden] from x [B*S, hidden] and parameters p ("norm" or, with post_norm,
    "pre_norm" and "post_norm", "w1", ["w3",] "w2")."""
    post = bool(dims.get("post_norm"))
    h = rmsnorm(x, norm_weight(dims, p["pre_norm" if post else "norm"]), eps(dims))
    z = act(dims["act"], h @ p["w1"])
    if dims["gated"]:
        z = z * (h @ p["w3"])
    out = z @ p["w2"]
    if post:
        out = rmsnorm(out, norm_weight(dims, p["post_norm"]), eps(dims))
    return x + out
