#!/usr/bin/env python3
"""hf_llama_loss.py -- an independent oracle for octo-run's Hugging Face checkpoints.

usage: hf_llama_loss.py CKPT_STEP_DIR CONFIG_JSON DATA_FILE STEP SEQS_PER_STEP
                        [--expect=LOSS | --octo-run-output=FILE] [--rtol=1e-5] [--seq=S]
                        [--transformers-only]

Reads the checkpoint's model.safetensors.index.json and its shards by hand (no safetensors
package), a Hugging Face LlamaConfig-style config.json, and computes in float64 the mean
cross-entropy of training step STEP (0-based) with the Llama forward of transformers'
modeling_llama (q/k/v biases as Qwen2, per-head q/k RMSNorm as Qwen3, when the checkpoint has
them). The data is octo-run's --data: the token at stream position p is data[p % len] % vocab;
step STEP holds the sequences g = STEP*SEQS .. STEP*SEQS+SEQS-1, sequence g's inputs are the
positions g*S .. g*S+S-1 and its targets g*S+1 .. g*S+S; S is --seq (default: the config's
max_position_embeddings).

Prints "hf loss: X". --expect=LOSS, or --octo-run-output=FILE (octo-run's report: the loss of
its line "step STEP+1: ..., loss X"), compares: |loss - expect| / |expect| > rtol exits 1. Where
transformers is importable, the same loss is also computed with its model loaded from the
checkpoint by from_pretrained (and must agree within rtol); elsewhere that check is skipped.
Every checkpoint tensor must be one the forward uses, shaped as the config says.
--transformers-only: a model whose forward this script does not redo (Nemotron-H): the loss is
transformers' alone, which must be installed.
"""
import json
import os
import re
import struct
import sys

import numpy as np

DTYPES = {"F32": "<f4", "F64": "<f8", "F16": "<f2"}


def fail(msg):
    print("hf_llama_loss: " + msg, file=sys.stderr)
    sys.exit(1)


def read_safetensors(path):
    """{name: float64 array} of one safetensors file."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        fail("%s: too short" % path)
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    base = 8 + n
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        buf = raw[base + b:base + end]
        if e["dtype"] == "BF16":
            a = (np.frombuffer(buf, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        elif e["dtype"] in DTYPES:
            a = np.frombuffer(buf, dtype=DTYPES[e["dtype"]])
        else:
            fail("%s: tensor %s has dtype %s" % (path, name, e["dtype"]))
        if a.size != int(np.prod(e["shape"], dtype=np.int64)):
            fail("%s: tensor %s: %d values for shape %s" % (path, name, a.size, e["shape"]))
        out[name] = a.astype(np.float64).reshape(e["shape"])
    return out


def read_checkpoint(d):
    """The tensors of a step directory, through its index's weight_map (or model.safetensors)."""
    index = os.path.join(d, "model.safetensors.index.json")
    if not os.path.exists(index):
        return read_safetensors(os.path.join(d, "model.safetensors"))
    with open(index) as f:
        wmap = json.load(f)["weight_map"]
    tensors = {}
    for shard in sorted(set(wmap.values())):
        for name, a in read_safetensors(os.path.join(d, shard)).items():
            if wmap.get(name) != shard:
                fail("%s: tensor %s is not mapped to it by the index" % (shard, name))
            tensors[name] = a
    missing = sorted(set(wmap) - set(tensors))
    if missing:
        fail("the index maps %s but its shard lacks it" % missing[0])
    return tensors


class Weights:
    """The checkpoint's tensors, each taken once with its shape checked."""

    def __init__(self, tensors):
        self.t = dict(tensors)

    def take(self, name, shape):
        if name not in self.t:
            fail("the checkpoint has no tensor %s" % name)
        a = self.t.pop(name)
        if list(a.shape) != list(shape):
            fail("tensor %s has shape %s, not %s" % (name, list(a.shape), list(shape)))
        return a

    def maybe(self, name, shape):
        return self.take(name, shape) if name in self.t else None


def rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rotate_half(x):
    h = x.shape[-1] // 2
    return np.concatenate([-x[..., h:], x[..., :h]], axis=-1)


def silu(x):
    return x / (1.0 + np.exp(-x))


def config_dims(cfg):
    H = cfg["hidden_size"]
    nh = cfg["num_attention_heads"]
    return dict(H=H, nh=nh, nkv=cfg.get("num_key_value_heads") or nh,
                hd=cfg.get("head_dim") or H // nh, F=cfg["intermediate_size"],
                L=cfg["num_hidden_layers"], V=cfg["vocab_size"], eps=cfg["rms_norm_eps"],
                theta=cfg.get("rope_theta", 10000.0))


def forward_loss(tensors, cfg, ids, targets):
    """Mean cross-entropy of logits(ids) against targets ([B, S] ints), float64."""
    if cfg.get("hidden_act", "silu") != "silu":
        fail("hidden_act %s: only silu" % cfg.get("hidden_act"))
    if cfg.get("rope_scaling"):
        fail("rope_scaling is not supported")
    c = config_dims(cfg)
    H, nh, nkv, hd, F, V, eps = c["H"], c["nh"], c["nkv"], c["hd"], c["F"], c["V"], c["eps"]
    W = Weights(tensors)
    B, S = ids.shape
    x = W.take("model.embed_tokens.weight", [V, H])[ids]           # [B, S, H]
    # Rotary (LlamaRotaryEmbedding, default rope): cos/sin of cat(freqs, freqs) at positions 0..S-1.
    inv_freq = 1.0 / (c["theta"] ** (np.arange(0, hd, 2, dtype=np.float64) / hd))
    freqs = np.arange(S, dtype=np.float64)[:, None] * inv_freq[None, :]
    emb = np.concatenate([freqs, freqs], axis=-1)                  # [S, hd]
    cos, sin = np.cos(emb), np.sin(emb)
    causal = np.tril(np.ones((S, S), dtype=bool))
    rep = nh // nkv
    for b in range(c["L"]):
        p = "model.layers.%d." % b
        n = rms_norm(x, W.take(p + "input_layernorm.weight", [H]), eps)

        def proj(name, heads):
            y = n @ W.take(p + "self_attn.%s_proj.weight" % name, [heads * hd, H]).T
            bias = W.maybe(p + "self_attn.%s_proj.bias" % name, [heads * hd])
            if bias is not None:
                y = y + bias
            return y.reshape(B, S, heads, hd).transpose(0, 2, 1, 3)  # [B, heads, S, hd]

        q, k, v = proj("q", nh), proj("k", nkv), proj("v", nkv)
        qn = W.maybe(p + "self_attn.q_norm.weight", [hd])
        kn = W.maybe(p + "self_attn.k_norm.weight", [hd])
        if (qn is None) != (kn is None):
            fail("block %d has only one of q_norm and k_norm" % b)
        if qn is not None:
            q, k = rms_norm(q, qn, eps), rms_norm(k, kn, eps)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)  # repeat_kv: head h reads h // rep
        scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(hd)
        scores = np.where(causal, scores, -np.inf)
        scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
        probs = scores / scores.sum(axis=-1, keepdims=True)
        o = (probs @ v).transpose(0, 2, 1, 3).reshape(B, S, nh * hd)
        x = x + o @ W.take(p + "self_attn.o_proj.weight", [H, nh * hd]).T
        n = rms_norm(x, W.take(p + "post_attention_layernorm.weight", [H]), eps)
        g = n @ W.take(p + "mlp.gate_proj.weight", [F, H]).T
        u = n @ W.take(p + "mlp.up_proj.weight", [F, H]).T
        x = x + (silu(g) * u) @ W.take(p + "mlp.down_proj.weight", [H, F]).T
    x = rms_norm(x, W.take("model.norm.weight", [H]), eps)
    if "lm_head.weight" in W.t or not cfg.get("tie_word_embeddings", False):
        head = W.take("lm_head.weight", [V, H])
    else:
        head = tensors["model.embed_tokens.weight"]
    if W.t:
        fail("the checkpoint has tensors the forward does not use: %s" % ", ".join(sorted(W.t)))
    logits = x @ head.T                                            # [B, S, V]
    m = logits.max(axis=-1, keepdims=True)
    lse = np.log(np.exp(logits - m).sum(axis=-1)) + m[..., 0]
    picked = np.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
    return float(np.mean(lse - picked))


def step_tokens(data_file, step, seqs, S, V):
    """octo-run's inputs and targets ([seqs, S]) of training step `step` from --data's bytes."""
    with open(data_file, "rb") as f:
        data = np.frombuffer(f.read(), dtype=np.uint8).astype(np.int64)
    if data.size == 0:
        fail("%s is empty" % data_file)
    pos = (step * seqs + np.arange(seqs))[:, None] * S + np.arange(S)[None, :]
    ids = data[pos % data.size] % V
    targets = data[(pos + 1) % data.size] % V
    return ids, targets


def transformers_loss(ckpt, cfg_path, ids, targets):
    """The same loss with transformers' model, or None where transformers is not installed."""
    try:
        import transformers
    except ImportError:
        return None
    import tempfile
    import torch
    with open(cfg_path) as f:
        cfg = json.load(f)
    if cfg.get("model_type") not in transformers.CONFIG_MAPPING:
        print("transformers %s has no model type %s: not compared"
              % (transformers.__version__, cfg.get("model_type")))
        return None
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "config.json"), "w") as f:
            json.dump(cfg, f)
        for name in os.listdir(ckpt):
            if name.startswith("model") and name.endswith((".safetensors", ".json")):
                os.symlink(os.path.abspath(os.path.join(ckpt, name)), os.path.join(tmp, name))
        # float32, the checkpoint's dtype (some versions' masks fail in float64)
        kw = dict(torch_dtype=torch.float32, output_loading_info=True)
        try:
            model, info = transformers.AutoModelForCausalLM.from_pretrained(
                tmp, attn_implementation="eager", **kw)
        except TypeError:
            model, info = transformers.AutoModelForCausalLM.from_pretrained(tmp, **kw)
    bad = [k for k in ("missing_keys", "unexpected_keys", "mismatched_keys") if info.get(k)]
    if bad:
        fail("transformers: %s" % "; ".join("%s %s" % (k, info[k]) for k in bad))
    model.eval()
    with torch.no_grad():
        logits = model(input_ids=torch.from_numpy(ids)).logits.double()
    return float(torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), torch.from_numpy(targets).reshape(-1)))


def octo_run_loss(path, step):
    """The loss of octo-run's report line "step STEP: ..., loss X"."""
    with open(path) as f:
        for line in f:
            m = re.match(r"step %d: .*, loss (\S+)" % step, line)
            if m:
                return float(m.group(1))
    fail("%s has no line 'step %d: ..., loss X'" % (path, step))


def main(argv):
    opts = {"rtol": "1e-5"}
    pos = []
    for a in argv:
        m = re.match(r"--(expect|octo-run-output|rtol|seq)=(.*)$", a)
        if m:
            opts[m.group(1)] = m.group(2)
        elif a == "--transformers-only":
            opts["transformers-only"] = True
        elif a.startswith("--"):
            fail("unknown option %s" % a)
        else:
            pos.append(a)
    if len(pos) != 5:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 1
    ckpt, cfg_path, data_file = pos[0], pos[1], pos[2]
    step, seqs = int(pos[3]), int(pos[4])
    rtol = float(opts["rtol"])
    with open(cfg_path) as f:
        cfg = json.load(f)
    S = int(opts.get("seq", cfg.get("max_position_embeddings", 0)))
    if S < 1:
        fail("no sequence length: give --seq=N")
    ids, targets = step_tokens(data_file, step, seqs, S, cfg["vocab_size"])
    rc = 0
    hf = transformers_loss(ckpt, cfg_path, ids, targets)
    if opts.get("transformers-only"):
        if hf is None:
            fail("--transformers-only: transformers is not installed or has no %s"
                 % cfg.get("model_type"))
        loss = hf
        print("transformers loss: %.6f" % loss)
    else:
        loss = forward_loss(read_checkpoint(ckpt), cfg, ids, targets)
        print("hf loss: %.6f" % loss)
    if hf is not None and not opts.get("transformers-only"):
        rel = abs(hf - loss) / abs(loss)
        print("transformers loss: %.6f (relative difference %.2e)" % (hf, rel))
        if not rel <= rtol:
            print("MISMATCH: transformers %.9g, ours %.9g" % (hf, loss))
            rc = 1
    expect = None
    if "expect" in opts:
        expect = float(opts["expect"])
    elif "octo-run-output" in opts:
        expect = octo_run_loss(opts["octo-run-output"], step + 1)
    if expect is not None:
        rel = abs(loss - expect) / abs(expect)
        if not rel <= rtol:
            print("MISMATCH: expected %.9g, hf loss %.9g (relative difference %.2e > %g)"
                  % (expect, loss, rel, rtol))
            rc = 1
        else:
            print("match: expected %.6f, relative difference %.2e" % (expect, rel))
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
