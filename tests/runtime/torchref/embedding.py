"""PyTorch reference of the "embedding" kind (runtime/kernels/embedding.c): a table lookup of the
token ids (an id outside [0, vocab) reads row 0), times sqrt(hidden) when scaled (Gemma); the
padding token's row (pad_id, -1: none) gets no gradient, as torch's padding_idx."""
import math

import torch
import torch.nn.functional as F


def forward(dims, x, p):
    """y [B*S, hidden] from token ids x [B*S, 1] and the table p["table"] [vocab, hidden]."""
    ids = x[:, 0].long()
    ids = torch.where((ids >= 0) & (ids < dims["vocab"]), ids, torch.zeros_like(ids))
    pad = int(dims.get("pad_id", -1))
    y = F.embedding(ids, p["table"], padding_idx=pad if pad >= 0 else None)
    return y * torch.tensor(math.sqrt(dims["hidden"]), dtype=y.dtype) if dims.get("scaled") else y
