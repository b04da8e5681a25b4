"""Summarize the "baselines" of a JSON report for FileCheck: their names, the ones that did not
apply, which baseline the report's own plan equals (by makespan, among those that fit), and the
plan's speedup over S-1F1B. Fails when a baseline lacks a required key."""
import json
import sys

with open(sys.argv[1]) as f:
    report = json.load(f)
base = report["baselines"]
print("baselines: " + ", ".join(b["name"] for b in base))
print("n/a: " + ", ".join(b["name"] for b in base if not b["ok"]))
for b in base:
    if b["ok"]:
        for key in ("makespan_ms", "bubble_ratio", "peak_mem_bytes", "oom", "pipeline"):
            assert key in b, (b["name"], key)
        assert len(b["peak_mem_bytes"]) == report["devices"]
fits = [b for b in base if b["ok"] and not b["oom"]]
best = min(fits, key=lambda b: b["makespan_ms"])
same = best["makespan_ms"] == report["makespan_ms"]
print("the plan is the fastest baseline that fits: " + (best["name"] if same else "no"))
s1 = next(b for b in base if b["name"] == "S-1F1B")
print("speedup over S-1F1B: %.3f" % (s1["makespan_ms"] / report["makespan_ms"]))
