"""recompute_mem.py -- compare two octo-run outputs of the same plan, without and with stage
recomputation (tests/runtime/recompute.test): the losses are equal, rank 1 holds less memory,
and no rank holds more than 5% more (a recomputing stage's blocks are the model's own, beside the
stream's buffers, and its second forward writes its output into scratch: a stage with one
microbatch in flight saves nothing and may hold a little more)."""
import re
import sys


def figures(path):
    text = open(path).read()
    losses = re.findall(r"^step \d+: [0-9.]+ ms, loss ([0-9.]+)", text, re.M)
    mem = {int(r): float(x) for r, x in re.findall(r"^rank (\d+): .*memory ([0-9.]+) MiB", text, re.M)}
    return losses, mem


plain_loss, plain_mem = figures(sys.argv[1])
rc_loss, rc_mem = figures(sys.argv[2])
assert plain_loss and plain_loss == rc_loss, (plain_loss, rc_loss)
assert sorted(plain_mem) == sorted(rc_mem) == [0, 1, 2, 3], (plain_mem, rc_mem)
assert rc_mem[1] < plain_mem[1], (plain_mem, rc_mem)
assert all(rc_mem[r] <= plain_mem[r] * 1.05 for r in rc_mem), (plain_mem, rc_mem)
print("rank 1 memory %.2f MiB -> %.2f MiB" % (plain_mem[1], rc_mem[1]))
