"""PyTorch reference of the "moe" layer kind (runtime/kernels/moe.c): a pre-norm residual
mixture-of-experts block. h = RMSNorm(x) * norm; logits = h router; each token takes the top_k
experts of largest logit (ties: lower expert index first), weighted by the softmax over the
selected logits (Mixtral style), or with renorm false by the softmax over all logits at the
selected ones; with sigmoid (DeepSeek-V3) the experts are chosen by sigmoid(logit) + router.bias
and weighted by their sigmoid, divided by the selected ones' sum unless renorm is false; with
expert_groups > 1 only in the topk_groups best groups (DeepSeek's group-limited routing, a
group ranked by its largest score, or with sigmoid by the sum of its two largest); the weights
times routed_scale (the selection is not differentiated, the weights are);
y = x + sum_k weight_k FFN_{e_k}(h) + sum_s FFN_s(h), FFN(h) = (act(h W1) [* (h W3)]) W2; with
shared_gate the shared sum is scaled by sigmoid(h gate) per token.
Dropless, no capacity limit, no auxiliary loss. Written from the definition, not from the C
code: a masked loop over experts instead of a grouping permutation."""
import torch

from common import act, eps, rmsnorm


def _ffn(dims, h, w1, w3, w2):
    z = act(dims["act"], h @ w1)
    if dims["gated"]:
        z = z * (h @ w3)
    return z @ w2


def forward(dims, x, p):
    """y [B*S, hidden] from x [B*S, hidden] and parameters p ("norm", "router", "experts.w1",
    ["experts.w3",] "experts.w2", and with shared experts "shared.w1", ["shared.w3",] "shared.w2")."""
    E, K, gated = int(dims["experts"]), int(dims["top_k"]), bool(dims["gated"])
    h = rmsnorm(x, p["norm"], eps(dims))
    logits = h @ p["router"]
    sigmoid = bool(dims.get("sigmoid"))
    scores = torch.sigmoid(logits) if sigmoid else None
    choice = scores.detach() if sigmoid else logits.detach()
    if dims.get("score_bias"):  # DeepSeek-V3's e_score_correction_bias: the choice only
        choice = choice + p["router.bias"]
    G, TG = int(dims.get("expert_groups", 1)), int(dims.get("topk_groups", 1))
    # torch.topk does not promise an order among equal values; a stable descending sort does
    # (lower index first), and its first K columns are the top K in descending order.
    top = lambda t, k: torch.sort(t, dim=-1, descending=True, stable=True).indices[:, :k]
    if G > 1:
        grouped = choice.view(-1, G, E // G)
        if sigmoid:
            group_score = grouped.sort(dim=-1, descending=True).values[..., :2].sum(dim=-1)
        else:
            group_score = grouped.max(dim=-1).values
        kept = torch.zeros_like(group_score, dtype=torch.bool)
        kept.scatter_(1, top(group_score, TG), True)
        choice = choice.masked_fill(~kept.repeat_interleave(E // G, dim=1), float("-inf"))
    sel = top(choice, K)
    if sigmoid:
        weights = scores.gather(1, sel)
        if dims.get("renorm", 1):
            weights = weights / weights.sum(dim=-1, keepdim=True)
    elif dims.get("renorm", 1):
        weights = torch.softmax(logits.gather(1, sel), dim=-1)  # [N, K]
    else:
        weights = torch.softmax(logits, dim=-1).gather(1, sel)
    weights = weights * float(dims.get("routed_scale", 1))

    routed = torch.zeros_like(x)
    for e in range(E):
        mask = sel == e  # [N, K]; at most one slot per token
        idx = mask.any(dim=-1).nonzero().squeeze(1)
        if idx.numel() == 0:
            continue
        we = (weights * mask).sum(dim=-1)[idx]
        w3 = p["experts.w3"][e] if gated else None
        out = _ffn(dims, h[idx], p["experts.w1"][e], w3, p["experts.w2"][e])
        routed = routed.index_add(0, idx, we[:, None] * out)

    shared = torch.zeros_like(x)
    for s in range(int(dims.get("shared", 0) or 0)):
        w3 = p["shared.w3"][s] if gated else None
        shared = shared + _ffn(dims, h, p["shared.w1"][s], w3, p["shared.w2"][s])
    if dims.get("shared_gate"):  # Qwen2-MoE's shared_expert_gate
        shared = torch.sigmoid(h @ p["shared.gate"])[:, None] * shared
    return x + routed + shared
