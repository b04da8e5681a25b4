#!/usr/bin/env python3
"""ois.py -- read, edit and rewrite OctoPipe instruction streams (.ois, docs/isa.md "File
format") for tests that need damaged or hand-edited streams: swapped, dropped or changed
instructions (re-checksummed, so that the validator and the deadlock checker see them), a
different version, truncation, flipped bytes.

usage: ois.py IN OUT EDIT...
       ois.py --check-isa < (octo-dis --isa output)   compare OPS with the instruction set
  swap:R:A:B        swap instructions A and B of rank R
  drop:R:A          delete instruction A of rank R
  set:R:A:OP:X,..   replace instruction A of rank R by OP with operands X,.. (OP a mnemonic)
  version:N         write format version N
  truncate:N        keep the first N bytes (applied last, after the checksum)
  flip:OFF          flip the low bit of byte OFF (applied last, after the checksum)
The opcode table below must follow backend/isa.def (tests/backend/bad-files.test checks it)."""
import struct
import sys
import zlib

MAGIC = b"\x89OIS\r\n\x1a\n"
# Mnemonic and operand count of each opcode, in isa.def order.
OPS = [("LOAD", 3), ("FWD", 6), ("LOSS", 4), ("BWD_IN", 6), ("BWD_W", 3), ("BWD", 6),
       ("SEND", 5), ("RECV", 5), ("WAIT", 1), ("FREE", 1), ("ALLREDUCE", 1), ("STEP", 0)]


class Reader:
    def __init__(self, data):
        self.d, self.p = data, 0

    def take(self, fmt):
        v = struct.unpack_from("<" + fmt, self.d, self.p)
        self.p += struct.calcsize("<" + fmt)
        return v[0] if len(v) == 1 else v

    def str(self):
        n = self.take("I")
        s = self.d[self.p:self.p + n]
        self.p += n
        return s


def parse(data):
    """The stream as a dict: 'head' (raw bytes from the version to the programs) and 'ranks'
    (per rank: raw program header bytes and a list of [opcode, operands])."""
    assert data[:8] == MAGIC, "not an OctoPipe instruction stream"
    r = Reader(data)
    r.p = 8
    version = r.take("I")
    r.str()
    nranks, _, nstages = r.take("iii")
    r.take("iii")
    r.str()
    r.str()
    for _ in range(r.take("I")):
        r.str()
        r.str()
        for _ in range(r.take("I")):
            r.str()
            r.take("d")
    r.p += nstages * 40
    for _ in range(r.take("I")):
        _, ndim = r.take("ii")
        r.p += 8 * ndim
    head = data[12:r.p]
    ranks = []
    for _ in range(nranks):
        start = r.p
        r.take("i")
        r.str()
        r.take("i")
        nslots = r.take("I")
        r.p += 17 * nslots
        prog_head = data[start:r.p]
        code = []
        for _ in range(r.take("I")):
            op = r.take("B")
            code.append([op, list(r.take("i" * OPS[op][1])) if OPS[op][1] > 1 else
                         ([r.take("i")] if OPS[op][1] == 1 else [])])
        ranks.append({"head": prog_head, "code": code})
    return {"version": version, "head": head, "ranks": ranks}


def serialize(s):
    out = bytearray(MAGIC + struct.pack("<I", s["version"]) + s["head"])
    for rk in s["ranks"]:
        out += rk["head"] + struct.pack("<I", len(rk["code"]))
        for op, args in rk["code"]:
            out += struct.pack("<B" + "i" * len(args), op, *args)
    out += struct.pack("<I", zlib.crc32(bytes(out)) & 0xFFFFFFFF)
    return bytes(out)


def check_isa(text):
    """Exit non-zero unless OPS lists the opcodes of 'text' (octo-dis --isa) in order."""
    rows = [l.split("|") for l in text.splitlines() if l.startswith("| ") and "`" in l]
    table = [(r[2].strip().strip("`"),
              len([w for w in r[3].strip().strip("`").split() if w not in ("-", "\u2014")]))
             for r in rows if r[1].strip().isdigit()]
    if table != OPS:
        sys.exit("ois.py: OPS %s differs from the instruction set %s" % (OPS, table))


def main(argv):
    if len(argv) == 2 and argv[1] == "--check-isa":
        return check_isa(sys.stdin.read())
    if len(argv) < 3:
        sys.exit(__doc__)
    s = parse(open(argv[1], "rb").read())
    late = []
    for e in argv[3:]:
        f = e.split(":")
        if f[0] == "swap":
            code = s["ranks"][int(f[1])]["code"]
            a, b = int(f[2]), int(f[3])
            code[a], code[b] = code[b], code[a]
        elif f[0] == "drop":
            del s["ranks"][int(f[1])]["code"][int(f[2])]
        elif f[0] == "set":
            op = [n for n, _ in OPS].index(f[3])
            args = [int(x) for x in f[4].split(",")] if len(f) > 4 and f[4] else []
            s["ranks"][int(f[1])]["code"][int(f[2])] = [op, args]
        elif f[0] == "version":
            s["version"] = int(f[1])
        elif f[0] in ("truncate", "flip"):
            late.append(f)
        else:
            sys.exit("ois.py: unknown edit '%s'" % e)
    data = bytearray(serialize(s))
    for f in late:
        if f[0] == "truncate":
            data = data[:int(f[1])]
        else:
            data[int(f[1])] ^= 1
    open(argv[2], "wb").write(bytes(data))


if __name__ == "__main__":
    main(sys.argv)
