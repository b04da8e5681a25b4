#!/usr/bin/env python3
"""Check an OctoPipe SVG timeline (docs/report.md, "SVG timeline"): well-formed XML with an svg
root 1600 px wide; a caption, a legend and an axis group; one row label per device; operation
boxes inside the plot area (between the row labels and the memory column) and inside the
picture's height. Prints "ok: R rows, B boxes, A arrows" for the tests to match."""
import sys
import xml.etree.ElementTree as ET

NS = "{http://www.w3.org/2000/svg}"


def fail(msg):
    print("check_svg: " + msg)
    sys.exit(1)


def main(path):
    root = ET.parse(path).getroot()
    if root.tag != NS + "svg" or root.get("width") != "1600":
        fail("root is not a 1600 px wide svg element")
    height = float(root.get("height"))
    groups = {g.get("id"): g for g in root.iter(NS + "g")}
    for gid in ("caption", "axis", "rows", "ops", "transfers", "legend"):
        if gid not in groups:
            fail("no group " + gid)
    labels = [t.text for t in groups["rows"].iter(NS + "text")
              if t.text and t.text.startswith("$d")]
    if labels != ["$d%d" % i for i in range(len(labels))] or not labels:
        fail("row labels are not $d0, $d1, ...: %s" % labels)
    boxes = [r for r in groups["ops"].iter(NS + "rect")]
    for r in boxes:
        x, w = float(r.get("x")), float(r.get("width"))
        y, h = float(r.get("y")), float(r.get("height"))
        if x < 70 - 0.01 or x + w > 1600 - 200 + 1 or y < 0 or y + h > height:
            fail("box outside the plot: x=%s w=%s y=%s" % (x, w, y))
    arrows = [l for l in groups["transfers"].iter(NS + "line")]
    print("ok: %d rows, %d boxes, %d arrows" % (len(labels), len(boxes), len(arrows)))


if __name__ == "__main__":
    main(sys.argv[1])
