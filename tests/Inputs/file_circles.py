"""file_circles.py -- the file circles of static libraries: for each library given, the graph of
its object files (a -> b when a uses a global symbol b defines) and its strongly connected
components of more than one file, printed as "LIB: a.c <-> b.c ..." with the symbols of each
edge. A table's references to its rows (the pass registry's run functions, pass_run_*; the
kernel table's rt_kernel_<KIND>) are the table's, not a circle, and are left out.
Usage: file_circles.py LIB.a... ; prints "no file circles" when there are none."""
import subprocess
import sys

TABLE_ROWS = ("pass_run_", "rt_kernel_")  # symbols a table names, defined by its rows


def members(lib):
    """{member: (defined, undefined)} of archive lib, from nm."""
    out = subprocess.run(["nm", lib], capture_output=True, text=True, check=True).stdout
    res, cur = {}, None
    for line in out.splitlines():
        if line.endswith(":") and not line.startswith(" "):
            cur = line[:-1].replace(".o", "")
            res[cur] = (set(), set())
            continue
        parts = line.split()
        if cur is None or not parts:
            continue
        if len(parts) == 3 and parts[1] in "TDBRCV":
            res[cur][0].add(parts[2])
        elif len(parts) == 2 and parts[0] == "U":
            res[cur][1].add(parts[1])
    return res


def circles(files):
    """Strongly connected components of more than one file, with their edges' symbols."""
    edges = {a: {} for a in files}
    for a, (_, und) in files.items():
        for b, (dfn, _) in files.items():
            used = sorted(s for s in und & dfn if not s.startswith(TABLE_ROWS))
            if a != b and used:
                edges[a][b] = used
    index, low, stack, on, comps = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))

    for v in sorted(files):
        if v not in index:
            visit(v)
    return [(c, {(a, b): edges[a][b] for a in c for b in edges[a] if b in c}) for c in comps]


def main():
    found = 0
    for lib in sys.argv[1:]:
        for comp, edges in circles(members(lib)):
            found += 1
            print("%s: %s" % (lib.split("/")[-1], " <-> ".join(comp)))
            for (a, b), used in sorted(edges.items()):
                print("  %s -> %s: %s" % (a, b, ", ".join(used[:4])))
    if not found:
        print("no file circles")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
