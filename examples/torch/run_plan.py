#!/usr/bin/env python3
"""run_plan.py -- run an OctoPipe plan with PyTorch's torch.distributed.pipelining.

Takes the plan as two files of the same plan (make both from one IR file, see README.md):
  PLAN.json  octo-opt PLAN.oir --report=json   (stages: layer ranges [first, end) and devices)
  PLAN.csv   octo-opt PLAN.oir --emit=torch-csv (the per-rank order of F, I, W, B actions)
builds a small stand-in model with one block per layer of the spec (Linear + tanh, the same
number of layers, so every stage holds the layers the plan gives it), and runs one training step
with torch's _PipelineScheduleRuntime on the plan's stage-to-rank placement and action order.
Every rank then compares the gradients of its stages with a non-pipelined run of the whole model
on the same batch and prints the largest difference.

  python3 run_plan.py PLAN.json PLAN.csv               CPU: one process per rank (gloo)
  torchrun --nproc-per-node=N run_plan.py PLAN.json PLAN.csv --device=cuda   GPUs (NCCL)
  python3 run_plan.py PLAN.json PLAN.csv --dry-run     check the two files, print the layout
  --timeout=S: seconds a message may wait (default 300), so that a schedule torch cannot pair
  fails instead of hanging.

The PipelineStage pitfall: a stage given its input and output shapes up front (static
PipelineStage, needed by torch 2.4, where shape inference does not exist) must get example
outputs with requires_grad=True. Otherwise torch allocates the receive buffers of the incoming
gradient as tensors that do not require grad, and the backward of the stage silently ignores the
gradient it received: the weights of every stage but the last get zero or partial gradients.
example_tensors() below does it right.

Needs torch >= 2.4 except for --dry-run (plain Python). Exit status 0 when the files agree and,
when run, every gradient matches (relative difference <= 1e-5); 1 otherwise."""
import argparse
import csv
import datetime
import json
import os
import re
import sys

ACTION = re.compile(r"^(\d+)(F|I|W|B)(\d+)$")
TOLERANCE = 1e-5   # largest accepted difference to the sequential gradients, relative to their max
WIDTH = 16         # stand-in model: features per layer
MB_SIZE = 2        # samples per microbatch


def fail(msg):
    sys.exit("run_plan.py: " + msg)


def read_plan(json_path, csv_path):
    """The plan of the two files: (stages, rows, microbatches, layers), where stages[s] is
    (first, end, device) and rows[r] the actions of rank r as (stage, kind, mb). Checks that the
    files describe the same plan: stages cover the layers in order, every stage's actions are on
    the row of its device, every (stage, microbatch) has one F and one B or one I and one W."""
    with open(json_path) as f:
        rep = json.load(f)
    layers, mbs = rep["layers"], rep["microbatches"]
    stages = [(s["first"], s["end"], s["device"]) for s in rep["stages"]]
    if not stages:
        fail("%s has no stages: make the report of a planned module" % json_path)
    end = 0
    for i, (first, last, dev) in enumerate(stages):
        if first != end or last <= first:
            fail("stage %d is [%d, %d), expected it to start at layer %d" % (i, first, last, end))
        if dev is None:
            fail("stage %d is not placed" % i)
        end = last
    if end != layers:
        fail("the stages cover %d of %d layers" % (end, layers))
    with open(csv_path, newline="") as f:
        rows = []
        for r, row in enumerate(csv.reader(f)):
            acts = []
            for cell in row:
                m = ACTION.match(cell.strip())
                if not m:
                    fail("%s row %d: %r is not an action like 3F0" % (csv_path, r, cell))
                acts.append((int(m.group(1)), m.group(2), int(m.group(3))))
            rows.append(acts)
    seen = {}
    for r, acts in enumerate(rows):
        for s, kind, mb in acts:
            if s >= len(stages) or mb >= mbs:
                fail("rank %d: action %d%s%d is outside the plan's %d stages and %d microbatches"
                     % (r, s, kind, mb, len(stages), mbs))
            if stages[s][2] != r:
                fail("%d%s%d is on rank %d but the JSON places stage %d on $d%d: the CSV and the "
                     "JSON come from different plans (make both from one IR file)"
                     % (s, kind, mb, r, s, stages[s][2]))
            seen[(s, kind, mb)] = seen.get((s, kind, mb), 0) + 1
    for s in range(len(stages)):
        for mb in range(mbs):
            f, b = seen.get((s, "F", mb), 0), seen.get((s, "B", mb), 0)
            i, w = seen.get((s, "I", mb), 0), seen.get((s, "W", mb), 0)
            if f != 1 or not ((b == 1 and i == w == 0) or (b == 0 and i == w == 1)):
                fail("stage %d microbatch %d: %d F, %d B, %d I, %d W" % (s, mb, f, b, i, w))
    return stages, rows, mbs, layers


def example_tensors(torch, device, first):
    """Example input and output of a stage (every block maps WIDTH features to WIDTH); first:
    the stage takes the batch itself. The outputs require grad, and so do the inputs of every
    stage but the first: see the pitfall in the module comment."""
    x = torch.zeros(MB_SIZE, WIDTH, device=device, requires_grad=not first)
    y = torch.zeros(MB_SIZE, WIDTH, device=device, requires_grad=True)
    return x, y


def build_model(torch, layers):
    """The stand-in model: one Linear + tanh block per layer of the spec, seeded alike on every
    rank so that every rank holds the same weights."""
    torch.manual_seed(1234)
    blocks = []
    for _ in range(layers):
        blocks.append(torch.nn.Sequential(torch.nn.Linear(WIDTH, WIDTH), torch.nn.Tanh()))
    return torch.nn.ModuleList(blocks)


def run_rank(rank, world, args, stages, rows, mbs, layers):
    """One rank: its stages as PipelineStages, one step of the plan's schedule, gradients
    compared with the sequential run. Returns the largest relative difference."""
    import torch
    import torch.distributed as dist
    from torch.distributed.pipelining import PipelineStage
    from torch.distributed.pipelining.schedules import _PipelineScheduleRuntime

    device = torch.device("cuda", rank % torch.cuda.device_count()) \
        if args.device == "cuda" else torch.device("cpu")
    if args.device == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if args.device == "cuda" else "gloo", rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=args.timeout))
    model = build_model(torch, layers).to(device)
    torch.manual_seed(99)
    batch = torch.randn(MB_SIZE * mbs, WIDTH, device=device)
    target = torch.randn(MB_SIZE * mbs, WIDTH, device=device)
    loss_fn = torch.nn.MSELoss()

    # the reference: the whole model, every microbatch, mean of the microbatch losses
    ref = build_model(torch, layers).to(device)
    total = 0
    for mb in range(mbs):
        h = batch[mb * MB_SIZE:(mb + 1) * MB_SIZE]
        for blk in ref:
            h = blk(h)
        total = total + loss_fn(h, target[mb * MB_SIZE:(mb + 1) * MB_SIZE])
    (total / mbs).backward()

    mine = [s for s, st in enumerate(stages) if st[2] == rank]
    pstages = []
    for s in mine:
        first, end, _ = stages[s]
        sub = torch.nn.Sequential(*[model[i] for i in range(first, end)])
        x, y = example_tensors(torch, device, s == 0)
        pstages.append(PipelineStage(sub, s, len(stages), device, input_args=(x,),
                                     output_args=(y,)))
    sched = _PipelineScheduleRuntime(pstages, mbs, loss_fn=loss_fn)
    sched._load_csv(args.csv, format="compute_only")
    has_first = any(stages[s][0] == 0 for s in mine)
    has_last = any(stages[s][1] == layers for s in mine)
    if has_first and has_last:
        sched.step(batch, target=target)
    elif has_first:
        sched.step(batch)
    elif has_last:
        sched.step(target=target)
    else:
        sched.step()

    worst = 0.0
    for s in mine:
        first, end, _ = stages[s]
        for i in range(first, end):
            for p, q in zip(model[i].parameters(), ref[i].parameters()):
                if p.grad is None:
                    print("rank %d: layer %d has no gradient" % (rank, i))
                    worst = float("inf")
                    continue
                scale = max(q.grad.abs().max().item(), 1e-30)
                worst = max(worst, (p.grad - q.grad).abs().max().item() / scale)
    print("rank %d: stages %s, largest gradient difference %.2e" %
          (rank, " ".join(str(s) for s in mine), worst), flush=True)
    dist.destroy_process_group()
    return worst


def spawned(rank, world, args, plan, port):
    """Entry of a process started by main (CPU, gloo)."""
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    worst = run_rank(rank, world, args, *plan)
    if not worst <= TOLERANCE:
        sys.exit(1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("json", help="octo-opt PLAN.oir --report=json")
    ap.add_argument("csv", help="octo-opt PLAN.oir --emit=torch-csv")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--timeout", type=float, default=300,
                    help="seconds a message may wait before the run fails (default 300): a "
                    "plan torch cannot pair ends with an error instead of hanging")
    ap.add_argument("--dry-run", action="store_true",
                    help="check the files and print the layout; torch is not needed")
    args = ap.parse_args()
    plan = read_plan(args.json, args.csv)
    stages, rows, mbs, layers = plan
    print("plan: %d layers, %d stages on %d ranks, %d microbatches"
          % (layers, len(stages), len(rows), mbs))
    for r, acts in enumerate(rows):
        mine = [s for s, st in enumerate(stages) if st[2] == r]
        print("  rank %d: %s; %d actions" % (r, ", ".join(
            "stage %d layers [%d, %d)" % (s, stages[s][0], stages[s][1]) for s in mine),
            len(acts)))
    if args.dry_run:
        return 0
    try:
        import torch
    except ImportError:
        fail("this Python (%s) has no torch: install torch 2.4 or later, or use --dry-run"
             % sys.executable)
    version = tuple(int(x) for x in re.findall(r"\d+", torch.__version__)[:2])
    if version < (2, 4):
        fail("torch %s has no torch.distributed.pipelining runtime: 2.4 or later is needed"
             % torch.__version__)
    if "RANK" in os.environ:  # started by torchrun
        worst = run_rank(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), args, *plan)
        return 0 if worst <= TOLERANCE else 1
    import socket
    import torch.multiprocessing as mp
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    try:
        mp.spawn(spawned, args=(len(rows), args, plan, port), nprocs=len(rows), join=True)
    except mp.ProcessRaisedException as e:
        print(e)
        return 1
    except mp.ProcessExitedException:
        return 1
    print("gradients match the sequential run (relative difference <= %g)" % TOLERANCE)
    return 0


if __name__ == "__main__":
    sys.exit(main())
