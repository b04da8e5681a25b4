#!/usr/bin/env python3
"""ois.py -- read, edit and rewrite OctoPipe instruction streams (.ois, docs/isa.md "File
format", version 7) for tests that need damaged or hand-edited streams: swapped, dropped or
changed instructions and predicted times (re-checksummed, so that the validator and the deadlock
checker see them), a different version, truncation, flipped bytes.

usage: ois.py IN OUT EDIT...
       ois.py --check-isa < (octo-dis --isa output)   compare OPS with the instruction set
  swap:R:A:B        swap instructions A and B of rank R (their predicted times go with them)
  drop:R:A          delete instruction A of rank R (and its predicted time; later addresses
                    of the predicted times move down with their instructions)
  set:R:A:OP:X,..   replace instruction A of rank R by OP with operands X,.. (OP a mnemonic;
                    the predicted times stay as they are)
  scale:N           write measurement scale N
  measured_on:NAME  write measuring backend NAME
  pred_step:X       write predicted step time X (seconds; nan, inf, -1 are fine)
  busy:R:X          write rank R's predicted busy time X
  peak:R:X          write rank R's predicted peak memory X (bytes)
  pred:R:I:A:T0:T1  replace rank R's predicted time I by address A, start T0, end T1
                    (I equal to the count appends one)
  droppred:R:I      delete rank R's predicted time I
  version:N         write format version N
  layername:I:NAME  rename layer I to NAME (the rest of the edit; backslash escapes such as
                    \x00 or \n stand for their bytes): hostile names for the tools to meet
  offload:S:X       write stage S's offload flag X (an i32: 0, 1, or anything for the reader)
  kind:I:KIND       write layer I's kind KIND
  param:I:NAME:X    set layer I's parameter NAME to X (nan, inf, -5 are fine; appended when the
                    layer has none so named; X '-' deletes it)
  addparam:I:NAME:X append parameter NAME = X to layer I even when it has one so named
  truncate:N        keep the first N bytes (applied last, after the checksum)
  flip:OFF          flip the low bit of byte OFF (applied last, after the checksum)
  print             print the header's prediction, each rank's busy time and peak memory and
                    its predicted times (after the edits before it)
The opcode table below must follow stream/isa.def (tests/backend/bad-files.test checks it)."""
import struct
import sys
import zlib

MAGIC = b"\x89OIS\r\n\x1a\n"
# Mnemonic and operand count of each opcode, in isa.def order.
OPS = [("LOAD", 3), ("FWD", 6), ("LOSS", 4), ("BWD_IN", 6), ("BWD_W", 3), ("BWD", 6),
       ("SEND", 5), ("RECV", 5), ("WAIT", 1), ("FREE", 1), ("ALLREDUCE", 1), ("STEP", 0),
       ("TIE", 2), ("OFFLOAD", 4), ("RELOAD", 4)]
# Size of a stage record and the offset of its offload flag in it.
STAGE_BYTES = 52
STAGE_OFFLOAD = 48


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
    """The stream as a dict: 'head' (raw bytes from the model name to the dropout flag), the
    prediction ('scale', 'measured_on' bytes, 'pred_step'), 'tables' (raw bytes of the layer,
    stage and shape tables) and 'ranks' (per rank: raw program header bytes, a list of [opcode,
    operands], 'busy', 'peak' and 'pred', a list of [addr, t0, t1])."""
    assert data[:8] == MAGIC, "not an OctoPipe instruction stream"
    r = Reader(data)
    r.p = 8
    version = r.take("I")
    r.str()
    nranks, _, nstages = r.take("iii")
    r.take("iii")
    r.str()
    r.str()
    r.take("i")  # dropout
    head = data[12:r.p]
    scale = r.take("i")
    measured_on = r.str()
    pred_step = r.take("d")
    start = r.p
    for _ in range(r.take("I")):
        r.str()
        r.str()
        for _ in range(r.take("I")):
            r.str()
            r.take("d")
    r.p += nstages * STAGE_BYTES  # first, end, rank, out bytes, shape, stash, wstash, recompute,
    # its layers, offload
    for _ in range(r.take("I")):
        _, ndim = r.take("ii")
        r.p += 8 * ndim
    tables = data[start:r.p]
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
        busy, peak = r.take("dd")
        pred = [list(r.take("idd")) for _ in range(r.take("I"))]
        ranks.append({"head": prog_head, "code": code, "busy": busy, "peak": peak, "pred": pred})
    return {"version": version, "head": head, "scale": scale, "measured_on": measured_on,
            "pred_step": pred_step, "tables": tables, "ranks": ranks}


def serialize(s):
    out = bytearray(MAGIC + struct.pack("<I", s["version"]) + s["head"])
    out += struct.pack("<iI", s["scale"], len(s["measured_on"])) + s["measured_on"]
    out += struct.pack("<d", s["pred_step"]) + s["tables"]
    for rk in s["ranks"]:
        out += rk["head"] + struct.pack("<I", len(rk["code"]))
        for op, args in rk["code"]:
            out += struct.pack("<B" + "i" * len(args), op, *args)
        out += struct.pack("<ddI", rk["busy"], rk["peak"], len(rk["pred"]))
        for addr, t0, t1 in rk["pred"]:
            out += struct.pack("<idd", addr, t0, t1)
    out += struct.pack("<I", zlib.crc32(bytes(out)) & 0xFFFFFFFF)
    return bytes(out)


def split_layers(tables):
    """The layer table as a list of [name, kind, [[param name, value], ...]] (names as bytes)
    and the raw bytes after it (stage and shape tables)."""
    r = Reader(tables)
    layers = []
    for _ in range(r.take("I")):
        name, kind = r.str(), r.str()
        layers.append([name, kind, [[r.str(), r.take("d")] for _ in range(r.take("I"))]])
    return layers, tables[r.p:]


def join_layers(layers, rest):
    """split_layers' inverse."""
    out = bytearray(struct.pack("<I", len(layers)))
    for name, kind, params in layers:
        for text in (name, kind):
            out += struct.pack("<I", len(text)) + text
        out += struct.pack("<I", len(params))
        for pname, value in params:
            out += struct.pack("<I", len(pname)) + pname + struct.pack("<d", value)
    return bytes(out) + rest


def edit_layer(tables, i, edit):
    """The tables with layer i changed by edit(layer) (a [name, kind, params] list)."""
    layers, rest = split_layers(tables)
    assert 0 <= i < len(layers), "the stream has layers 0 to %d" % (len(layers) - 1)
    edit(layers[i])
    return join_layers(layers, rest)


def set_param(layer, name, value):
    """Layer's parameter name set to value (appended when the layer has none of that name;
    value None deletes it)."""
    params = layer[2]
    for k, (pname, _) in enumerate(params):
        if pname == name:
            if value is None:
                del params[k]
            else:
                params[k][1] = value
            return
    if value is not None:
        params.append([name, value])


def move_pred(rk, old_to_new):
    """Re-address rank rk's predicted times: old_to_new maps an address to its new one, or to
    None for a deleted instruction (its entry goes too); entries stay in address order."""
    moved = [[old_to_new(a), t0, t1] for a, t0, t1 in rk["pred"]]
    rk["pred"] = sorted([e for e in moved if e[0] is not None], key=lambda e: e[0])


def show(s):
    """Print the prediction of s: the header's fields, then per rank its busy time (seconds),
    its peak memory (bytes) and its predicted times as ADDR MNEMONIC T0 T1 (seconds); numbers
    as repr."""
    print("scale %d measured_on %s pred_step %r" %
          (s["scale"], s["measured_on"].decode("utf-8", "replace"), s["pred_step"]))
    for i, rk in enumerate(s["ranks"]):
        print("rank %d busy %r peak %r" % (i, rk["busy"], rk["peak"]))
        for a, t0, t1 in rk["pred"]:
            name = OPS[rk["code"][a][0]][0] if 0 <= a < len(rk["code"]) else "?"
            print("  %04d %s %r %r" % (a, name, t0, t1))


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
            rk = s["ranks"][int(f[1])]
            a, b = int(f[2]), int(f[3])
            rk["code"][a], rk["code"][b] = rk["code"][b], rk["code"][a]
            move_pred(rk, lambda x: b if x == a else a if x == b else x)
        elif f[0] == "drop":
            rk = s["ranks"][int(f[1])]
            a = int(f[2])
            del rk["code"][a]
            move_pred(rk, lambda x: None if x == a else x - 1 if x > a else x)
        elif f[0] == "set":
            op = [n for n, _ in OPS].index(f[3])
            args = [int(x) for x in f[4].split(",")] if len(f) > 4 and f[4] else []
            s["ranks"][int(f[1])]["code"][int(f[2])] = [op, args]
        elif f[0] == "scale":
            s["scale"] = int(f[1])
        elif f[0] == "measured_on":
            s["measured_on"] = f[1].encode()
        elif f[0] == "pred_step":
            s["pred_step"] = float(f[1])
        elif f[0] == "busy":
            s["ranks"][int(f[1])]["busy"] = float(f[2])
        elif f[0] == "peak":
            s["ranks"][int(f[1])]["peak"] = float(f[2])
        elif f[0] == "pred":
            pred = s["ranks"][int(f[1])]["pred"]
            entry = [int(f[3]), float(f[4]), float(f[5])]
            if int(f[2]) == len(pred):
                pred.append(entry)
            else:
                pred[int(f[2])] = entry
        elif f[0] == "droppred":
            del s["ranks"][int(f[1])]["pred"][int(f[2])]
        elif f[0] == "print":
            show(s)
        elif f[0] == "version":
            s["version"] = int(f[1])
        elif f[0] == "layername":
            name = e.split(":", 2)[2].encode("latin1").decode("unicode_escape").encode("latin1")
            s["tables"] = edit_layer(s["tables"], int(f[1]), lambda l: l.__setitem__(0, name))
        elif f[0] == "offload":
            layers, rest = split_layers(s["tables"])
            at = int(f[1]) * STAGE_BYTES + STAGE_OFFLOAD
            rest = rest[:at] + struct.pack("<i", int(f[2])) + rest[at + 4:]
            s["tables"] = join_layers(layers, rest)
        elif f[0] == "kind":
            s["tables"] = edit_layer(s["tables"], int(f[1]),
                                     lambda l: l.__setitem__(1, f[2].encode()))
        elif f[0] == "param":
            value = None if f[3] == "-" else float(f[3])
            s["tables"] = edit_layer(s["tables"], int(f[1]),
                                     lambda l: set_param(l, f[2].encode(), value))
        elif f[0] == "addparam":
            s["tables"] = edit_layer(s["tables"], int(f[1]),
                                     lambda l: l[2].append([f[2].encode(), float(f[3])]))
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
