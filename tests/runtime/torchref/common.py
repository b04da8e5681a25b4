"""What the PyTorch references share: the norms' epsilon, RMSNorm and the activations by the
name a dump's index.json gives (the spelling of ir/enums.def's ACT type)."""
import torch
import torch.nn.functional as F

EPS = 1e-5  # RT_NORM_EPS

ACTS = {
    "relu": F.relu,
    "relu2": lambda z: F.relu(z) ** 2,
    "gelu": F.gelu,  # the exact erf form
    "silu": F.silu,
    "tanh": torch.tanh,
}


def act(name, z):
    """Activation 'name' (relu, relu2, gelu, silu, tanh) of z."""
    if name not in ACTS:
        raise ValueError("unknown activation %r" % (name,))
    return ACTS[name](z)


def rmsnorm(x, w):
    """RMSNorm over the last axis times weight w."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * w
