"""calibration.py PROFILE CALIBRATION -- check octo-run --calibrate's profile against
octo-run --profile's of the same stream: the same set-up keys, no link, an optimizer rate, the
same layers with the same bytes and shapes, and every time measured (F > 0, B and W >= 0).
Prints one summary line, or the first difference and exits 1."""
import json
import sys

prof, cal = (json.load(open(p)) for p in sys.argv[1:3])


def fail(msg):
    print("calibration.py: " + msg)
    sys.exit(1)


for key in ("format", "version", "device", "micro_batch", "seq", "tensor", "dtype", "scale"):
    if prof.get(key) != cal.get(key):
        fail("%s: profile %r, calibration %r" % (key, prof.get(key), cal.get(key)))
if "link" in cal:
    fail("the calibration has a link")
if not cal.get("optimizer_gbs", 0) > 0:
    fail("no optimizer rate")
if list(prof["layers"]) != list(cal["layers"]):
    fail("layers differ: %s against %s" % (list(prof["layers"]), list(cal["layers"])))
for name, c in cal["layers"].items():
    p = prof["layers"][name]
    for key in ("act_bytes", "act_w_bytes", "out_bytes", "param_bytes", "grad_bytes", "shape"):
        if p[key] != c[key]:
            fail("%s.%s: profile %r, calibration %r" % (name, key, p[key], c[key]))
    if not (c["f_ms"] > 0 and c["b_ms"] >= 0 and c["w_ms"] >= 0):
        fail("%s: times %r" % (name, (c["f_ms"], c["b_ms"], c["w_ms"])))
print("calibration: %d layers, bytes and shapes as profiled, backend %s, every F timed"
      % (len(cal["layers"]), cal["backend"]))
