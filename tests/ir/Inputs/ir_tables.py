#!/usr/bin/env python3
"""Generate the reference tables of docs/ir.md from the IR's .def tables.

usage: ir_tables.py SRCROOT            print the tables (Markdown)
       ir_tables.py SRCROOT --check    exit 1 unless docs/ir.md holds exactly these tables between
                                       its '<!-- tables:begin -->' and '<!-- tables:end -->' lines
"""
import os
import sys


def rows(path, macro):
    """Argument lists of every MACRO(...) line of a .def file, quotes removed."""
    out = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line.startswith(macro + "("):
                continue
            inner = line[len(macro) + 1:line.rindex(")")]
            parts, cur, quoted = [], "", False
            for ch in inner:
                if ch == '"':
                    quoted = not quoted
                if ch == "," and not quoted:
                    parts.append(cur.strip())
                    cur = ""
                else:
                    cur += ch
            parts.append(cur.strip())
            out.append([p[1:-1] if p.startswith('"') and p.endswith('"') else p for p in parts])
    return out


DIMS = {"NONE": "—", "TIME": "time", "BYTES": "size", "FLOPS": "compute rate", "BW": "bandwidth"}
RECORDS = {"TRAIN": "train", "CLUSTER": "cluster", "LINK": "link", "DEVICE": "device",
           "COST": "cost", "PREDICT": "predict", "DEVPREDICT": "predict $dI"}


def default(text):
    """Readable default of a table entry."""
    if text == "NAN":
        return "—"
    if text.startswith("IR_"):
        return "`" + text.split("_", 2)[2].lower() + "`"
    return text


def tables(root):
    d = os.path.join(root, "ir")
    types = {r[0]: r for r in rows(os.path.join(d, "types.def"), "IR_TYPE")}
    out = []
    w = out.append
    w("### Value types\n")
    w("| type | meaning | dimension |")
    w("|---|---|---|")
    for _, name, dim, doc in types.values():
        w(f"| {name} | {doc} | {DIMS[dim]} |")
    w("")
    w("### Records\n")
    w("Fields print in this order. *Default* is what the front end assumes when a spec omits the")
    w("field (the IR itself has no defaults: a field is set or not); *IR only* fields are computed")
    w("by the compiler and not accepted in a spec.\n")
    recs = {}
    for r in rows(os.path.join(d, "records.def"), "IR_FIELD"):
        recs.setdefault(r[0], []).append(r)
    for rec, fields in recs.items():
        w(f"#### `{RECORDS[rec]}`\n")
        w("| field | type | default | meaning |")
        w("|---|---|---|---|")
        for _, name, typ, dflt, scope, doc in fields:
            note = " (IR only)" if scope == "IR" else ""
            w(f"| `{name}` | {types[typ][1]} | {default(dflt)} | {doc}{note} |")
        w("")
    w("### Layer kinds and their parameters\n")
    w("Parameters print in this order. *Default* is what the front end uses when neither the layer")
    w("nor (for parameters marked *model*) the model block sets it; — means derived from other")
    w("parameters or required.\n")
    params = rows(os.path.join(d, "layer_params.def"), "LAYER_PARAM")
    for kid, kname, _recomputable, kdoc in rows(os.path.join(d, "layer_kinds.def"), "LAYER_KIND"):
        w(f"#### `{kname}`: {kdoc}\n")
        w("| parameter | type | default | meaning |")
        w("|---|---|---|---|")
        for kind, _, name, typ, from_model, dflt, tp, doc in params:
            if kind != kid:
                continue
            d_text = default(dflt) + (", model" if from_model == "1" else "")
            tp_text = "; split by tensor parallelism" if tp == "1" else ""
            w(f"| `{name}` | {types[typ][1]} | {d_text} | {doc}{tp_text} |")
        w("")
    w("### Enumerations\n")
    w("| type | values |")
    w("|---|---|")
    enums = {}
    for typ, _, spelling, doc in rows(os.path.join(d, "enums.def"), "IR_ENUM"):
        enums.setdefault(typ, []).append(f"`{spelling}` ({doc})")
    for typ, values in enums.items():
        w(f"| {types[typ][1]} | {'; '.join(values)} |")
    w("")
    w("### Units\n")
    w("| unit | dimension | value in base units | printer may choose it |")
    w("|---|---|---|---|")
    for name, dim, scale, printable in rows(os.path.join(d, "units.def"), "IR_UNIT"):
        dim_text = "count suffix" if dim == "NONE" else DIMS[dim]
        w(f"| `{name}` | {dim_text} | {scale} | {'yes' if printable == '1' else 'no'} |")
    w("")
    w("### Schedule operations\n")
    for _, name, doc in rows(os.path.join(d, "ops.def"), "IR_OP"):
        w(f"- `{name}`: {doc}")
    return "\n".join(out) + "\n"


def main():
    root = sys.argv[1]
    text = tables(root)
    if len(sys.argv) > 2 and sys.argv[2] == "--check":
        with open(os.path.join(root, "docs", "ir.md")) as f:
            doc = f.read()
        begin, end = "<!-- tables:begin -->\n", "<!-- tables:end -->"
        if begin not in doc or end not in doc:
            print("docs/ir.md: missing the tables markers", file=sys.stderr)
            return 1
        section = doc[doc.index(begin) + len(begin):doc.index(end)]
        if section.strip() != text.strip():
            print("docs/ir.md: the reference tables differ from the .def tables; regenerate them "
                  "with tests/ir/Inputs/ir_tables.py", file=sys.stderr)
            return 1
        return 0
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
