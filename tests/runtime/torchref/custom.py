"""PyTorch reference of the "custom" layer kind (runtime/kernels/custom.c): the dense stand-in
y = tanh(x w + b), plus x when the input and output widths agree."""
import torch


def forward(dims, x, p):
    """y [B*S, out_w] from x [B*S, in_w], p["w"] [in_w, out_w], p["b"] [out_w]."""
    y = torch.tanh(x @ p["w"] + p["b"])
    return y + x if x.shape[1] == y.shape[1] else y
