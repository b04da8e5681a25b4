#!/usr/bin/env python3
"""hf_load_loss.py -- transformers as the oracle of an octo-run checkpoint of any family it
names (Gemma 2 here): the checkpoint loaded by from_pretrained with CONFIG_JSON, every tensor
used (no missing or unexpected key), and the mean cross-entropy of the first SEQS sequences of
octo-run's --data stream (bench/hf_parity.py's stream: the token at position p is
data[p % len] % vocab, sequence g's inputs positions g*S .. g*S+S-1, its targets one further).

usage: hf_load_loss.py CKPT_STEP_DIR CONFIG_JSON DATA_FILE SEQS SEQ_LEN OCTO_RUN_OUTPUT

Prints "hf loss: X", then "keys: ok" or "keys: {missing or unexpected ...}", then "match: octo-run's
loss Y" when the loss of OCTO_RUN_OUTPUT's line "step 1: ..., loss Y" is within 1e-5 of X
(relative), else "MISMATCH: ..."; exit status 1 unless both hold."""
import os
import re
import shutil
import sys
import tempfile

import torch
import transformers

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..",
                                "bench"))
import hf_parity  # noqa: E402


def main():
    ckpt, config, data, seqs, seq, octo_out = sys.argv[1:7]
    cfg = transformers.AutoConfig.from_pretrained(config)
    # a folder as save_pretrained writes one: the checkpoint's files and the config
    folder = tempfile.mkdtemp(prefix="hf_load_loss.")
    try:
        for name in os.listdir(ckpt):
            os.symlink(os.path.abspath(os.path.join(ckpt, name)), os.path.join(folder, name))
        shutil.copy(config, os.path.join(folder, "config.json"))
        model, info = transformers.AutoModelForCausalLM.from_pretrained(
            folder, dtype=torch.float32, attn_implementation="eager", output_loading_info=True)
    finally:
        shutil.rmtree(folder)
    bad = {k: v for k, v in info.items() if k in ("missing_keys", "unexpected_keys") and v}
    hf_parity.B, hf_parity.S = int(seqs), int(seq)
    with open(data, "rb") as f:
        inputs, targets = hf_parity.stream(f.read(), cfg.vocab_size)
    with torch.no_grad():
        logits = model(torch.tensor(inputs)).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                 torch.tensor(targets).reshape(-1))
    print("hf loss: %.6f" % float(loss))
    print("keys: ok" if not bad else "keys: %s" % bad)
    with open(octo_out) as f:
        octo = float(re.search(r"^step 1: .*, loss (\S+)$", f.read(), re.M).group(1))
    rel = abs(octo - float(loss)) / abs(float(loss))
    print("%s: octo-run's loss %.6f (relative difference %.1e)"
          % ("match" if rel <= 1e-5 else "MISMATCH", octo, rel))
    return 1 if bad or rel > 1e-5 else 0


if __name__ == "__main__":
    sys.exit(main())
