"""memory_plan.py -- check octo-run's memory lines on a plan made with a profile of the run's
machine and scale (tests/runtime/memory-plan.test): every rank laid out the stream's own buffer
arena, and its measured peak (the tracker's high-water mark) is the plan's prediction (the
simulator's peak plus the arena's message buffers) plus the workspace the plan does not count:
equal to 0.01 MiB (the printed precision), and within TOLERANCE of the prediction in all."""
import re
import sys

# the workspace: the model's scratch between layers, token ids. Its share depends on the plan,
# which comes from a timed profile and so from the machine's load: up to 3.2% was seen on a
# loaded 2-core machine (rank 0 at 3.24 MiB, 0.10 MiB of it workspace).
TOLERANCE = 0.05

text = open(sys.argv[1]).read()
ranks = int(sys.argv[2])
lines = re.findall(
    r"^memory: (?:replica \d+ )?rank (\d+): measured ([0-9.]+) MiB, predicted ([0-9.]+) MiB "
    r"\(([+-][0-9.]+)%\) = the plan's peak ([0-9.]+) MiB \+ message buffers ([0-9.]+) MiB; "
    r"held: parameters, gradients and optimizer state ([0-9.]+) MiB, the stream's buffers "
    r"([0-9.]+) MiB, workspace ([0-9.]+) MiB \(not in the plan\)", text, re.M)
assert len(lines) == ranks, (len(lines), text)
worst = 0.0
for r, measured, predicted, err, peak, msg, static, arena, work in lines:
    measured, predicted, work = float(measured), float(predicted), float(work)
    assert abs(float(peak) + float(msg) - predicted) <= 0.011, (r, peak, msg, predicted)
    assert abs(float(static) + float(arena) + work - measured) <= 0.011, (r, static, arena, work)
    assert abs(measured - work - predicted) <= 0.011, (r, measured, work, predicted)
    rel = abs(measured - predicted) / predicted
    assert rel <= TOLERANCE, (r, measured, predicted)
    worst = max(worst, rel)
print("memory: %d ranks, measured within %.1f%% of the plan's prediction (tolerance %.0f%%)"
      % (ranks, 100 * worst, 100 * TOLERANCE))
