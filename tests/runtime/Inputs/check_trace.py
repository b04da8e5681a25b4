"""check_trace.py TRACE.json RANKS -- checks octo-run's trace: valid JSON in the Chrome trace
format, one process per rank named after its device and rank, compute events ("F s0 mb0", ...)
with non-negative times that do not overlap on a rank's compute thread. Prints a summary line.
(Not a test: lit skips Inputs/.)"""
import json
import sys

doc = json.load(open(sys.argv[1]))
ranks = int(sys.argv[2])
ev = doc["traceEvents"]
names = {e["pid"]: e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "process_name"}
assert len(names) == ranks, names
compute = {}
for e in ev:
    if e["ph"] != "X":
        continue
    assert e["ts"] >= 0 and e["dur"] >= 0, e
    if e["tid"] == 0:
        compute.setdefault(e["pid"], []).append((e["ts"], e["ts"] + e["dur"], e["name"]))
waits = sum(1 for e in ev if e["ph"] == "X" and e["tid"] == 1)
kinds = set()
for pid, spans in compute.items():
    spans.sort()
    for (a0, a1, an), (b0, b1, bn) in zip(spans, spans[1:]):
        assert b0 >= a1 - 1e-3, (pid, an, bn)
    kinds.update(n.split()[0] for _, _, n in spans)
print("trace: %d ranks, kinds %s, waits %s" % (len(names), " ".join(sorted(kinds)),
                                             "recorded" if waits else "none"))
