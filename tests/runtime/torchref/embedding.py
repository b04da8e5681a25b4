"""PyTorch reference of the "embedding" kind (runtime/kernels/embedding.c): a table lookup of the
token ids (an id outside [0, vocab) reads row 0), times sqrt(hidden) when scaled (Gemma)."""
import math

import torch


def forward(dims, x, p):
    """y [B*S, hidden] from token ids x [B*S, 1] and the table p["table"] [vocab, hidden]."""
    ids = x[:, 0].long()
    ids = torch.where((ids >= 0) & (ids < dims["vocab"]), ids, torch.zeros_like(ids))
    y = p["table"][ids]
    return y * torch.tensor(math.sqrt(dims["hidden"]), dtype=y.dtype) if dims.get("scaled") else y
