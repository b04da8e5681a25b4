#!/usr/bin/env python3
"""Check an OctoPipe SVG timeline (docs/report.md, "SVG timeline"): well-formed XML with an svg
root 1600 px wide; a caption, a legend and an axis group; one row label per device, each with
its device type under it; operation boxes inside the plot area (between the row labels and the
memory column) and inside the picture's height; no transfer line enters a row (arrows join
adjacent rows through the gap between them, ticks stay in the gaps), an arrow joins adjacent
rows only, ticks come in pairs (out of the sender, into the receiver). Prints "ok: R rows, B
boxes, A arrows, T ticks" for the tests to match."""
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
    types = [t.text for t in groups["rows"].iter(NS + "text") if t.get("class") == "type"]
    if len(types) != len(labels) or not all(types):
        fail("%d rows but %d device type labels" % (len(labels), len(types)))
    rows = [(float(r.get("y")), float(r.get("y")) + float(r.get("height")))
            for r in groups["rows"].iter(NS + "rect") if r.get("class") == "row"]
    if len(rows) != len(labels):
        fail("%d row labels but %d row boxes" % (len(labels), len(rows)))
    boxes = [r for r in groups["ops"].iter(NS + "rect")]
    for r in boxes:
        x, w = float(r.get("x")), float(r.get("width"))
        y, h = float(r.get("y")), float(r.get("height"))
        if x < 70 - 0.01 or x + w > 1600 - 200 + 1 or y < 0 or y + h > height:
            fail("box outside the plot: x=%s w=%s y=%s" % (x, w, y))
    arrows = ticks = 0
    for line in groups["transfers"].iter(NS + "line"):
        y1, y2 = sorted((float(line.get("y1")), float(line.get("y2"))))
        for top, bottom in rows:
            if y1 < bottom - 0.01 and y2 > top + 0.01:
                fail("transfer line %s crosses the row at y=%s" % (line.get("class"), top))
        cls = line.get("class")
        if cls == "arrow":
            arrows += 1
            if y2 - y1 > 30:
                fail("arrow spans %.0f px: more than the gap between adjacent rows" % (y2 - y1))
        elif cls in ("tick-out", "tick-in"):
            ticks += 1
            if y2 - y1 > 8.01:
                fail("tick longer than 8 px")
        else:
            fail("transfer line of unknown class %s" % cls)
    if ticks % 2:
        fail("%d ticks: not in pairs" % ticks)
    print("ok: %d rows, %d boxes, %d arrows, %d ticks" % (len(labels), len(boxes), arrows, ticks))


if __name__ == "__main__":
    main(sys.argv[1])
