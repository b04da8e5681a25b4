"""Check an --emit=html page: self-contained (no "http://", "https://", "src=", <link> or
@import), one <script type="application/json" id="octo-data"> element whose text parses as JSON
and holds no "</" (nor any '<'), and, given the trace of the same plan, as many timeline
operations as the trace has operation slices. Prints "ok: N ops, M transfers, S stages[, B
baselines]" or the first failure (exit 1).

usage: check_html.py PAGE.html [TRACE.json]
"""
import json
import re
import sys

OP_CATS = {"F", "B", "W", "BW", "allreduce", "optimizer"}


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


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
    ops, xfers = tl["ops"], tl["xfers"]
    if any(len(o) != len(tl["ops_fields"]) for o in ops):
        fail("an op record has the wrong number of fields")
    if len(data["report"]["per_device"]) != tl["devices"]:
        fail("per_device and timeline disagree on the devices")
    if len(sys.argv) > 2:
        trace = json.load(open(sys.argv[2], encoding="utf-8"))
        n = sum(1 for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("cat") in OP_CATS)
        if n != len(ops):
            fail("%d ops in the page, %d in the trace" % (len(ops), n))
    line = "ok: %d ops, %d transfers, %d stages" % (len(ops), len(xfers),
                                                   len(data["report"]["stages"]))
    if "baselines" in data["report"]:
        line += ", %d baselines" % len(data["report"]["baselines"])
    print(line)


main()
