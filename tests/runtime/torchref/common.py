"""What the PyTorch references share: the norms' epsilon, RMSNorm and the activations by their
rt_act code (the order of ir/enums.def's ACT type)."""
import torch
import torch.nn.functional as F

EPS = 1e-5  # RT_NORM_EPS

ACTS = {
    0: F.relu,
    1: lambda z: F.relu(z) ** 2,
    2: F.gelu,  # the exact erf form
    3: F.silu,
    4: torch.tanh,
}


def act(code, z):
    """Activation of rt_act code (0 relu, 1 relu2, 2 gelu, 3 silu, 4 tanh)."""
    if int(code) not in ACTS:
        raise ValueError("unknown activation %r" % (code,))
    return ACTS[int(code)](z)


def rmsnorm(x, w):
    """RMSNorm over the last axis times weight w."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * w
