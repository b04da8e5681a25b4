"""Summarize a JSON report of a two-type plan for FileCheck: which device type holds more
layers (per device), and whether the plan beats every classic plan by 10% or more."""
import json
import sys

with open(sys.argv[1]) as f:
    r = json.load(f)
types = {d["device"]: d["type"] for d in r["per_device"]}
layers = {}
for s in r["stages"]:
    t = types[s["device"]]
    layers[t] = layers.get(t, 0) + s["end"] - s["first"]
count = {t: list(types.values()).count(t) for t in layers}
per = {t: layers[t] / count[t] for t in layers}
print("layers per device type: " + " > ".join(sorted(per, key=lambda t: -per[t])))
best = min(b["makespan_ms"] for b in r["baselines"] if b["ok"] and not b["oom"])
print("faster than every classic plan: %s" % ("yes" if r["makespan_ms"] * 1.1 <= best else "no"))
