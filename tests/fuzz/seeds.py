#!/usr/bin/env python3
"""seeds.py -- seed inputs for the fuzz harnesses' replay test (not a test itself).

    seeds.py SRCROOT OUT        copy the examples and test inputs of each reader into OUT/octo,
                                OUT/ir, OUT/prof, OUT/hf (Hugging Face configs), with damaged copies of each, and into
                                OUT/plan the examples with their imports written in place (the
                                harnesses read from memory and follow no import), each also
                                with 'global_batch = 8' (few microbatches: quick to lower),
                                and into OUT/st safetensors files and shard indexes made here,
                                and into OUT/ckpt checkpoint manifests of fuzz_checkpoint's plan
    seeds.py --damage DIR       add damaged copies of every file of DIR

A damaged copy is the file cut at a few lengths and with a few bytes changed, deterministically."""
import glob
import json
import os
import re
import shutil
import struct
import sys


def damage(path):
    data = open(path, "rb").read()
    base = path + ".d"
    n = len(data)
    for k, cut in enumerate(sorted({n // 7, n // 3, n // 2, (2 * n) // 3, n - 1})):
        if 0 <= cut < n:
            open("%s%d" % (base, k), "wb").write(data[:cut])
    for k in range(4):
        if n == 0:
            break
        b = bytearray(data)
        for j in range(1 + k):
            i = (n * (2 * j + 1) * (k + 3)) // 29 % n
            b[i] = (b[i] + 37 * (k + 1)) % 256
        open("%sx%d" % (base, k), "wb").write(bytes(b))


def safetensors_file(tensors, metadata=None):
    """The bytes of a safetensors file of tensors [(name, dtype, shape, raw bytes)], laid out in
    the given order, the header padded with spaces to a multiple of 8 bytes."""
    header, off = {}, 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(data)]}
        off += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(t[3] for t in tensors)


def safetensors_seeds(out):
    """Seeds of fuzz_safetensors in OUT/st: files of every dtype class and an index."""
    d = os.path.join(out, "st")
    os.makedirs(d, exist_ok=True)
    f32 = struct.pack("<4f", 1.5, -2.0, 0.0, 3.25)
    files = {
        "f32.safetensors": [("w", "F32", [2, 2], f32)],
        "mixed.safetensors": [("a", "F64", [2], struct.pack("<2d", 0.1, 1e300)),
                              ("b", "F32", [], struct.pack("<f", 7.0)),
                              ("c", "BF16", [3], struct.pack("<3H", 0x3f80, 0xc040, 0x7f80)),
                              ("d", "F16", [1, 2], struct.pack("<2H", 0x3c00, 0x0001)),
                              ("e", "I32", [2], struct.pack("<2i", 7, -1)),
                              ("z", "U8", [0, 3], b"")],
        "empty.safetensors": [],
    }
    for name, tensors in sorted(files.items()):
        with open(os.path.join(d, name), "wb") as o:
            o.write(safetensors_file(tensors, {"format": "pt"} if "mixed" in name else None))
    with open(os.path.join(d, "index.json"), "w") as o:
        json.dump({"metadata": {"total_size": 16},
                   "weight_map": {"w": "model.safetensors"}}, o)


def checkpoint_seeds(out):
    """Seeds of fuzz_checkpoint in OUT/ckpt: manifests of its plan (embedding, attention, mlp, LM
    head; Adam), one without files to check (the reader then checks the tensors), one listing
    them with sizes and CRCs that are not theirs, and one of another model."""
    d = os.path.join(out, "ckpt")
    os.makedirs(d, exist_ok=True)
    base = {"format": "octopipe-checkpoint", "version": 1, "model": "fz", "step": 1,
            "names": "hf", "scale": 1, "seed": "1", "optimizer": "adam", "lr": 0.01,
            "sequences_per_step": 2, "seq": 8, "data": None,
            "layers": [{"name": n, "kind": k} for n, k in
                       [("embed", "embedding"), ("attn", "attention"), ("mlp", "mlp"),
                        ("head", "lm_head")]],
            "files": {}}
    listed = dict(base, files={"model-00001-of-00002.safetensors":
                               {"bytes": 6832, "crc32": "015795ad"},
                               "model.safetensors.index.json": {"bytes": 992, "crc32": "0"}})
    other = dict(base, layers=base["layers"][:2], data={"file": "x", "bytes": 1, "crc32": "0"})
    for name, m in (("manifest.json", base), ("listed.json", listed), ("other.json", other)):
        with open(os.path.join(d, name), "w") as o:
            json.dump(m, o, indent=2)


def inline_imports(path, seen=None):
    """The text of spec 'path' with every 'import "FILE"' line replaced by FILE's text (each file
    once, relative to the importing one)."""
    seen = set() if seen is None else seen
    out = []
    for line in open(path).read().splitlines(True):
        m = re.match(r'\s*import\s+"([^"]*)"', line)
        if not m:
            out.append(line)
            continue
        target = os.path.normpath(os.path.join(os.path.dirname(path), m.group(1)))
        if target not in seen:
            seen.add(target)
            out.append(inline_imports(target, seen))
    return "".join(out)


def main():
    if sys.argv[1] == "--damage":
        for f in sorted(glob.glob(os.path.join(sys.argv[2], "*"))):
            if ".d" not in os.path.basename(f):
                damage(f)
        return 0
    root, out = sys.argv[1], sys.argv[2]
    groups = {
        "octo": glob.glob(os.path.join(root, "examples", "*.octo")) +
                glob.glob(os.path.join(root, "tests", "frontend", "*.octo")),
        "ir": glob.glob(os.path.join(root, "tests", "*", "*.oir")),
        "prof": glob.glob(os.path.join(root, "tests", "cost", "Inputs", "*.json")) +
                glob.glob(os.path.join(root, "examples", "profiles", "*.json")),
        "hf": glob.glob(os.path.join(root, "tests", "import", "Inputs", "*.json")) +
              glob.glob(os.path.join(root, "tests", "import", "Inputs", "*", "config.json")),
    }
    os.makedirs(os.path.join(out, "plan"), exist_ok=True)
    for i, f in enumerate(sorted(glob.glob(os.path.join(root, "examples", "*.octo")))):
        dst = os.path.join(out, "plan", "%03d-%s" % (i, os.path.basename(f)))
        text = inline_imports(f)
        with open(dst, "w") as o:
            o.write(text)
        # and one with few microbatches, small enough for fuzz_plan to lower
        with open(dst + ".small", "w") as o:
            o.write(re.sub(r"global_batch\s*=\s*\d+", "global_batch = 8", text))
    for g, files in groups.items():
        for i, f in enumerate(sorted(files)):
            dst = os.path.join(out, g, "%03d-%s" % (i, os.path.basename(f)))
            shutil.copyfile(f, dst)
            damage(dst)
    safetensors_seeds(out)
    checkpoint_seeds(out)
    for f in sorted(glob.glob(os.path.join(out, "st", "*")) +
                    glob.glob(os.path.join(out, "ckpt", "*"))):
        damage(f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
