"""st_edit.py -- damage a safetensors file for the checkpoint tests (plain Python, no packages).

    st_edit.py IN OUT OP [ARGS]

OPs: drop NAME (remove a tensor), rename OLD NEW, sub REGEX REPL (re.sub on every name), add
NAME (an F32 tensor of shape [1]),
shape NAME D0,D1,... (the same element count), dtype NAME DTYPE (one of the same element size:
F32 <-> I32), merge (IN a directory written by octo-run --save: its shards into one file), flip
OFFSET (xor the byte at OFFSET of the data, after the header), cut N (keep the first N bytes of
the file). Tensors are written back to back in name order with a "format": "pt" metadata
entry. (Not a test: lit skips Inputs/.)"""
import json
import os
import re
import struct
import sys


def read(path):
    with open(path, "rb") as f:
        blob = f.read()
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + n])
    data = blob[8 + n:]
    meta = header.pop("__metadata__", {})
    tensors = {}
    for name, t in header.items():
        b, e = t["data_offsets"]
        tensors[name] = [t["dtype"], t["shape"], data[b:e]]
    return tensors, meta


def write(path, tensors, meta):
    header, data = {"__metadata__": meta or {"format": "pt"}}, b""
    for name in sorted(tensors):
        dtype, shape, raw = tensors[name]
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)


def main(argv):
    src, dst, op, args = argv[0], argv[1], argv[2], argv[3:]
    if op == "merge":
        tensors, meta = {}, {}
        for name in sorted(os.listdir(src)):
            if name.startswith("model-") and name.endswith(".safetensors"):
                t, meta = read(os.path.join(src, name))
                tensors.update(t)
        write(dst, tensors, meta)
        return
    if op in ("flip", "cut"):
        with open(src, "rb") as f:
            blob = bytearray(f.read())
        if op == "flip":
            n = struct.unpack("<Q", blob[:8])[0]
            blob[8 + n + int(args[0])] ^= 0x40
        else:
            blob = blob[:int(args[0])]
        with open(dst, "wb") as f:
            f.write(blob)
        return
    tensors, meta = read(src)
    if op == "drop":
        del tensors[args[0]]
    elif op == "rename":
        tensors[args[1]] = tensors.pop(args[0])
    elif op == "sub":
        tensors = {re.sub(args[0], args[1], n): t for n, t in tensors.items()}
    elif op == "add":
        tensors[args[0]] = ["F32", [1], struct.pack("<f", 0.0)]
    elif op == "shape":
        tensors[args[0]][1] = [int(d) for d in args[1].split(",")]
    elif op == "dtype":
        tensors[args[0]][0] = args[1]
    else:
        sys.exit("st_edit.py: unknown operation '%s'" % op)
    write(dst, tensors, meta)


if __name__ == "__main__":
    main(sys.argv[1:])
