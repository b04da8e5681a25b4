"""What the PyTorch references share: RMSNorm and the activations by the name a dump's
index.json gives (the spelling of ir/enums.def's ACT type)."""
import torch
import torch.nn.functional as F

ACTS = {
    "relu": F.relu,
    "relu2": lambda z: F.relu(z) ** 2,
    "gelu": F.gelu,  # the exact erf form
    "silu": F.silu,
    "tanh": torch.tanh,
    "gelu_tanh": lambda z: F.gelu(z, approximate="tanh"),
    "quick_gelu": lambda z: z * torch.sigmoid(1.702 * z),  # CLIP's
}


def act(name, z):
    """Activation 'name' (relu, relu2, gelu, silu, tanh, gelu_tanh, quick_gelu) of z."""
    if name not in ACTS:
        raise ValueError("unknown activation %r" % (name,))
    return ACTS[name](z)


def eps(dims):
    """The layer's norm epsilon (dims "norm_eps"; a dump without it: the default 1e-5)."""
    return float(dims.get("norm_eps", 1e-5))


def rmsnorm(x, w, eps):
    """RMSNorm over the last axis with epsilon eps, times weight w."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def norm_weight(dims, w):
    """The factor of an RMSNorm with weight w: 1 + w with norm_plus_one (Gemma), else w."""
    return 1 + w if dims.get("norm_plus_one") else w


def softcap(z, cap):
    """cap * tanh(z / cap) (Gemma 2's softcapping); z itself when cap is 0."""
    return cap * torch.tanh(z / cap) if cap else z
