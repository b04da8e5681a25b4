"""losses.py -- compare the losses of octo-run outputs, for the checkpoint tests.

    losses.py [--rtol=R] [--partial] REF OUT...

Reads the "step N: ... loss X" lines of REF (an uninterrupted run) and of the OUT files (the
runs that continued from checkpoints, in order), and checks that every step of the OUTs is one of
REF's and that together they cover REF's steps (with --partial: only the OUTs' steps, at least
one, as after a run that was killed). rtol 0 (the default) asks for the same printed
digits, bit-identical losses; otherwise |out - ref| <= R |ref|. Prints "N steps match" or each
difference, and exits 1 on any. (Not a test: lit skips Inputs/.)"""
import re
import sys

STEP = re.compile(r"^step (\d+): [0-9.]+ ms(?: \(predicted [0-9.]+ ms\))?, loss ([-+0-9.eEnaif]+)")


def losses(path):
    out = {}
    with open(path) as f:
        for line in f:
            m = STEP.match(line)
            if m:
                out[int(m.group(1))] = m.group(2)
    return out


def main(argv):
    rtol = 0.0
    partial = False
    args = []
    for a in argv:
        if a == "--partial":
            partial = True
        elif a.startswith("--rtol="):
            rtol = float(a[len("--rtol="):])
        else:
            args.append(a)
    if len(args) < 2:
        sys.exit("usage: losses.py [--rtol=R] REF OUT...")
    ref = losses(args[0])
    got = {}
    for path in args[1:]:
        got.update(losses(path))
    bad = 0
    for step in sorted(set(got) if partial else set(ref) | set(got)):
        r, g = ref.get(step), got.get(step)
        if r is None or g is None:
            print("step %d: %s in the reference, %s in the continued runs" %
                  (step, r or "absent", g or "absent"))
            bad += 1
        elif (rtol == 0 and r != g) or abs(float(g) - float(r)) > rtol * abs(float(r)):
            print("step %d: loss %s, the uninterrupted run's %s" % (step, g, r))
            bad += 1
    if not ref or not got:
        print("no step lines in %s" % (args[0] if not ref else " ".join(args[1:])))
        bad += 1
    if bad:
        sys.exit(1)
    print("%d steps match" % len(got if partial else ref))


if __name__ == "__main__":
    main(sys.argv[1:])
