#!/usr/bin/env python3
"""hf_state_dict.py -- a checkpoint under transformers' module names, for --init's tests.

usage: hf_state_dict.py CKPT_STEP_DIR CONFIG_JSON OUT.safetensors

Loads the checkpoint's weights (model.safetensors.index.json and its shards, as octo-run wrote
them) into transformers' LlavaForConditionalGeneration with CONFIG_JSON (from_pretrained, in
float32), then writes the model's state_dict as it is (transformers' module names:
model.language_model., lm_head., model.vision_tower., model.multi_modal_projector.) to
OUT.safetensors with safetensors.torch.save_file. Prints the first three names and the count.
(Not a test: lit skips Inputs/.)"""
import os
import shutil
import sys
import tempfile


def main(argv):
    if len(argv) != 3:
        sys.exit(__doc__.splitlines()[2])
    ckpt, config, out = argv
    import torch
    from safetensors.torch import save_file
    from transformers import LlavaForConditionalGeneration
    with tempfile.TemporaryDirectory() as d:
        for f in os.listdir(ckpt):
            if f.startswith("model") and (f.endswith(".safetensors") or f.endswith(".json")):
                shutil.copy(os.path.join(ckpt, f), d)
        shutil.copy(config, os.path.join(d, "config.json"))
        m = LlavaForConditionalGeneration.from_pretrained(d, dtype=torch.float32)
    sd = {k: v.detach().contiguous() for k, v in m.state_dict().items()}
    save_file(sd, out, metadata={"format": "pt"})
    names = sorted(sd)
    print("%s ... (%d tensors)" % (", ".join(names[:3]), len(names)))


if __name__ == "__main__":
    main(sys.argv[1:])
