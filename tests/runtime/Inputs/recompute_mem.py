"""recompute_mem.py -- check octo-run's memory figures of stage recomputation
(tests/runtime/recompute.test).

  recompute_mem.py PLAIN.out RC.out
      two outputs of the same plan, without and with stage recomputation: the losses are equal,
      rank 1 holds less memory, and no rank holds more than 5% more (a recomputing stage's
      blocks are the model's own, beside the stream's buffers, and its second forward writes its
      output into scratch: a stage with one microbatch in flight saves nothing and may hold a
      little more).

  recompute_mem.py --predicted RC.out RANK...
      the output of a run of a plan made with a profile of the run's machine and scale, whose
      stages on the RANKs recompute: every rank's measured peak is within TOLERANCE of the plan's
      prediction, the RANKs' lines show the state rebuilt for recomputation, as part of the plan
      (only the workspace is named as not in it), and the other ranks' lines show none. The
      plan's peak counts that state from B until W (the simulator's rebuilt bytes); before it
      did, the recomputing ranks measured 21-35% above the prediction."""
import re
import sys

TOLERANCE = 0.05  # the workspace (not in the plan)


def figures(path):
    text = open(path).read()
    losses = re.findall(r"^step \d+: [0-9.]+ ms, loss ([0-9.]+)", text, re.M)
    mem = {int(r): float(x) for r, x in re.findall(r"^rank (\d+): .*memory ([0-9.]+) MiB", text, re.M)}
    return losses, mem


def compare(plain_path, rc_path):
    plain_loss, plain_mem = figures(plain_path)
    rc_loss, rc_mem = figures(rc_path)
    assert plain_loss and plain_loss == rc_loss, (plain_loss, rc_loss)
    assert sorted(plain_mem) == sorted(rc_mem) == [0, 1, 2, 3], (plain_mem, rc_mem)
    assert rc_mem[1] < plain_mem[1], (plain_mem, rc_mem)
    assert all(rc_mem[r] <= plain_mem[r] * 1.05 for r in rc_mem), (plain_mem, rc_mem)
    print("rank 1 memory %.2f MiB -> %.2f MiB" % (plain_mem[1], rc_mem[1]))


def predicted(path, recomputing):
    text = open(path).read()
    lines = re.findall(
        r"^memory: rank (\d+): measured ([0-9.]+) MiB, predicted ([0-9.]+) MiB "
        r"\([+-][0-9.]+%\) = the plan's peak [0-9.]+ MiB \+ message buffers [0-9.]+ MiB; "
        r"held: parameters, gradients and optimizer state [0-9.]+ MiB, the stream's buffers "
        r"[0-9.]+ MiB(?:, state rebuilt for recomputation ([0-9.]+) MiB)?, workspace "
        r"[0-9.]+ MiB \(not in the plan\)$", text, re.M)
    assert len(lines) == 4, (len(lines), text)
    worst = {}
    for r, measured, pred, rebuilt in lines:
        r, measured, pred = int(r), float(measured), float(pred)
        assert (r in recomputing) == bool(rebuilt and float(rebuilt) > 0), (r, rebuilt)
        rel = abs(measured - pred) / pred
        assert rel <= TOLERANCE, (r, measured, pred, rel)
        worst[r] = rel
    print("memory: recomputing ranks %s measured within %.1f%% of the plan's prediction, all "
          "ranks within %.1f%% (tolerance %.0f%%)"
          % (" ".join(str(r) for r in sorted(recomputing)),
             100 * max(worst[r] for r in recomputing), 100 * max(worst.values()),
             100 * TOLERANCE))


if sys.argv[1] == "--predicted":
    predicted(sys.argv[2], {int(r) for r in sys.argv[3:]})
else:
    compare(sys.argv[1], sys.argv[2])
