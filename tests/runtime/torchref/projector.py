"""PyTorch reference of the projector layer kind (runtime/kernels/projector.c), written as
transformers' LlavaMultiModalProjector after LLaVA's feature selection: each image's first
(class) token dropped when drop_class (vision_feature_select_strategy "default"), then
linear_1, the activation, linear_2. The vision tower's unused final LayerNorm (vision_norm)
takes no part."""
from common import act


def forward(dims, x, p):
    B, S, h, v = dims["B"], dims["S"], dims["hidden"], dims["in_w"]
    feats = x.reshape(B, dims["in_S"], v)
    if dims["drop_class"]:
        feats = feats[:, 1:]
    y = act(dims["act"], feats @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"]
    return y.reshape(B * S, h)
