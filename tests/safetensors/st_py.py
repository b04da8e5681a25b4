#!/usr/bin/env python3
"""st_py.py -- the reference implementation's side of tests/safetensors/python.test (Python's
safetensors package and NumPy; no torch): files written by it, files read by it, printed as
st-dump prints them (one line per tensor: "NAME DTYPE [shape] [begin,end) = values", the
values as float32 with %.9g, "raw HEX" for the other dtypes; "meta KEY=VALUE" lines).

    st_py.py write PATH   write a file of F32, F16, BF16, F64, I32 and U8 tensors with metadata
                          and print what st-dump must print for it
    st_py.py read PATH    read PATH with the package and print it
    st_py.py same PATH    write the tensors of st-dump --write, which must be byte-identical"""
import json
import math
import struct
import sys

import numpy as np
import safetensors

NP = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I32": np.int32, "U8": np.uint8}


def bf16_bits(x):
    """float32 x rounded to bfloat16 (8 significant bits, ties to even), as its 16 bits, computed
    with Python's own rounding (independently of the library's integer trick)."""
    if x == 0:
        return struct.unpack("<I", struct.pack("<f", x))[0] >> 16
    m, e = math.frexp(x)
    v = round(m * 256) / 256 * 2.0 ** e  # round() is half to even
    return struct.unpack("<I", struct.pack("<f", v))[0] >> 16


def serialize_file(tensors, path, metadata):
    """Write {name: (dtype, shape, raw bytes)} with the package's low-level writer (any dtype,
    BF16 included, without torch), whichever of its two APIs this version has."""
    if hasattr(safetensors, "TensorSpec"):
        keep = {k: np.frombuffer(bytes(d) or b"\0", dtype=np.uint8) for k, (_, _, d) in tensors.items()}
        names = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16",
                 "I32": "int32", "U8": "uint8"}
        specs = {k: safetensors.TensorSpec(dtype=names[t], shape=list(s), data_ptr=keep[k].ctypes.data,
                                           data_len=len(d)) for k, (t, s, d) in tensors.items()}
        safetensors.serialize_file(specs, path, metadata)
    else:
        safetensors.serialize_file({k: {"dtype": t, "shape": list(s), "data": d}
                                    for k, (t, s, d) in tensors.items()}, path, metadata)


def offsets(path):
    """Each tensor's [begin, end) from the file's header (JSON read directly)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
    return {k: v["data_offsets"] for k, v in h.items() if k != "__metadata__"}


def line(name, dtype, shape, data, off):
    if dtype == "BF16":
        vals = np.frombuffer(data, dtype=np.uint16).astype(np.uint32) << 16
        vals = vals.view(np.float32)
    elif dtype in ("F64", "F32", "F16"):
        vals = np.frombuffer(data, dtype=NP[dtype]).astype(np.float32)
    else:
        vals = None
    text = " ".join("%.9g" % float(v) for v in vals) if vals is not None else "raw " + bytes(data).hex()
    return "%s %s [%s] [%d,%d) =%s" % (name, dtype, ",".join(str(d) for d in shape), off[0], off[1],
                                       (" " + text) if text else "")


def print_file(path):
    with safetensors.safe_open(path, framework="np") as f:
        for k, v in sorted((f.metadata() or {}).items()):
            print("meta %s=%s" % (k, v))
    off = offsets(path)
    with open(path, "rb") as f:
        for name, t in safetensors.deserialize(f.read()):
            print(line(name, t["dtype"], t["shape"], bytes(t["data"]), off[name]))


def main():
    mode, path = sys.argv[1], sys.argv[2]
    if mode == "write":
        f16 = np.array([1, -2, 65504, 2.0 ** -24, 0.333251953125, np.inf], dtype=np.float16)
        bf = [0x3f80, 0xc040, 0x7f7f, 0x0001, 0x3eab, 0xff80]  # 1, -3, max, 2^-133, ~1/3, -inf
        tensors = {
            "w.f32": ("F32", [2, 2], np.array([0.5, -1e-30, 3.4028235e38, -0.0], np.float32).tobytes()),
            "w.f16": ("F16", [6], f16.tobytes()),
            "w.bf16": ("BF16", [2, 3], np.array(bf, np.uint16).tobytes()),
            "w.f64": ("F64", [3], np.array([0.1, -1e-50, 123456789.123], np.float64).tobytes()),
            "ids": ("I32", [2], np.array([7, -1], np.int32).tobytes()),
            "mask": ("U8", [3], bytes([1, 0, 255])),
            "none": ("F32", [0], b""),
        }
        serialize_file(tensors, path, {"format": "pt", "note": "written by safetensors"})
        print_file(path)
    elif mode == "read":
        print_file(path)
    elif mode == "same":
        w = np.array([0.5, -1.25, 3.0e-5, 65504.0, -0.0, 1.0 / 3.0], np.float32)
        b = np.array([1.0, 1.00390625, 1.01171875, -2.5, 1e-3], np.float32)
        bits = np.array([bf16_bits(float(x)) for x in b], np.uint16)
        tensors = {
            "model.layers.0.mlp.weight": ("F32", [2, 3], w.tobytes()),
            "lm_head.weight": ("BF16", [5], bits.tobytes()),
            "model.norm.weight": ("BF16", [1, 2], bits[:2].tobytes()),
            "a.scalar": ("F32", [], np.array([7.0], np.float32).tobytes()),
            "empty": ("F32", [0, 4], b""),
        }
        serialize_file(tensors, path, {"format": "pt"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
