#!/usr/bin/env python3
"""seeds.py -- seed inputs for the fuzz harnesses' replay test (not a test itself).

    seeds.py SRCROOT OUT        copy the examples and test inputs of each reader into OUT/octo,
                                OUT/ir, OUT/prof, with damaged copies of each
    seeds.py --damage DIR       add damaged copies of every file of DIR

A damaged copy is the file cut at a few lengths and with a few bytes changed, deterministically."""
import glob
import os
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
    }
    for g, files in groups.items():
        for i, f in enumerate(sorted(files)):
            dst = os.path.join(out, g, "%03d-%s" % (i, os.path.basename(f)))
            shutil.copyfile(f, dst)
            damage(dst)
    return 0


if __name__ == "__main__":
    sys.exit(main())
