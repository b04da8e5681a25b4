"""check_trace.py TRACE.json RANKS -- checks octo-run's trace: valid JSON in the Chrome trace
format, one process per rank named after its device and rank, compute events ("F s0 mb0", ...)
with non-negative times that do not overlap on a rank's compute thread, the id rules of
tests/Inputs/trace_ids.py (no pid or tid 0, no tid equal to a pid or shared by two processes,
a sort index per process, "rank N predicted" right after "rank N"). Prints a summary line.
(Not a test: lit skips Inputs/.)"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "Inputs"))
import trace_ids  # noqa: E402

doc = json.load(open(sys.argv[1]))
ranks = int(sys.argv[2])
ev = doc["traceEvents"]
why = trace_ids.check_ids(ev)
assert why is None, why
meta = [e for e in ev if e["ph"] == "M"]
names = {e["pid"]: e["args"]["name"] for e in meta if e["name"] == "process_name"}
measured = {p: n for p, n in names.items() if not n.endswith(" predicted")}
assert len(measured) == ranks, names
sort = {e["pid"]: e["args"]["sort_index"] for e in meta if e["name"] == "process_sort_index"}
order = [names[p] for p in sorted(names, key=lambda p: sort[p])]
for i, n in enumerate(order):  # "rank N predicted" follows "... rank N"
    if n.endswith(" predicted"):
        assert i > 0 and order[i - 1].endswith(n[:-len(" predicted")]), order
threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in meta if e["name"] == "thread_name"}
compute = {}
waits = 0
for e in ev:
    if e["ph"] != "X":
        continue
    assert e["ts"] >= 0 and e["dur"] >= 0, e
    thread = threads[(e["pid"], e["tid"])]
    if thread == "compute" and e["pid"] in measured:
        compute.setdefault(e["pid"], []).append((e["ts"], e["ts"] + e["dur"], e["name"]))
    waits += thread == "wait"
kinds = set()
for pid, spans in compute.items():
    spans.sort()
    for (a0, a1, an), (b0, b1, bn) in zip(spans, spans[1:]):
        assert b0 >= a1 - 1e-3, (pid, an, bn)
    kinds.update(n.split()[0] for _, _, n in spans)
print("trace: %d ranks, kinds %s, waits %s, %d predicted" % (
    len(measured), " ".join(sorted(kinds)), "recorded" if waits else "none",
    len(names) - len(measured)))
