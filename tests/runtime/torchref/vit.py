"""PyTorch reference of the vit layer kind (runtime/kernels/vit.c): a pre-norm transformer
encoder layer (LayerNorm, full multi-head self-attention with biases, residual; LayerNorm, MLP
with optional gate, residual). Written as the textbook formulation. An unused layer (LLaVA's
after vision_feature_layer) is the identity, its weights untouched."""
import math

import torch
import torch.nn.functional as F

from common import ACTS as _ACTS
from common import eps


def forward(dims, x, p):
    B, S, hidden = dims["B"], dims["S"], dims["hidden"]
    H, hd = dims["heads"], dims["head_dim"]
    act = _ACTS[dims["act"]]
    if dims.get("unused"):  # held, not computed (LLaVA's layers after vision_feature_layer)
        return x * 1

    h = F.layer_norm(x, (hidden,), p["ln1.w"], p["ln1.b"], eps=eps(dims))

    def heads(t):
        return t.view(B, S, H, hd).transpose(1, 2)

    q = heads(h @ p["wq"] + p["bq"])
    k = heads(h @ p["wk"] + p["bk"])
    v = heads(h @ p["wv"] + p["bv"])
    probs = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(hd), dim=-1)
    o = (probs @ v).transpose(1, 2).reshape(B * S, H * hd)
    x1 = x + o @ p["wo"] + p["bo"]

    h2 = F.layer_norm(x1, (hidden,), p["ln2.w"], p["ln2.b"], eps=eps(dims))
    z = act(h2 @ p["w1"] + p["b1"])
    if dims["gated"]:
        z = z * (h2 @ p["w3"] + p["b3"])
    return x1 + z @ p["w2"] + p["b2"]
