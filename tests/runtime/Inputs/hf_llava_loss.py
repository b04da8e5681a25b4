#!/usr/bin/env python3
"""hf_llava_loss.py -- transformers as the oracle of an octo-run LLaVA checkpoint.

usage: hf_llava_loss.py CKPT_STEP_DIR CONFIG_JSON DUMP_DIR OCTO_RUN_OUTPUT [--rtol=1e-5]

Loads the checkpoint's weights (model.safetensors.index.json and its shards, as octo-run wrote
them) into transformers' LlavaForConditionalGeneration with CONFIG_JSON (from_pretrained: no key
may be missing or unexpected), then computes the loss of the step that octo-run ran from those
weights (octo-run --init=CKPT_STEP_DIR --steps=1 --dump=DUMP_DIR, its report in
OCTO_RUN_OUTPUT): the pixels are the dump's first layer's input (a vit_embed: B x C x H x H),
the token ids the dump's splicing embedding's input with its first splice_tokens positions set
to the config's image_token_index (LLaVA's image tokens, which the projected features replace),
the targets the dump's targets.npy (-1: no loss, those positions). Prints "transformers loss:
X" and "match: expected", or "MISMATCH" and exits 1 when |X - octo| / |octo| > rtol."""
import argparse
import json
import os
import re
import shutil
import sys
import tempfile

import numpy as np


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("ckpt")
    ap.add_argument("config")
    ap.add_argument("dump")
    ap.add_argument("octo_out")
    ap.add_argument("--rtol", type=float, default=1e-5)
    a = ap.parse_args()
    import torch
    import transformers
    with open(os.path.join(a.dump, "index.json")) as f:
        index = json.load(f)
    layers = index["layers"]
    first = layers[0]
    d = first["dims"]
    pixels = np.load(os.path.join(a.dump, first["prefix"] + "x.npy")).reshape(
        d["B"], d["channels"], d["image"], d["image"])
    emb = [L for L in layers if L["kind"] == "embedding" and L["splice_tokens"] > 0]
    if len(emb) != 1:
        sys.exit("hf_llava_loss: the dump has no splicing embedding")
    emb = emb[0]
    B, S, n = emb["dims"]["B"], emb["dims"]["S"], emb["splice_tokens"]
    ids = np.load(os.path.join(a.dump, emb["prefix"] + "x.npy")).reshape(B, S).astype(np.int64)
    targets = np.load(os.path.join(a.dump, index["targets"])).astype(np.int64)
    with open(a.config) as f:
        cfg = json.load(f)
    ids[:, :n] = cfg["image_token_index"]
    work = tempfile.mkdtemp(prefix="hf_llava_loss.")
    try:
        for name in os.listdir(a.ckpt):
            if name.startswith("model") and (name.endswith(".safetensors") or
                                             name.endswith(".index.json")):
                shutil.copy(os.path.join(a.ckpt, name), work)
        shutil.copy(a.config, os.path.join(work, "config.json"))
        model, info = transformers.LlavaForConditionalGeneration.from_pretrained(
            work, output_loading_info=True, dtype=torch.float32, attn_implementation="eager")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    bad = {k: sorted(v) for k, v in info.items() if k != "error_msgs" and v}
    if bad or info.get("error_msgs"):
        sys.exit("hf_llava_loss: from_pretrained: %s" % (bad or info["error_msgs"]))
    with torch.no_grad():
        logits = model(input_ids=torch.tensor(ids), pixel_values=torch.tensor(pixels)).logits
        loss = float(torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]).double(), torch.tensor(targets), ignore_index=-1))
    with open(a.octo_out) as f:
        m = re.search(r"^step 1: .*, loss (\S+)$", f.read(), re.M)
    if not m:
        sys.exit("hf_llava_loss: %s has no loss of step 1" % a.octo_out)
    octo = float(m.group(1))
    print("transformers loss: %.9g" % loss)
    diff = abs(loss - octo) / abs(octo)
    if diff > a.rtol:
        print("MISMATCH: octo-run %.9g, relative difference %.3g" % (octo, diff))
        return 1
    print("match: expected (octo-run %.9g, relative difference %.3g)" % (octo, diff))
    return 0


if __name__ == "__main__":
    sys.exit(main())
