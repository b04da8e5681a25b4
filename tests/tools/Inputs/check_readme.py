"""check_readme.py ROOT HELP_TEXT -- checks README.md against the tree and octoc's --help (saved
in HELP_TEXT): the layout table lists every top-level folder of the source tree, its tools row
names every tool of tools/*.c (a file with a main), the Tools table has a row per tool, every docs/*.md is linked,
every path under examples/ and every build/tools/ program in the shell blocks exists, every
octoc option and --emit kind used there is one octoc's --help lists, every mpirun line can run
as root on fewer cores than ranks, and no line promises work for "later". Prints "README ok: ..."
or the first mismatch. (Not a test: lit skips Inputs/.)"""
import glob
import os
import re
import sys

root, help_text = sys.argv[1], open(sys.argv[2]).read()
readme = open(os.path.join(root, "README.md")).read()


def fail(msg):
    sys.exit("check_readme: " + msg)


layout = readme[readme.index("## Layout"):]
layout = layout[:layout.index("\n## ", 5)]
folders = sorted(d for d in os.listdir(root)
                 if os.path.isdir(os.path.join(root, d)) and not d.startswith(".")
                 and not d.startswith("build") and glob.glob(os.path.join(root, d, "*")))
for d in folders:
    if "| `%s/` |" % d not in layout:
        fail("the layout table lacks `%s/`" % d)
tools = sorted(os.path.basename(p)[:-2] for p in glob.glob(os.path.join(root, "tools", "*.c"))
               if "int main(" in open(p).read())  # cli.c is the tools' shared code, no tool
tools_row = next(l for l in layout.splitlines() if l.startswith("| `tools/`"))
tools_table = readme[readme.index("## Tools"):readme.index("## Layout")]
for t in tools:
    if "`%s`" % t not in tools_row:
        fail("the layout table's tools row lacks `%s`" % t)
    if not re.search(r"^\| `%s[ `]" % re.escape(t), tools_table, re.M):
        fail("the Tools table has no row for %s" % t)
for doc in sorted(glob.glob(os.path.join(root, "docs", "*.md"))):
    if "(docs/%s)" % os.path.basename(doc) not in readme:
        fail("docs/%s is not linked" % os.path.basename(doc))
kinds = set(re.findall(r"^  ([a-z-]+) +\S", help_text[help_text.index("artifacts"):], re.M))
options = set(re.findall(r"(--[a-z-]+)", help_text))
blocks = re.findall(r"```sh\n(.*?)```", readme, re.S)
commands = 0
for block in blocks:
    for line in block.splitlines():
        line = line.split("#")[0].strip()
        if not line:
            continue
        commands += 1
        for path in re.findall(r"(examples/[\w./-]+)", line):
            if not os.path.exists(os.path.join(root, path)):
                fail("%s does not exist (%s)" % (path, line))
        for prog in re.findall(r"build/tools/([\w-]+)", line):
            if prog not in tools:
                fail("build/tools/%s is no tool (%s)" % (prog, line))
        if "build/tools/octoc " in line:
            seg = line.split("build/tools/octoc ")[1].split("|")[0]
            for opt in re.findall(r"(?<![\w-])(--[a-z-]+)", seg):
                if opt not in options:
                    fail("octoc has no option %s (%s)" % (opt, line))
            for kind in re.findall(r"--emit=([a-z-]+)", seg):
                if kind not in kinds:
                    fail("octoc has no --emit=%s (%s)" % (kind, line))
        if line.startswith("mpirun") and not ("--allow-run-as-root" in line
                                              and "--oversubscribe" in line):
            fail("mpirun without --allow-run-as-root --oversubscribe fails as root or on fewer "
                 "cores than ranks: %s" % line)
for bad in ("(later)", "nothing needs it yet"):
    if bad in readme:
        fail("stale: %r" % bad)
print("README ok: %d folders, %d tools, %d docs, %d commands"
      % (len(folders), len(tools), len(glob.glob(os.path.join(root, "docs", "*.md"))), commands))
