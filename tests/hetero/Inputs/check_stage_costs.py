"""check_stage_costs.py REPORT.json TRACE.json -- the report's per-stage costs are the costs the
simulator runs: for every stage, the report's f_ms equals the duration of every "F sN mbK" slice
of the trace, and its b_ms and w_ms those of the "B"/"W" slices (or b_ms + w_ms those of a fused
"BW"), within the trace's nanosecond rounding. Prints "stage costs match the trace: N stages on
TYPES" or the first mismatch. (Not a test: lit skips Inputs/.)"""
import json
import sys

report = json.load(open(sys.argv[1]))
trace = json.load(open(sys.argv[2]))
want = {}
for st in report["stages"]:
    s = st["stage"]
    want[("F", s)] = st["f_ms"]
    want[("B", s)] = st["b_ms"]
    want[("W", s)] = st["w_ms"]
    want[("BW", s)] = st["b_ms"] + st["w_ms"]
seen = 0
for e in trace["traceEvents"]:
    if e.get("ph") != "X" or e.get("cat") not in ("F", "B", "W", "BW"):
        continue
    key = (e["cat"], e["args"]["stage"])
    dur_ms = e["dur"] / 1000.0
    if abs(dur_ms - want[key]) > 2e-6:
        sys.exit("stage %d: %s takes %.6f ms in the trace (%s), the report says %.6f ms"
                 % (key[1], key[0], dur_ms, e["name"], want[key]))
    seen += 1
if not seen:
    sys.exit("no stage slices in the trace")
types = []
for st in report["stages"]:
    if st["device_type"] not in types:
        types.append(st["device_type"])
print("stage costs match the trace: %d stages on %s" % (len(report["stages"]), " ".join(types)))
