#!/usr/bin/env python3
"""dump_check.py -- check an octo-run --dump without NumPy.

    dump_check.py complete DIR   every DIR/*.npy is as long as its header says: prints
                                 'N complete, M truncated' and each truncated file
    dump_check.py splice DIR     the splicing embeddings, as below

For every layer of DIR/index.json with splice_tokens P > 0 (an embedding that splices the
previous layer's tokens in front of its own), prints one line saying whether, in every sequence,
its output y starts with the spliced tokens xs, xs is the previous layer's output y, its output
gradient dy starts with the spliced tokens' gradient dxs, and dxs is the previous layer's output
gradient: 'splice NAME: P tokens: y=xs yes, xs=prev.y yes, dy=dxs yes, dxs=prev.dy yes'. Reads
.npy format 1.0 of little-endian float32 in C order (what the runtime writes)."""
import ast
import json
import os
import struct
import sys


def header(data, path):
    """The header of .npy bytes data, its length and the element count."""
    assert data[:6] == b"\x93NUMPY", path + ": not a .npy file"
    hlen = struct.unpack_from("<H", data, 8)[0]
    h = ast.literal_eval(data[10:10 + hlen].decode("latin1"))  # a Python literal
    n = 1
    for d in h["shape"]:
        n *= d
    return h, 10 + hlen, n


def load(path):
    """The floats of a float32 .npy file, flat, and its shape."""
    data = open(path, "rb").read()
    h, off, n = header(data, path)
    assert h["descr"] == "<f4" and not h["fortran_order"], path
    return list(struct.unpack_from("<%df" % n, data, off)), h["shape"]


def complete(d):
    good, bad = 0, []
    for f in sorted(os.listdir(d)):
        if f.endswith(".npy"):
            data = open(os.path.join(d, f), "rb").read()
            h, off, n = header(data, f)
            ok = len(data) == off + n * 4
            good += ok
            bad += [] if ok else [f]
    print("%d complete, %d truncated" % (good, len(bad)))
    for f in bad:
        print("truncated: " + f)


def rows(a, B, S, first, w):
    """Rows [0, first) of each of B sequences of S rows of width w in flat a."""
    return [a[(b * S + t) * w:(b * S + t + 1) * w] for b in range(B) for t in range(first)]


def splice(d):
    index = json.load(open(os.path.join(d, "index.json")))
    layers = index["layers"]
    for i, L in enumerate(layers):
        P = L.get("splice_tokens", 0)
        if not P:
            continue
        pre, prev = os.path.join(d, L["prefix"]), os.path.join(d, layers[i - 1]["prefix"])
        B, S, w = L["dims"]["B"], L["dims"]["S"], L["dims"]["out_w"]
        y, _ = load(pre + "y.npy")
        dy, _ = load(pre + "dy.npy")
        xs, _ = load(pre + "xs.npy")
        dxs, _ = load(pre + "dxs.npy")
        py, _ = load(prev + "y.npy")
        pdy, _ = load(prev + "dy.npy")
        yes = lambda ok: "yes" if ok else "no"
        print("splice %s: %d tokens: y=xs %s, xs=prev.y %s, dy=dxs %s, dxs=prev.dy %s" %
              (L["name"], P, yes(rows(y, B, S, P, w) == rows(xs, B, P, P, w)), yes(xs == py),
               yes(rows(dy, B, S, P, w) == rows(dxs, B, P, P, w)), yes(dxs == pdy)))


if __name__ == "__main__":
    {"complete": complete, "splice": splice}[sys.argv[1]](sys.argv[2])
