#!/usr/bin/env python3
"""torch_ref.py -- check a dump of OctoPipe's layer kernels against PyTorch.

    torch_ref.py DIR [--write-fixtures OUT] [--tol 1e-4]

DIR is what `octo-run --dump=DIR` or `octo_kernel_cases dump DIR` wrote (docs/runtime.md,
"Dumps"): index.json and, per layer, with the file prefix P the index gives it, P.x.npy (input),
P.y.npy (output), P.dy.npy (output gradient), P.dx.npy (input gradient, when the input is not
token ids), P.xs.npy and P.dxs.npy (a splicing embedding: the tokens spliced in front of its
own, and their gradient), P.w.NAME.npy and P.g.NAME.npy (each parameter and its gradient from
this microbatch); octo-run's also targets.npy. For every layer this rebuilds the kind in PyTorch
(torchref/KIND.py: forward(dims, x, params) written from the kind's definition) in float64,
splices the dumped tokens in front of a splicing embedding's, runs it with autograd on the
dumped input and weights, and compares the output, the input gradient and every weight
gradient: relative error max|c - ref| / max|ref| at most --tol. The last layer's output
gradient is not taken from the dump but made from targets.npy: the softmax cross-entropy summed
over the positions with a target (-1: none) times the index's loss_scale, differentiated, and
compared with the dumped one. With --write-fixtures, writes PyTorch's y, dx and g.P as float32
.npy files to OUT named by the layer's name (the fixtures that the C tests compare with when
torch is missing). Exit status 0 when every layer agrees."""
import argparse
import importlib.util
import json
import os
import re
import sys

import numpy as np
import torch
import torch.nn.functional as F

SAFE_NAME = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9._-]*$")  # a name that is a file name as it is
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "torchref"))  # their shared helpers (common.py)


def load_kind(kind):
    spec = importlib.util.spec_from_file_location("torchref_" + kind,
                                                  os.path.join(HERE, "torchref", kind + ".py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def rel(c, ref, floor):
    """max|c - ref| / max|ref|; the denominator is at least floor (a gradient that is zero in
    exact arithmetic, like a key bias's, is compared on the layer's scale)."""
    c = np.asarray(c, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if c.shape != ref.shape:
        return float("inf")
    d = np.max(np.abs(c - ref)) if c.size else 0.0
    m = max(np.max(np.abs(ref)) if ref.size else 0.0, floor)
    return float(d / m) if m > 0 else float(d)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--write-fixtures", metavar="OUT")
    ap.add_argument("--tol", type=float, default=1e-4)
    a = ap.parse_args()
    with open(os.path.join(a.dir, "index.json")) as f:
        index = json.load(f)
    if index.get("format") != "octopipe-dump" or index.get("version") != 2:
        sys.exit("%s/index.json: not an octopipe-dump of version 2" % a.dir)
    targets = None
    if index.get("targets"):
        targets = torch.tensor(np.load(os.path.join(a.dir, index["targets"])), dtype=torch.long)
    kinds, bad, checked = {}, 0, 0
    for li, L in enumerate(index["layers"]):
        pre = os.path.join(a.dir, L["prefix"])
        if not os.path.exists(pre + "x.npy"):
            continue  # a layer of a stage that no rank dumped
        kind = L["kind"]
        if kind not in kinds:
            kinds[kind] = load_kind(kind)
        dims = L["dims"]
        x = torch.tensor(np.load(pre + "x.npy"), dtype=torch.float64,
                         requires_grad=L["has_dx"])
        params = {}
        for P in L["params"]:
            params[P["name"]] = torch.tensor(np.load(pre + "w." + P["name"] + ".npy"),
                                             dtype=torch.float64, requires_grad=True)
        y = kinds[kind].forward(dims, x, params)
        splice = L.get("splice_tokens", 0)
        if splice:  # the previous layers' tokens first in each sequence
            xs = torch.tensor(np.load(pre + "xs.npy"), dtype=torch.float64, requires_grad=True)
            B, S = dims["B"], dims["S"]
            y3 = y.view(B, S, -1)
            y = torch.cat([xs.view(B, splice, -1), y3[:, splice:]], dim=1).reshape(B * S, -1)
        dy = torch.tensor(np.load(pre + "dy.npy"), dtype=torch.float64)
        errs = {}
        if targets is not None and li == len(index["layers"]) - 1:
            # the loss, as the runtime defines it: its gradient is what the dump's dy must be
            yl = y.detach().requires_grad_(True)
            loss = index["loss_scale"] * F.cross_entropy(yl, targets, ignore_index=-1,
                                                         reduction="sum")
            loss.backward()
            errs["dy"] = rel(dy.numpy(), yl.grad.numpy(), 0.0)
            dy = yl.grad
        (y * dy).sum().backward()
        grads = {n: (t.grad if t.grad is not None else torch.zeros_like(t)).numpy()
                 for n, t in params.items()}
        floor = 1e-6 * max([0.0] + [float(np.max(np.abs(g))) for g in grads.values() if g.size])
        errs["y"] = rel(np.load(pre + "y.npy"), y.detach().numpy(), 0.0)
        if L["has_dx"]:
            errs["dx"] = rel(np.load(pre + "dx.npy"), x.grad.numpy(), 0.0)
        if splice:
            errs["dxs"] = rel(np.load(pre + "dxs.npy"), xs.grad.numpy(), 0.0)
        for name, g in grads.items():
            errs["g." + name] = rel(np.load(pre + "g." + name + ".npy"), g, floor)
        worst = max(errs, key=lambda k: errs[k])
        ok = errs[worst] <= a.tol
        bad += not ok
        checked += 1
        print("%s %s (%s): largest relative error %.2e (%s)" %
              ("PASS" if ok else "FAIL", L["name"], kind, errs[worst], worst))
        if a.write_fixtures:
            if not SAFE_NAME.match(L["name"]):
                sys.exit("%r: a fixture's name takes letters, digits, '.', '_' and '-'"
                         % L["name"])
            os.makedirs(a.write_fixtures, exist_ok=True)
            out = os.path.join(a.write_fixtures, L["name"] + ".")
            np.save(out + "y.npy", y.detach().numpy().astype(np.float32))
            if L["has_dx"]:
                np.save(out + "dx.npy", x.grad.numpy().astype(np.float32))
            for name, g in grads.items():
                np.save(out + "g." + name + ".npy", g.astype(np.float32))
    if checked == 0:
        sys.exit("%s: no layer tensors found" % a.dir)
    print("%d passed, %d failed" % (checked - bad, bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
