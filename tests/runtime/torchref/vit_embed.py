"""PyTorch reference of the vit_embed layer kind (runtime/kernels/vit_embed.c), written as
transformers' CLIPVisionEmbeddings and CLIP's pre_layrnorm: a patch convolution without bias
(kernel = stride = patch) over the pixels, the class token in front, learned positions added,
then a LayerNorm. At a scale the layer takes the first S - 1 patches of its image (all of them
as written)."""
import torch
import torch.nn.functional as F

from common import eps


def forward(dims, x, p):
    B, S, h = dims["B"], dims["S"], dims["hidden"]
    C, P, H = dims["channels"], dims["patch"], dims["image"]
    pixels = x.reshape(B, C, H, H)
    weight = p["patch.w"].reshape(-1, h).t().reshape(h, C, P, P)  # torch.nn.Conv2d's [out, in, kh, kw]
    patches = F.conv2d(pixels, weight, stride=P).flatten(2).transpose(1, 2)[:, :S - 1]
    tokens = torch.cat([p["class"].expand(B, 1, h), patches], dim=1) + p["pos"]
    y = F.layer_norm(tokens, (h,), p["ln.w"], p["ln.b"], eps=eps(dims))
    return y.reshape(B * S, h)
