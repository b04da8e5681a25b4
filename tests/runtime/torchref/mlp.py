"""PyTorch reference of the "mlp" layer kind (runtime/k_mlp.c): a pre-norm residual feed-forward
block, y = x + FFN(RMSNorm(x) * norm), FFN(h) = (act(h w1) [* (h w3)]) w2 (gated: SwiGLU for silu,
GeGLU for gelu). Written from the definition, not from the C code."""
import torch
import torch.nn.functional as F

EPS = 1e-5  # RT_NORM_EPS


def _act(code, z):
    """Activation of rt_act code (0 relu, 1 relu2, 2 gelu (erf form), 3 silu, 4 tanh)."""
    if code == 0:
        return F.relu(z)
    if code == 1:
        return F.relu(z) ** 2
    if code == 2:
        return F.gelu(z)
    if code == 3:
        return F.silu(z)
    if code == 4:
        return torch.tanh(z)
    raise ValueError("unknown activation %r" % (code,))


def _rmsnorm(x, gamma):
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + EPS) * gamma


def forward(dims, x, p):
    """y [B*S, hidden] from x [B*S, hidden] and parameters p ("norm", "w1", ["w3",] "w2")."""
    h = _rmsnorm(x, p["norm"])
    z = _act(int(dims["act"]), h @ p["w1"])
    if dims["gated"]:
        z = z * (h @ p["w3"])
    return x + z @ p["w2"]
