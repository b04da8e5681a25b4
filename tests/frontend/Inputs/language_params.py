"""language_params.py ROOT -- every layer parameter of ir/layer_params.def has a row in its
kind's table in docs/language.md ("### `kind`" sections, rows "| `name` |"), and every row
names a parameter of the table. Prints "ok: K kinds, P parameters" or the first mismatch.
(Not a test: lit skips Inputs/.)"""
import os
import re
import sys

root = sys.argv[1]
kinds = dict(re.findall(r'^LAYER_KIND\((\w+),\s*"([\w-]+)"',
                        open(os.path.join(root, "ir", "layer_kinds.def")).read(), re.M))
params = {}
for kind, name in re.findall(r'^LAYER_PARAM\((\w+),\s*\w+,\s*"(\w+)"',
                             open(os.path.join(root, "ir", "layer_params.def")).read(), re.M):
    params.setdefault(kinds[kind], []).append(name)
doc = open(os.path.join(root, "docs", "language.md")).read()
total = 0
for kind, names in params.items():
    m = re.search(r"^### `%s` .*?(?=^#)" % re.escape(kind), doc, re.M | re.S)
    if not m:
        sys.exit("language.md has no section for %s" % kind)
    rows = re.findall(r"^\| `(\w+)` \|", m.group(0), re.M)
    for name in names:
        if name not in rows:
            sys.exit("language.md's %s table lacks `%s`" % (kind, name))
    for row in rows:
        if row not in names:
            sys.exit("language.md's %s table has `%s`, which %s does not take" % (kind, row, kind))
    total += len(names)
print("ok: %d kinds, %d parameters" % (len(params), total))
