"""PyTorch reference of the "mamba2" layer kind (runtime/kernels/mamba2.c): a pre-norm Mamba-2 mixer
block with residual (mamba_ssm's Mamba2 with ngroups, norm_before_gate=False, no projection
biases). Written from the definition, not from the C code; the scan is the plain sequential
recurrence, token by token, so that it checks the kernel's chunked SSD form independently."""

import torch
import torch.nn.functional as F

from common import eps, rmsnorm


def forward(dims, x, p):
    """y [B*S, hidden] of the layer for input x [B*S, hidden] (row b*S + t: token t of sequence
    b) and parameters p (name -> tensor in the kernel's shapes, weights [in, out])."""
    B, S, hid = dims["B"], dims["S"], dims["hidden"]
    H, P, N, G, K = dims["heads"], dims["head_dim"], dims["state"], dims["groups"], dims["conv"]
    inner = H * P
    GN = G * N
    CD = inner + 2 * GN
    assert H % G == 0, "groups must divide heads"

    h = rmsnorm(x, p["norm"], eps(dims))
    zxbcdt = h @ p["in_proj"]
    z, xBC, dt = torch.split(zxbcdt, [inner, CD, H], dim=-1)

    # causal depthwise convolution in time within each sequence:
    # out[t] = b + sum_k w[k] in[t-(K-1)+k], zero before the sequence's start
    xBC = xBC.reshape(B, S, CD).transpose(1, 2)  # [B, CD, S]
    xBC = F.conv1d(F.pad(xBC, (K - 1, 0)), p["conv.w"].unsqueeze(1), p["conv.b"], groups=CD)
    xBC = F.silu(xBC).transpose(1, 2)  # [B, S, CD]
    xs = xBC[..., :inner].reshape(B, S, H, P)
    Bm = xBC[..., inner:inner + GN].reshape(B, S, G, N).repeat_interleave(H // G, dim=2)
    Cm = xBC[..., inner + GN:].reshape(B, S, G, N).repeat_interleave(H // G, dim=2)

    dt = F.softplus(dt.reshape(B, S, H) + p["dt_bias"])  # [B, S, H]
    A = -torch.exp(p["A_log"])  # [H]

    s = torch.zeros(B, H, P, N, dtype=x.dtype)
    ys = []
    for t in range(S):
        decay = torch.exp(dt[:, t] * A)[..., None, None]  # [B, H, 1, 1]
        upd = dt[:, t, :, None, None] * xs[:, t, :, :, None] * Bm[:, t, :, None, :]
        s = s * decay + upd
        ys.append((s * Cm[:, t, :, None, :]).sum(-1) + p["D"][:, None] * xs[:, t])
    y = torch.stack(ys, dim=1).reshape(B * S, inner)

    yg = (y * F.silu(z)).reshape(B * S, G, inner // G)
    yg = rmsnorm(yg, p["gate_norm"].reshape(G, inner // G), eps(dims)).reshape(B * S, inner)
    return x + yg @ p["out_proj"]
