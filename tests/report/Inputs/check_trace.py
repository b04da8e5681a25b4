#!/usr/bin/env python3
"""Check the structure of an OctoPipe trace (docs/report.md, "Trace"): valid JSON with
displayTimeUnit ms and traceEvents; every process named "$dI TYPE (node N)" with a compute thread
and send/recv threads; complete events (X) with non-negative ts and dur; on every thread the X
events nest (no partial overlap, as Perfetto requires); each transfer has one send and one recv X
event and one flow pair (s on the send thread, f with bp=e on the recv thread, same id, inside
their slices); memory counters per process with increasing timestamps starting at 0; the id rules of
tests/Inputs/trace_ids.py (no pid or tid 0, no tid equal to a pid or in two processes, a sort
index per process), processes in device order (pid device + 1, process_sort_index the device),
thread_sort_index on every thread.
Prints a summary line that the tests match: "ok: P processes, O ops, T transfers, C counters"."""
import collections
import json
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "Inputs"))
import trace_ids  # noqa: E402


def fail(msg):
    print("check_trace: " + msg)
    sys.exit(1)


def ns(us):
    """A trace time (microseconds, at most 3 decimals) in whole nanoseconds."""
    return round(us * 1000)


def main(path):
    with open(path) as f:
        doc = json.load(f)
    if doc.get("displayTimeUnit") != "ms":
        fail("displayTimeUnit is not ms")
    events = doc.get("traceEvents")
    if not isinstance(events, list):
        fail("no traceEvents array")
    why = trace_ids.check_ids(events)
    if why:
        fail(why)
    procs, threads = {}, collections.defaultdict(dict)
    sorts, thread_sorts = {}, set()
    slices = collections.defaultdict(list)  # (pid, tid) -> [(ts, end, name)]
    flows = collections.defaultdict(dict)   # id -> {ph: event}
    counters = collections.defaultdict(list)
    ops = xfer_x = 0
    for e in events:
        ph = e.get("ph")
        if ph == "M":
            if e["name"] == "process_name":
                procs[e["pid"]] = e["args"]["name"]
            elif e["name"] == "thread_name":
                threads[e["pid"]][e["tid"]] = e["args"]["name"]
            elif e["name"] == "process_sort_index":
                sorts[e["pid"]] = e["args"]["sort_index"]
            elif e["name"] == "thread_sort_index":
                thread_sorts.add((e["pid"], e["tid"]))
        elif ph == "X":
            if e["ts"] < 0 or e["dur"] < 0:
                fail("negative time in " + json.dumps(e))
            ts, dur = ns(e["ts"]), ns(e["dur"])
            slices[(e["pid"], e["tid"])].append((ts, ts + dur, e["name"]))
            if threads[e["pid"]].get(e["tid"]) == "compute":
                ops += 1
                if e["cat"] not in ("F", "B", "W", "BW", "allreduce", "optimizer", "tie"):
                    fail("unknown operation category " + e["cat"])
            else:
                xfer_x += 1
                if e["cat"] not in ("act", "grad"):
                    fail("unknown transfer category " + e["cat"])
        elif ph in ("s", "f"):
            if ph in flows[e["id"]]:
                fail("flow id %d has two '%s' events" % (e["id"], ph))
            flows[e["id"]][ph] = e
        elif ph == "C":
            if e["name"] != "memory" or "GiB" not in e["args"]:
                fail("counter is not a memory counter: " + json.dumps(e))
            counters[e["pid"]].append(e["ts"])
        else:
            fail("unexpected phase " + str(ph))
    for pid, name in procs.items():
        if not re.fullmatch(r"\$d%d \S+ \(node \d+\)" % (pid - 1), name):
            fail("bad process name %s for pid %d" % (name, pid))
        if sorts.get(pid) != pid - 1:
            fail("process %d is not sorted as device %d" % (pid, pid - 1))
        for tid in threads[pid]:
            if (pid, tid) not in thread_sorts:
                fail("thread %d of process %d has no thread_sort_index" % (tid, pid))
        names = set(threads[pid].values())
        if not {"compute", "send", "recv"} <= names:
            fail("process %d lacks a compute, send or recv thread" % pid)
    for (pid, tid), sl in slices.items():
        if tid not in threads[pid]:
            fail("thread %d of process %d has no name" % (tid, pid))
        sl.sort(key=lambda s: (s[0], -s[1]))
        stack = []
        for s in sl:
            while stack and stack[-1][1] <= s[0]:
                stack.pop()
            if stack and s[1] > stack[-1][1]:
                fail("slices overlap on pid %d tid %d: %s and %s" % (pid, tid, stack[-1], s))
            stack.append(s)
    for fid, pair in flows.items():
        if set(pair) != {"s", "f"}:
            fail("flow %d is not a pair" % fid)
        s, f = pair["s"], pair["f"]
        if f.get("bp") != "e" or s["name"] != f["name"]:
            fail("flow %d: the f event needs bp=e and the name of its s event" % fid)
        for ev in (s, f):
            inside = [x for x in slices[(ev["pid"], ev["tid"])]
                      if x[2] == ev["name"] and x[0] <= ns(ev["ts"]) <= x[1]]
            if not inside:
                fail("flow %d: no slice %s around ts %s" % (fid, ev["name"], ev["ts"]))
    if xfer_x != 2 * len(flows):
        fail("%d transfer slices for %d flows" % (xfer_x, len(flows)))
    for pid, ts in counters.items():
        if ts[0] != 0 or ts != sorted(ts):
            fail("memory counter of process %d does not start at 0 or goes back in time" % pid)
    if set(counters) != set(procs):
        fail("not every process has a memory counter")
    print("ok: %d processes, %d ops, %d transfers, %d counters"
          % (len(procs), ops, len(flows), sum(len(c) for c in counters.values())))


if __name__ == "__main__":
    main(sys.argv[1])
