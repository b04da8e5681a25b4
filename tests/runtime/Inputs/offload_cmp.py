"""offload_cmp.py BASE OFFLOAD RANK... -- compare two octo-run reports of the same plan without
and with activation offload: every step's loss must be equal, and each named rank's measured
device memory ('memory: rank R: measured X MiB') lower with offload. Prints what it found; exits
non-zero when either fails. (Not a test: lit skips Inputs/.)"""
import re
import sys


def read(path):
    """The report's losses (in step order) and each rank's measured memory in MiB."""
    losses, mem = [], {}
    for line in open(path):
        m = re.match(r"step \d+: .* loss ([0-9.]+)", line)
        if m:
            losses.append(m.group(1))
        m = re.match(r"memory: rank (\d+): measured ([0-9.]+) MiB", line)
        if m:
            mem[int(m.group(1))] = float(m.group(2))
    return losses, mem


def main(argv):
    base_l, base_m = read(argv[1])
    off_l, off_m = read(argv[2])
    ok = bool(base_l) and base_l == off_l
    print("losses: %d steps %s" % (len(base_l), "equal" if ok else "DIFFER: %s vs %s" % (base_l, off_l)))
    for r in (int(x) for x in argv[3:]):
        lower = off_m[r] < base_m[r]
        ok = ok and lower
        print("rank %d: device memory %.2f MiB with offload %s %.2f MiB without" %
              (r, off_m[r], "<" if lower else "NOT <", base_m[r]))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
