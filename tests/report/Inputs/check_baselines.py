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
print("the plan is at least as fast as the best classic plan that fits (%s): %s" % (
    best["name"], "yes" if report["makespan_ms"] <= best["makespan_ms"] else "no"))
tuner = report.get("tuner")
if tuner:
    assert tuner["makespan_ms"] == report["makespan_ms"]
    for b in fits:
        assert abs(tuner["speedup_vs"][b["name"]] - b["makespan_ms"] / tuner["makespan_ms"]) < 1e-9
    print("tuner: %s" % ", ".join(k for k in ("iterations", "evaluations", "seconds",
                                               "makespan_ms", "bubble_ratio", "speedup_vs")
                                   if k in tuner))
s1 = next(b for b in base if b["name"] == "S-1F1B")
print("speedup over S-1F1B: %.3f" % (s1["makespan_ms"] / report["makespan_ms"]))
