"""Check a torch.distributed.pipelining compute-only CSV the way torch's _load_csv reads it: one
row per rank, cells "<stage><F|I|W|B><microbatch>". Every (stage, microbatch) must have one F and
either one I and one W or one B (full backward); a stage's actions must all be on one rank.
Usage: check_torch_csv.py FILE STAGES MICROBATCHES. Prints "ok: R ranks, N actions"."""
import csv
import re
import sys

ACTION = re.compile(r"^(\d+)(F|I|W|B)(\d+)$")


def main():
    path, stages, mbs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    seen = {}
    rank_of = {}
    n = 0
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    for rank, row in enumerate(rows):
        for cell in row:
            m = ACTION.match(cell)
            if not m:
                sys.exit(f"rank {rank}: bad action {cell!r}")
            s, kind, mb = int(m.group(1)), m.group(2), int(m.group(3))
            if rank_of.setdefault(s, rank) != rank:
                sys.exit(f"stage {s} on ranks {rank_of[s]} and {rank}")
            key = (s, mb, kind)
            if key in seen:
                sys.exit(f"{cell} twice")
            seen[key] = True
            n += 1
    for s in range(stages):
        for mb in range(mbs):
            has = lambda k: (s, mb, k) in seen
            if not has("F"):
                sys.exit(f"{s}F{mb} missing")
            if has("B") == (has("I") or has("W")) or (has("I") != has("W")):
                sys.exit(f"stage {s} microbatch {mb}: need I and W, or B")
    print(f"ok: {len(rows)} ranks, {n} actions")


main()
