"""Check the DOM a headless browser dumped after running an --emit=html page: the script ran to
its end without an error (<body data-ok="1">, no data-error), and, given the trace of the same
plan, drew every operation of the plan (data-drawn-ops equals the number of operation slices in
the trace). Prints "ok: N ops drawn, S apart, L labels" (S: boxes drawn with the white gap that
ends them, L: labels drawn in them; data-split-ops and data-labels) or the first failure (exit 1).

usage: check_html_dom.py DOM.html [TRACE.json]
"""
import json
import re
import sys


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def main():
    dom = open(sys.argv[1], encoding="utf-8").read()
    body = re.search(r"<body([^>]*)>", dom)
    if not body:
        fail("no <body> in the dumped DOM")
    attrs = dict(re.findall(r'([a-z-]+)="([^"]*)"', body.group(1)))
    if "data-error" in attrs:
        fail("script error: " + attrs["data-error"])
    if attrs.get("data-ok") != "1":
        fail("the script did not finish (data-ok=%r)" % attrs.get("data-ok"))
    drawn = int(attrs.get("data-drawn-ops", "-1"))
    if len(sys.argv) > 2:
        trace = json.load(open(sys.argv[2], encoding="utf-8"))
        kinds = {"F", "B", "W", "BW", "allreduce", "optimizer", "reduce-scatter", "all-gather",
                 "tie"}
        n = sum(1 for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("cat") in kinds)
        if drawn != n:
            fail("%d ops drawn, %d in the trace" % (drawn, n))
    for a in ("data-split-ops", "data-labels"):
        if a not in attrs:
            fail("no " + a)
    print("ok: %d ops drawn, %s apart, %s labels" % (drawn, attrs["data-split-ops"],
                                                     attrs["data-labels"]))


main()
