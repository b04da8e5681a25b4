#!/usr/bin/env python3
"""seeds.py -- seed inputs for the fuzz harnesses' replay test (not a test itself).

    seeds.py SRCROOT OUT        copy the examples and test inputs of each reader into OUT/octo,
                                OUT/ir, OUT/prof, OUT/hf (Hugging Face configs), with damaged copies of each, and into
                                OUT/plan the examples with their imports written in place (the
                                harnesses read from memory and follow no import), each also
                                with 'global_batch = 8' (few microbatches: quick to lower)
    seeds.py --damage DIR       add damaged copies of every file of DIR

A damaged copy is the file cut at a few lengths and with a few bytes changed, deterministically."""
import glob
import os
import re
import shutil
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
