"""Check an --emit=html page: self-contained (no "http://", "https://", "src=", <link> or
@import), one <script type="application/json" id="octo-data"> element whose text parses as JSON
and holds no "</" (nor any '<'); decode its per device columns (docs/report.md, "HTML page") and,
given the trace of the same plan, check that they hold the trace's operations and transfers:
the same kind, stage, microbatch and device, start and duration within 0.1 us. Prints "ok: N
ops, M transfers, S stages[, B baselines]" or the first failure (exit 1).

usage: check_html.py PAGE.html [TRACE.json]
"""
import json
import re
import sys

def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def decode(tl):
    """The page's operations as (device, kind name, stage, mb, start_us, dur_us) and transfers
    as (from, grad, to, src_stage, dst_stage, mb, start_us, dur_us)."""
    tick_us = tl["tick_ms"] * 1e3
    ops, xfers = [], []
    for d in range(tl["devices"]):
        c, shapes = tl["ops"][d], tl["op_shapes"]
        if not (len(c["shape"]) == len(c["mb"]) == len(c["gap"])):
            fail("$d%d: operation columns of different lengths" % d)
        last, t = [-1] * len(shapes), 0
        for j, dmb, gap in zip(c["shape"], c["mb"], c["gap"]):
            kind, stage, dur = shapes[j][0], shapes[j][1], shapes[j][2]
            last[j] += dmb
            t += gap
            ops.append((d, tl["kinds"][kind], stage, last[j], t * tick_us, dur * tick_us))
            t += dur
        c, shapes = tl["xfers"][d], tl["xfer_shapes"]
        last, t = [-1] * len(shapes), 0
        for j, dmb, ds in zip(c["shape"], c["mb"], c["dstart"]):
            grad, frm, to, ss, ds_, dur = shapes[j][:6]
            if frm != d:
                fail("a transfer of $d%d in $d%d's column" % (frm, d))
            last[j] += dmb
            t += ds
            xfers.append((d, grad, to, ss, ds_, last[j], t * tick_us, dur * tick_us))
    return ops, xfers


def compare(what, got, want):
    """Fail unless the records match, times (the last two fields) within 0.1 us."""
    if len(got) != len(want):
        fail("%d %ss in the page, %d in the trace" % (len(got), what, len(want)))
    for g, w in zip(got, want):
        if g[:-2] != w[:-2] or abs(g[-2] - w[-2]) > 0.11 or abs(g[-1] - w[-1]) > 0.21:
            fail("%s %s in the page, %s in the trace" % (what, g, w))


def main():
    page = open(sys.argv[1], encoding="utf-8").read()
    for bad in ("http://", "https://", "src=", "<link", "@import", "url("):
        if bad in page:
            fail("not self-contained: the page contains %r" % bad)
    blocks = re.findall(r'<script type="application/json" id="octo-data">(.*?)</script>', page,
                        re.S)
    if len(blocks) != 1:
        fail("expected one data element, found %d" % len(blocks))
    text = blocks[0]
    if "<" in text:
        fail("'<' in the embedded JSON (it must be written \\u003c)")
    data = json.loads(text)
    tl = data["timeline"]
    if len(data["report"]["per_device"]) != tl["devices"]:
        fail("per_device and timeline disagree on the devices")
    ops, xfers = decode(tl)
    if len(sys.argv) > 2:
        trace = json.load(open(sys.argv[2], encoding="utf-8"))
        want_ops, want_xfers = [], []
        for e in trace["traceEvents"]:
            if e.get("ph") != "X":
                continue
            if e.get("cat") in tl["kinds"]:
                a = e.get("args", {})
                want_ops.append((e["pid"] - 1, e["cat"], a.get("stage", -1), a.get("mb", -1),
                                 e["ts"], e["dur"]))
            elif e.get("cat") in ("act", "grad") and e["args"]["from"] == "$d%d" % (e["pid"] - 1):
                m = re.match(r"\w+ s(\d+)->s(\d+) mb(\d+)", e["name"])
                want_xfers.append((e["pid"] - 1, int(e["cat"] == "grad"),
                                   int(e["args"]["to"][2:]), int(m.group(1)), int(m.group(2)),
                                   int(m.group(3)), e["ts"], e["dur"]))
        compare("operation", sorted(ops), sorted(want_ops))
        compare("transfer", sorted(xfers), sorted(want_xfers))
    line = "ok: %d ops, %d transfers, %d stages" % (len(ops), len(xfers),
                                                   len(data["report"]["stages"]))
    if "baselines" in data["report"]:
        line += ", %d baselines" % len(data["report"]["baselines"])
    print(line)


main()
