#!/usr/bin/env python3
"""hf_parity.py -- parity with Hugging Face transformers as the oracle (issue 27): for a tiny
config of each family octo-import supports (hidden 64, 4 heads, 2 KV heads of 16, ffn 128, 2
decoder layers, seq 32, float32), the transformers model with random weights (every parameter
drawn from a seed of its own: matrices N(0, 0.15), norms 1 + N(0, 0.1), biases N(0, 0.1)) is
saved with save_pretrained; octo-import imports its config.json, octoc compiles it twice (the
default plan and a 2-stage 1F1B plan) and octo-run --init=DIR runs one step of one microbatch of
2 sequences with --dump. The loss octo-run prints is compared with the mean cross-entropy of
transformers' logits (the targets are octo-run's: data[p % len] % vocab, sequence g's inputs at
positions g*S .. g*S+S-1, its targets one further), and every dumped gradient with the .grad of
its transformers parameter (runtime/ckpt_names.def: the names and layouts, transposed per
layout, experts split); every transformers parameter is compared exactly once (the tied case's
shared matrix from the table and the LM head's copy together, their dumped gradients summed).

    bench/hf_parity.py BUILD_DIR [--keep=DIR] [--case=FAMILY ...]

Prints a header, then per case "FAMILY loss_hf loss_octo rel_loss max_grad_rel worst_tensor
ok|FAIL" (the worse of the two plans; rel_loss = |octo - hf| / |hf|, max_grad_rel the largest
max|octo - hf| / max|hf| of any gradient, worst_tensor its transformers name), or "FAMILY
skipped: WHY" for a case this transformers cannot build (e.g. 4.40's LlamaConfig refuses Llama
3.1's rope_scaling; 4.40 has no qwen3), or "FAMILY refused: MESSAGE" when octo-import refuses
the config. ok needs rel_loss <= 1e-5, max_grad_rel <= 1e-4, the dumped weights equal to the
saved ones and the dumped targets equal to the oracle's. Exit status 1 when a case FAILs or is
refused (skips are not failures). Everything is made in a temporary folder, removed at the end
unless --keep=DIR (then everything is kept in DIR, one folder per case).

Mistral's window: OctoPipe's window w attends to the w keys t - w < j <= t, as the masking_utils
of later transformers do; transformers 4.40's mask (modeling_attn_mask_utils) attends to w + 1,
t - w <= j <= t (transformers issue 29623). Where the probe (the nonzero attention probabilities
of the last query) finds more than w keys, the oracle runs with the window that attends to w,
and a "note:" line after the row gives the figures against the config's window as is.
qwen3_moe: its experts have Qwen-MoE's names (mlp.experts.E.gate_proj), which --init finds in
the file (docs/checkpoints.md). nemotron_h: a hybrid of Mamba-2, attention without positional
embedding and squared-ReLU MLP layers (pattern "M*-M-"), each layer its own block with
Nemotron-H's names ("backbone.layers.B.mixer"). transformers 5 keeps some parameters fused or
renamed in memory (the experts of a moe layer as one tensor, Nemotron-H's "backbone." as
"model."), and saves them as before: every parameter and gradient is compared under its name in
the saved file (transformers' own revert_weight_conversion). It writes configs in its own form
(rope_parameters, layer_types; Nemotron-H's layers_block_type), which octo-import reads too.
llava: LlavaForConditionalGeneration with a CLIP vision tower (hidden 32, 4 heads, ffn 64, 3
encoder layers of which LLaVA runs 2: vision_feature_layer -2; 8 x 8 pixels in 4 x 4 patches) and
the Llama text model above; its image tokens are the first 4 positions of each sequence (their
input_ids image_token_index, their targets none: LLaVA's labels -100), where octo-run puts the
projected features (docs/language.md, "projector"); the pixels are octo-run's own, read back
from its dump (the first layer's x.npy: rt_load's uniform [-1, 1) pixels, N C H W). Its
vision tower's last encoder layer and post_layernorm, which LLaVA holds but does not run, get
no gradient on either side (transformers' .grad is None: compared as zeros). A gradient that is
zero in exact arithmetic and that octo-run gives as exactly 0 (a vit's key bias: softmax ignores
a constant per query) matches when transformers' is rounding noise, below 1e-6 of the model's
largest gradient (NOISE).

Needs transformers and torch in the Python that runs it (e.g. a venv with
--system-site-packages over Debian's python3-torch); where they are missing it says so and
exits 0 (tests/import/hf-parity.test needs the lit feature "transformers")."""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAMES_DEF = os.path.join(SRC, "runtime", "ckpt_names.def")

LOSS_RTOL = 1e-5
GRAD_RTOL = 1e-4
NOISE = 1e-6  # transformers' rounding noise of a gradient zero in exact arithmetic, relative
B, S = 2, 32

TRAIN = """device cpu { peak = 100 TFLOPS  mem = 80 GiB  hbm = 2 TB/s  efficiency = 0.5 }
cluster box { nodes = 1, gpus_per_node = 2, gpu = cpu  intra = link { bw = 100 GB/s, lat = 5 us } }
train { cluster = box  pipeline = 2, tensor = 1, data = 1  micro_batch = %d  global_batch = %d
        dtype = fp32  optimizer = sgd }
""" % (B, B)

PLANS = [("default", []),
         ("1f1b", ["--passes=cost,partition{method=balanced},place,schedule{method=1f1b}"])]

TINY = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            intermediate_size=128, num_hidden_layers=2, max_position_embeddings=S,
            rms_norm_eps=1e-5, tie_word_embeddings=False, torch_dtype="float32")

# (case, model_type, config fields over TINY (DROP: not given), seed, data bytes): the data of 50
# bytes is shorter than the 65 positions a step reads, so the stream wraps inside the second
# sequence; a vocabulary of 200 (not 256) makes the byte % vocab matter.
DROP = object()
CASES = [
    ("llama", "llama", dict(vocab_size=256, rope_theta=10000.0), 101, 1000),
    ("llama3.1", "llama", dict(vocab_size=200, rope_theta=500000.0, rope_scaling={
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8}), 102, 1000),
    ("mistral", "mistral", dict(vocab_size=200, rope_theta=10000.0, sliding_window=8), 103, 50),
    ("qwen2", "qwen2", dict(vocab_size=200, rope_theta=10000.0, use_sliding_window=False),
     104, 1000),
    ("mixtral", "mixtral", dict(vocab_size=200, rope_theta=10000.0, sliding_window=None,
                                num_local_experts=4, num_experts_per_tok=2), 105, 1000),
    ("qwen3", "qwen3", dict(vocab_size=200, rope_theta=10000.0), 106, 1000),
    ("qwen3_moe", "qwen3_moe", dict(vocab_size=200, rope_theta=10000.0, num_experts=4,
                                    num_experts_per_tok=2, moe_intermediate_size=64,
                                    norm_topk_prob=True, decoder_sparse_step=1,
                                    mlp_only_layers=[]), 107, 1000),
    ("qwen2_moe", "qwen2_moe", dict(vocab_size=200, rope_theta=10000.0, num_experts=4,
                                    num_experts_per_tok=2, moe_intermediate_size=64,
                                    shared_expert_intermediate_size=128, norm_topk_prob=False,
                                    decoder_sparse_step=1, mlp_only_layers=[],
                                    use_sliding_window=False), 109, 1000),
    ("llama-tied", "llama", dict(vocab_size=200, rope_theta=500000.0, tie_word_embeddings=True),
     108, 1000),
    ("deepseek_v2", "deepseek_v2", dict(vocab_size=200, num_key_value_heads=4, head_dim=DROP,
                                        rope_theta=10000.0,
                                        q_lora_rank=None, kv_lora_rank=32, qk_nope_head_dim=16,
                                        qk_rope_head_dim=8, v_head_dim=16, n_routed_experts=6,
                                        num_experts_per_tok=2, moe_intermediate_size=32,
                                        n_shared_experts=2, first_k_dense_replace=1,
                                        topk_method="group_limited_greedy", n_group=3, topk_group=2,
                                        routed_scaling_factor=1.5, rope_scaling=None), 111, 1000),
    ("deepseek_v3", "deepseek_v3", dict(vocab_size=200, num_key_value_heads=4, head_dim=DROP,
                                        rope_theta=10000.0,
                                        q_lora_rank=24, kv_lora_rank=32, qk_nope_head_dim=16,
                                        qk_rope_head_dim=8, v_head_dim=16, n_routed_experts=8,
                                        num_experts_per_tok=3, moe_intermediate_size=32,
                                        n_shared_experts=1, first_k_dense_replace=1, n_group=4,
                                        topk_group=2, norm_topk_prob=True,
                                        routed_scaling_factor=2.5, rope_scaling={
                                            "rope_type": "yarn", "factor": 4.0,
                                            "original_max_position_embeddings": 8,
                                            "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 0.9,
                                            "mscale_all_dim": 0.6}), 112, 1000),
    ("nemotron_h", "nemotron_h", dict(vocab_size=200, rms_norm_eps=DROP, layer_norm_epsilon=1e-5,
                                      num_hidden_layers=5, hybrid_override_pattern="M*-M-",
                                      mlp_hidden_act="relu2", mamba_num_heads=8,
                                      mamba_head_dim=16, ssm_state_size=16, n_groups=2,
                                      conv_kernel=4, expand=2, chunk_size=8), 110, 1000),
    # Gemma 2: caps small enough to bend the scores and logits, a score scale other than
    # head_dim's, local layers with a window shorter than the sequence, tied embeddings, the
    # class default pad_token_id 0 (the embedding's padding_idx, whose row the lookup gives no
    # gradient: pad_id = 0; token 0 is in the data)
    ("gemma2", "gemma2", dict(vocab_size=200, rope_theta=10000.0, sliding_window=8,
                              query_pre_attn_scalar=24, attn_logit_softcapping=2.0,
                              final_logit_softcapping=3.0, tie_word_embeddings=True), 110, 1000),
    # Gemma 3: (1 + w) QK-norm, no softcapping, a local layer (base rope_local_base_freq,
    # window 8) and a global one (rope_theta)
    ("gemma3", "gemma3_text", dict(vocab_size=200, rope_theta=1000000.0,
                                   rope_local_base_freq=10000.0, sliding_window=8,
                                   query_pre_attn_scalar=24, tie_word_embeddings=True,
                                   layer_types=["sliding_attention", "full_attention"]),
     111, 1000),
    # Gemma 3 4B and larger: the global layers' rotary embedding scaled linearly (by 4 here), the
    # local ones' not
    ("gemma3-linear", "gemma3_text", dict(vocab_size=200, rope_theta=1000000.0,
                                          rope_local_base_freq=10000.0, sliding_window=8,
                                          query_pre_attn_scalar=24, tie_word_embeddings=True,
                                          rope_scaling={"rope_type": "linear", "factor": 4.0},
                                          layer_types=["sliding_attention", "full_attention"]),
     114, 1000),
    # LLaVA: a CLIP tower (quick_gelu, its last layer unused) and the projector (class token
    # dropped) in front of the Llama text model, the 4 image tokens first in each sequence
    ("llava", "llava", dict(vocab_size=200, rope_theta=10000.0), 113, 1000),
]

# LLaVA's vision tower (CLIPVisionConfig) and where its image tokens are.
LLAVA_VISION = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                    num_attention_heads=4, image_size=8, patch_size=4, projection_dim=16,
                    hidden_act="quick_gelu", layer_norm_eps=1e-5)
LLAVA_IMAGE_TOKEN = 199

# The ckpt_names.def naming of a model_type's rows (default MIXTRAL).
NAMING = {"qwen3_moe": "QWEN_MOE", "qwen2_moe": "QWEN_MOE", "nemotron_h": "NEMOTRON_H",
          "deepseek_v2": "DEEPSEEK", "deepseek_v3": "DEEPSEEK", "llava": "LLAVA"}
# Buffers a family's files hold and its router reads (DeepSeek-V3's choice bias): drawn at random
# too, compared by value, their gradient 0 (no gradient trains them).
BUFFERS = ("e_score_correction_bias",)


class Skip(Exception):
    """A case this transformers cannot build."""


def read_names(experts="MIXTRAL"):
    """{(kind, param): (format, layout)} of runtime/ckpt_names.def (kind in lower case, as the
    dump's index.json writes it) in the naming 'experts': a Llama-style model's with the moe
    layers' names of MIXTRAL or QWEN_MOE, or NEMOTRON_H's."""
    with open(NAMES_DEF) as f:
        text = f.read()
    rows = re.findall(r'^CKPT_HF\((\w+),\s*"([^"]+)",\s*"([^"]+)",\s*(\w+),\s*(\w+)\)', text,
                      re.M)
    if not rows:
        sys.exit("hf_parity: no CKPT_HF rows in " + NAMES_DEF)
    mine = (experts,) if experts in ("NEMOTRON_H", "LLAVA") else ("ANY", experts)
    return {(k.lower(), p): (fmt, lay) for k, p, fmt, lay, st in rows if st in mine}


def run(cmd, what):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("%s failed (exit %d): %s" % (what, r.returncode,
                                                        (r.stderr or r.stdout).strip()))
    return r.stdout


def build_model(model_type, fields, seed):
    """The transformers model of model_type with fields, every parameter drawn from seed."""
    import torch
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES
    if model_type not in CONFIG_MAPPING_NAMES:
        raise Skip("transformers %s has no %s" % (transformers.__version__, model_type))
    cls = transformers.CONFIG_MAPPING[model_type]
    if model_type == "llava":  # the Llama text model of the other cases inside LLaVA
        text = transformers.CONFIG_MAPPING["llama"](
            **{k: v for k, v in dict(TINY, **fields).items() if v is not DROP})
        vision = transformers.CONFIG_MAPPING["clip_vision_model"](**LLAVA_VISION)
        cfg = cls(vision_config=vision, text_config=text, image_token_index=LLAVA_IMAGE_TOKEN,
                  vision_feature_layer=-2, vision_feature_select_strategy="default",
                  projector_hidden_act="gelu", tie_word_embeddings=False)
        torch.manual_seed(seed)
        model = transformers.LlavaForConditionalGeneration(cfg)
        model.config._attn_implementation = "eager"
        return randomize(model, seed)
    try:
        cfg = cls(**{k: v for k, v in dict(TINY, **fields).items() if v is not DROP})
    except ValueError as e:
        raise Skip("transformers %s's %s refuses rope_scaling %s: %s"
                   % (transformers.__version__, cls.__name__,
                      json.dumps(fields.get("rope_scaling"), sort_keys=True),
                      str(e).splitlines()[0]))
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager",
                                                          torch_dtype=torch.float32)
    return randomize(model, seed)


def randomize(model, seed):  # noqa: ARG001 (the caller seeded torch with it)
    """model with every parameter drawn from seed: norms' weights 1 + N(0, 0.1) (CLIP's
    LayerNorms too), biases N(0, 0.1), the rest N(0, 0.15); the buffers of BUFFERS N(0, 0.1)."""
    import torch
    with torch.no_grad():
        for name, p in model.named_parameters():
            if re.search(r"(norm\d?|layrnorm)\.weight$", name):
                p.copy_(1 + 0.1 * torch.randn_like(p))
            elif name.endswith(".bias"):
                p.copy_(0.1 * torch.randn_like(p))
            else:
                p.copy_(0.15 * torch.randn_like(p))
        for name, b in model.named_buffers():
            if name.endswith(BUFFERS):
                b.copy_(0.1 * torch.randn_like(b))
    return model.float()


def stream(data, vocab, image=0):
    """octo-run's step 0 of one microbatch of B sequences: inputs and targets, [B, S] each; with
    'image' image tokens, the first 'image' positions of each sequence hold LLAVA_IMAGE_TOKEN and
    have no target (-1)."""
    tok = [data[p % len(data)] % vocab for p in range(B * S + 1)]
    inputs = [tok[g * S:g * S + S] for g in range(B)]
    targets = [tok[g * S + 1:g * S + S + 1] for g in range(B)]
    for g in range(B):
        inputs[g][:image] = [LLAVA_IMAGE_TOKEN] * image
        targets[g][:image] = [-1] * image
    return inputs, targets


def hf_step(model, inputs, targets, pixels=None):
    """Transformers' loss (the mean cross-entropy over the B x S tokens with a target) and its
    parameters, {name: (value, gradient)} as NumPy arrays, by their names in the saved file; a
    parameter that gets no gradient (LLaVA's unused vision layers) has zeros. pixels: LLaVA's
    pixel_values."""
    import torch
    model.zero_grad()
    if pixels is None:
        logits = model(torch.tensor(inputs)).logits
    else:
        logits = model(input_ids=torch.tensor(inputs),
                       pixel_values=torch.tensor(pixels, dtype=torch.float32)).logits
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(),
                                             torch.tensor(targets).reshape(-1), ignore_index=-1)
    loss.backward()
    values = {n: p.detach().clone() for n, p in model.named_parameters()}
    grads = {n: (p.grad if p.grad is not None else torch.zeros_like(p)).detach().clone()
             for n, p in model.named_parameters()}
    for n, b in model.named_buffers():
        if n.endswith(BUFFERS):
            values[n], grads[n] = b.detach().clone(), torch.zeros_like(b)
    try:  # transformers 5 keeps some tensors fused or renamed in memory; its files do not
        from transformers.core_model_loading import revert_weight_conversion
        values, grads = (revert_weight_conversion(model, values),
                         revert_weight_conversion(model, grads))
    except ImportError:
        pass
    return float(loss.detach()), {n: (values[n].numpy().copy(), grads[n].numpy().copy())
                                  for n in values}


def hf_window_keys(model, inputs):
    """The keys the last query of layer 0 attends to in transformers' attention (its nonzero
    probabilities; eager attention gives masked keys exactly 0)."""
    import torch
    with torch.no_grad():
        att = model(torch.tensor(inputs[:1]), output_attentions=True).attentions[0]
    return int((att[0, 0, -1] > 0).sum())


def rel(a, b, floor=0.0):
    """max|a - b| / max(max|b|, floor) (0 when both are 0)."""
    import numpy as np
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        return float("inf")
    d = float(np.max(np.abs(a - b))) if a.size else 0.0
    m = max(float(np.max(np.abs(b))) if b.size else 0.0, floor)
    return d / m if m > 0 else (0.0 if d == 0 else float("inf"))


def compare_dump(dump, names, params, targets, tied=False, layer_blocks=False):
    """(max gradient difference, its HF name, problems) of dump against HF's parameters; a block
    starts at each attention layer, or with layer_blocks at every layer (Nemotron-H). With
    tied embeddings the LM head's matrix is model.embed_tokens.weight as is: its dumped
    gradient (the head's part, before TIE adds the two) and the table's are summed, as the
    shared parameter's .grad is, and that parameter is compared once, from both."""
    import numpy as np
    if tied:
        names = dict(names)
        names[("lm_head", "w")] = ("model.embed_tokens.weight", "AS_IS")
    with open(os.path.join(dump, "index.json")) as f:
        index = json.load(f)
    problems = []
    got = np.load(os.path.join(dump, index["targets"])).reshape(-1)
    if got.tolist() != [t for row in targets for t in row]:
        problems.append("targets.npy differs from the oracle's targets")
    seen, grads = {}, {}
    worst, worst_name = 0.0, "-"
    block, vblock = -1, -1
    for layer in index["layers"]:
        kind = layer["kind"]
        if kind in ("attention", "mla") or (layer_blocks and kind != "embedding"):
            block += 1
        if kind == "vit":  # LLaVA's vision encoder layers are numbered on their own
            vblock += 1
        for prm in layer["params"]:
            key = (kind, prm["name"])
            if key not in names:
                problems.append("%s %s has no row in ckpt_names.def" % (layer["name"], key))
                continue
            fmt, layout = names[key]
            w = np.load(os.path.join(dump, layer["prefix"] + "w." + prm["name"] + ".npy"))
            g = np.load(os.path.join(dump, layer["prefix"] + "g." + prm["name"] + ".npy"))
            if layout == "EXPERT_T":
                pairs = [(fmt % (block, e), w[e].T, g[e].T) for e in range(w.shape[0])]
            elif layout == "CAT_IN_T":  # [S, in, f] -> [S * f, in]
                cat = lambda a: a.transpose(0, 2, 1).reshape(-1, a.shape[1])
                pairs = [(fmt % block, cat(w), cat(g))]
            elif layout == "CAT_OUT_T":  # [S, f, out] -> [out, S * f]
                cat = lambda a: a.reshape(-1, a.shape[2]).T
                pairs = [(fmt % block, cat(w), cat(g))]
            elif layout == "ROW":
                pairs = [(fmt % block, w.reshape(1, -1), g.reshape(1, -1))]
            elif layout == "CONV1D":  # [channels, width] -> [channels, 1, width]
                conv = lambda a: a.reshape(a.shape[0], 1, a.shape[1])
                pairs = [(fmt % block, conv(w), conv(g))]
            elif layout == "CONV2D":  # [C, p^2, out] -> [out, C, p, p]
                side = int(round(w.shape[1] ** 0.5))
                conv = lambda a: a.reshape(-1, a.shape[2]).T.reshape(a.shape[2], a.shape[0], side,
                                                                     side)
                pairs = [(fmt, conv(w), conv(g))]
            else:
                hf = (fmt % (vblock if kind == "vit" else block)) if "%d" in fmt else fmt
                pairs = [(hf, w.T, g.T) if layout == "T" else (hf, w, g)]
            for hf, wo, go in pairs:
                seen[hf] = seen.get(hf, 0) + 1
                if hf not in params:
                    problems.append("%s: no such transformers parameter" % hf)
                    continue
                value, _ = params[hf]
                if rel(wo, value) != 0:
                    problems.append("%s: dumped weight differs from the saved one (rel %.3g)"
                                    % (hf, rel(wo, value)))
                grads[hf] = grads[hf] + go if hf in grads else go.astype(np.float64)
    # a gradient octo-run gives as exactly 0 (a vit's key bias, zero in exact arithmetic: softmax
    # ignores a constant per query) matches when transformers' is rounding noise: below NOISE
    # of the model's largest gradient
    gmax = max([0.0] + [float(np.max(np.abs(params[hf][1]))) for hf in grads if params[hf][1].size])
    for hf, go in grads.items():
        r = rel(go, params[hf][1])
        if r > 0 and not np.any(go) and float(np.max(np.abs(params[hf][1]))) <= NOISE * gmax:
            r = 0.0
        if r > worst or r != r:
            worst, worst_name = r, hf
    for hf in params:
        want = 2 if tied and hf == "model.embed_tokens.weight" else 1
        if seen.get(hf, 0) != want:
            problems.append("%s compared %d times" % (hf, seen.get(hf, 0)))
    return worst, worst_name, problems


def one_case(tools, work, names, case):
    """(row, failed) of one case."""
    family, model_type, fields, seed, ndata = case
    try:
        model = build_model(model_type, fields, seed)
    except Skip as e:
        return "%-10s skipped: %s" % (family, e), False
    import random
    hfdir = os.path.join(work, "hf")
    model.save_pretrained(hfdir, safe_serialization=True)
    rnd = random.Random(seed)
    data = bytes(rnd.randrange(256) for _ in range(ndata))
    with open(os.path.join(work, "data"), "wb") as f:
        f.write(data)
    with open(os.path.join(work, "train.octo"), "w") as f:
        f.write(TRAIN)
    spec = os.path.join(work, "model.octo")
    r = subprocess.run([os.path.join(tools, "octo-import"), os.path.join(hfdir, "config.json"),
                        "-o", spec, "--with=" + os.path.join(work, "train.octo"),
                        "--seq=%d" % S], capture_output=True, text=True)
    if r.returncode != 0:
        msg = " | ".join(l for l in r.stderr.splitlines() if "error:" in l)
        return "%-10s refused: %s" % (family, msg), True
    llava = model_type == "llava"
    vocab = model.config.text_config.vocab_size if llava else model.config.vocab_size
    side = LLAVA_VISION["image_size"] // LLAVA_VISION["patch_size"]
    inputs, targets = stream(data, vocab, side * side if llava else 0)
    # The sliding window: OctoPipe's window w attends to the w keys t - w < j <= t (as transformers'
    # masking_utils); transformers' older masks (modeling_attn_mask_utils, 4.40) attend to w + 1,
    # t - w <= j <= t. Where this transformers attends to more than w, the oracle runs with the
    # window that attends to w keys, and the figures of the config's own window are a note.
    notes, raw = [], None
    w = getattr(model.config, "sliding_window", None)
    if model_type == "mistral" and w is not None and w < S:
        keys = hf_window_keys(model, inputs)
        if keys != w:
            raw = hf_step(model, inputs, targets)
            model.config.sliding_window = w - (keys - w)
            notes.append("transformers %s attends to %d keys with sliding_window = %d (OctoPipe "
                         "and later transformers' masking_utils: %d, t - w < j <= t): the oracle "
                         "runs with sliding_window = %d (%d keys)"
                         % (transformers_version(), keys, w, w, model.config.sliding_window,
                            hf_window_keys(model, inputs)))
    # LLaVA's pixels are octo-run's: the oracle runs after the first plan's dump
    loss_hf, params = (None, None) if llava else hf_step(model, inputs, targets)
    tied = bool(model.config.tie_word_embeddings)
    layer_blocks = NAMING.get(model_type) == "NEMOTRON_H"
    loss_octo, loss_rel, grad_rel, worst_name, problems = None, -1.0, -1.0, "-", []
    for plan, passes in PLANS:
        ois = os.path.join(work, plan + ".ois")
        dump = os.path.join(work, "dump-" + plan)
        run([os.path.join(tools, "octoc"), spec, "--emit=stream", "-o", ois] + passes,
            "octoc (%s plan)" % plan)
        out = run([os.path.join(tools, "octo-run"), ois, "--init=" + hfdir,
                   "--data=" + os.path.join(work, "data"), "--steps=1", "--dump=" + dump],
                  "octo-run (%s plan)" % plan)
        m = re.search(r"^step 1: .*, loss (\S+)$", out, re.M)
        if not m:
            raise RuntimeError("octo-run printed no loss for step 1:\n" + out)
        if llava:
            got = dumped_pixels(dump)
            if loss_hf is None:
                pixels = got
                loss_hf, params = hf_step(model, inputs, targets, pixels)
            elif not (got == pixels).all():
                problems.append("%s plan: its pixels differ from the first plan's" % plan)
        loss = float(m.group(1))
        lr = abs(loss - loss_hf) / abs(loss_hf)
        if lr > loss_rel or lr != lr:
            loss_octo, loss_rel = loss, lr
        gr, gname, probs = compare_dump(dump, names, params, targets, tied, layer_blocks)
        if gr > grad_rel or gr != gr:
            grad_rel, worst_name = gr, gname
        problems += ["%s plan: %s" % (plan, p) for p in probs]
    if raw is not None:
        gr, gname, _ = compare_dump(os.path.join(work, "dump-default"), names, raw[1], targets,
                                    tied)
        notes.append("against sliding_window = %d as is: loss_hf %.6f, rel_loss %.2e, "
                     "max_grad_rel %.2e (%s)" % (w, raw[0], abs(loss_octo - raw[0]) / abs(raw[0]),
                                                 gr, gname))
    ok = loss_rel <= LOSS_RTOL and grad_rel <= GRAD_RTOL and not problems
    for p in problems:
        print("  %s: %s" % (family, p), file=sys.stderr)
    row = ("%-10s %10.6f %10.6f %9.2e %12.2e %-52s %s"
           % (family, loss_hf, loss_octo, loss_rel, grad_rel, worst_name, "ok" if ok else "FAIL"))
    return "\n".join([row] + ["  note: %s: %s" % (family, n) for n in notes]), not ok


def dumped_pixels(dump):
    """The pixels octo-run gave its first layer (a vit_embed: B x C x H x H), from its dump."""
    import numpy as np
    with open(os.path.join(dump, "index.json")) as f:
        first = json.load(f)["layers"][0]
    d = first["dims"]
    x = np.load(os.path.join(dump, first["prefix"] + "x.npy"))
    return x.reshape(d["B"], d["channels"], d["image"], d["image"])


def transformers_version():
    import transformers
    return transformers.__version__


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("build", metavar="BUILD_DIR")
    ap.add_argument("--keep", metavar="DIR", help="keep every case's files in DIR")
    ap.add_argument("--case", action="append", metavar="FAMILY",
                    help="run only this case (repeatable; default every case)")
    args = ap.parse_args()
    try:
        import numpy  # noqa: F401
        import torch
        import transformers  # noqa: F401
    except ImportError as e:
        print("hf_parity: %s: skipped (pip install transformers torch)" % e)
        return 0
    torch.set_num_threads(1)
    tools = os.path.join(args.build, "tools")
    names = {n: read_names(n) for n in ("MIXTRAL", "QWEN_MOE", "DEEPSEEK", "NEMOTRON_H", "LLAVA")}
    if args.keep:
        os.makedirs(args.keep, exist_ok=True)
        root = args.keep
    else:
        root = tempfile.mkdtemp(prefix="hf_parity.")
    failed = False
    try:
        print("%-10s %10s %10s %9s %12s %-52s %s" % ("family", "loss_hf", "loss_octo", "rel_loss",
                                                    "max_grad_rel", "worst_tensor", "result"))
        for case in CASES:
            if args.case and case[0] not in args.case:
                continue
            work = os.path.join(root, case[0])
            shutil.rmtree(work, ignore_errors=True)
            os.makedirs(work)
            try:
                row, bad = one_case(tools, work, names[NAMING.get(case[1], "MIXTRAL")], case)
            except RuntimeError as e:
                row, bad = "%-10s FAIL: %s" % (case[0], e), True
            print(row, flush=True)
            failed |= bad
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
