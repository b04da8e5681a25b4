#!/usr/bin/env python3
"""run_plan.py -- run an OctoPipe plan with PyTorch's torch.distributed.pipelining.

Takes the plan as two files of the same plan (make both from one IR file, see README.md):
  PLAN.json  octo-opt PLAN.oir --report=json   (stages: layer ranges [first, end) and devices)
  PLAN.csv   octo-opt PLAN.oir --emit=torch-csv (the per-rank order of F, I, W, B actions)
builds a small stand-in model with one block per layer of the spec (Linear + tanh, the same
number of layers, so every stage holds the layers the plan gives it), and runs one training step
with torch's _PipelineScheduleRuntime on the plan's stage-to-rank placement and action order.
A data-parallel plan (the JSON's "data" D > 1) runs D replicas of the pipeline, each on its own
share of the batch, and all-reduces the gradients over the replicas; the layers the plan
recomputes (the JSON stages' "recompute_layers") run under torch.utils.checkpoint, and the stages
that offload their activations (the JSON stages' "offload") keep what autograd saves for the
backward in host memory (torch.autograd.graph.saved_tensors_hooks). Every process
then compares the gradients of its stages with a non-pipelined run of the whole model on the
whole batch and prints the largest difference.

  python3 run_plan.py PLAN.json PLAN.csv               CPU: a process per rank and replica (gloo)
  torchrun --nproc-per-node=N run_plan.py PLAN.json PLAN.csv --device=cuda   GPUs (NCCL)
         N = pipeline ranks (the CSV's rows) x replicas (the JSON's "data"); process
         replica x ranks + rank runs that rank of that replica (octo-run's numbering)
  python3 run_plan.py PLAN.json PLAN.csv --dry-run     check the two files, print the layout
  --timeout=S: seconds a message may wait (default 300), so that a schedule torch cannot pair
  fails instead of hanging.

The PipelineStage pitfall: a stage given its input and output shapes up front (static
PipelineStage, needed by torch 2.4, where shape inference does not exist) must get example
outputs with requires_grad=True. Otherwise torch allocates the receive buffers of the incoming
gradient as tensors that do not require grad, and the backward of the stage silently ignores the
gradient it received: the weights of every stage but the last get zero or partial gradients.
example_tensors() below does it right.

Needs torch >= 2.4 except for --dry-run and the checks of the files and of torchrun's process
count, which come first (plain Python). Exit status 0 when the files agree and, when run, every
gradient matches (relative difference <= 1e-5); 1 otherwise."""
import argparse
import collections
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


# The plan of the two files. stages[s]: (first, end, device); rows[r]: the actions of pipeline
# rank r as (stage, kind, mb); mbs: microbatches per replica; layers: layer count; data: replicas
# of the pipeline; recompute: the module's policy ("none", "selective", "full"); rc_layers[s]:
# the layers of stage s the plan recomputes (a set).
Plan = collections.namedtuple("Plan", "stages rows mbs layers data recompute rc_layers offload")


def fail(msg):
    sys.exit("run_plan.py: " + msg)


def read_plan(json_path, csv_path):
    """The Plan of the two files. Checks that they describe the same plan: stages cover the
    layers in order, every stage's actions are on the row of its device, every (stage,
    microbatch) has one F and one B or one I and one W; and that the JSON says how many replicas
    and which recomputation (a JSON of an older octo-opt, without them, is refused)."""
    with open(json_path) as f:
        rep = json.load(f)
    layers, mbs = rep["layers"], rep["microbatches"]
    missing = [k for k in ("data", "recompute") if k not in rep] + \
        [k for k in ("recompute_layers", "offload") if any(k not in s for s in rep["stages"])]
    if missing:
        fail("%s has no %s: write it with this octo-opt (octo-opt PLAN.oir --report=json)"
             % (json_path, ", ".join('"%s"' % k for k in missing)))
    data, recompute = rep["data"], rep["recompute"]
    if not isinstance(data, int) or data < 1:
        fail("%s: \"data\" is %r, expected a replica count >= 1" % (json_path, data))
    stages = [(s["first"], s["end"], s["device"]) for s in rep["stages"]]
    rc_layers = [set(s["recompute_layers"]) for s in rep["stages"]]
    offload = [s["offload"] is True for s in rep["stages"]]
    if not stages:
        fail("%s has no stages: make the report of a planned module" % json_path)
    end = 0
    for i, (first, last, dev) in enumerate(stages):
        if first != end or last <= first:
            fail("stage %d is [%d, %d), expected it to start at layer %d" % (i, first, last, end))
        if dev is None:
            fail("stage %d is not placed" % i)
        if not all(first <= li < last for li in rc_layers[i]):
            fail("stage %d [%d, %d) recomputes layers %s outside it"
                 % (i, first, last, sorted(rc_layers[i])))
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
    return Plan(stages, rows, mbs, layers, data, recompute, rc_layers, offload)


def replicas(n):
    """"1 replica", "2 replicas"."""
    return "%d replica%s" % (n, "" if n == 1 else "s")


def processes(plan):
    """The process count the plan runs on: pipeline ranks x data-parallel replicas."""
    return len(plan.rows) * plan.data


def check_world(plan, world, argv):
    """None when world (torchrun's WORLD_SIZE) is the plan's process count, else the error to
    print: both counts and the torchrun command line that starts the right number. argv: the
    script's arguments, repeated in that command."""
    need = processes(plan)
    if world == need:
        return None
    return ("started with %d processes (torchrun's WORLD_SIZE), but the plan needs %d = %d "
            "pipeline ranks (the CSV's rows) x %s (the JSON's data-parallel \"data\"); run: "
            "torchrun --nproc-per-node=%d %s"
            % (world, need, len(plan.rows), replicas(plan.data), need, " ".join(argv)))


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


def offloaded(torch, stage):
    """Wraps a stage's module so that what autograd saves in its forward for the backward goes to
    host memory (pinned on CUDA) and comes back when the backward needs it, as an offloading
    stage's activations do; counts the tensors sent (moved) and brought back (loaded)."""

    class Offloaded(torch.nn.Module):
        """A stage whose saved tensors live in host memory between its forward and backward."""

        def __init__(self, inner):
            super().__init__()
            self.inner = inner   # the stage's module
            self.moved = 0       # saved tensors sent to host memory
            self.loaded = 0      # and brought back for the backward

        def pack(self, t):
            self.moved += 1
            host = torch.empty(t.size(), dtype=t.dtype, layout=t.layout,
                               pin_memory=t.device.type == "cuda")
            host.copy_(t)
            return (t.device, host)

        def unpack(self, packed):
            self.loaded += 1
            device, host = packed
            return host.to(device, non_blocking=True)

        def forward(self, x):
            with torch.autograd.graph.saved_tensors_hooks(self.pack, self.unpack):
                return self.inner(x)

    return Offloaded(stage)


def checkpoint_layers(torch, model, plan, layers):
    """Puts the given layers of model under activation checkpointing, as the plan recomputes
    them: with the module's recompute "selective" only each block's core (the tanh: in a real
    model the attention core that Megatron's selective recomputation runs again), else ("full",
    of the module or of the stage) the whole block, which then keeps only its input from F to
    the backward and runs its forward again there. The weights stay the same objects. Returns
    the Checkpointed wrappers; each counts the runs of its part (runs - forwards: how many times
    the backward ran it again)."""
    from torch.utils.checkpoint import checkpoint

    class Checkpointed(torch.nn.Module):
        """A module run under torch.utils.checkpoint (non-reentrant)."""

        def __init__(self, inner):
            super().__init__()
            self.inner = inner   # the checkpointed module
            self.forwards = 0    # forward calls
            self.runs = 0        # runs of inner: forwards plus recomputations

        def run(self, x):
            self.runs += 1
            return self.inner(x)

        def forward(self, x):
            self.forwards += 1
            return checkpoint(self.run, x, use_reentrant=False)

    wrapped = []
    for i in sorted(layers):
        if plan.recompute == "selective":
            model[i][1] = Checkpointed(model[i][1])
            wrapped.append(model[i][1])
        else:
            model[i] = Checkpointed(model[i])
            wrapped.append(model[i])
    return wrapped


def run_rank(rank, args, plan):
    """One process (rank: its global rank, replica x pipeline ranks + pipeline rank): the
    stages of its pipeline rank as PipelineStages, one step of the plan's schedule on its
    replica's share of the batch, the gradients all-reduced over the replicas, then compared
    with the sequential run of the whole batch. Returns the largest relative difference (inf
    when a gradient is missing or a recomputed layer was not run again)."""
    import torch
    import torch.distributed as dist
    from torch.distributed.pipelining import PipelineStage
    from torch.distributed.pipelining.schedules import _PipelineScheduleRuntime

    stages, mbs, layers, data = plan.stages, plan.mbs, plan.layers, plan.data
    ranks = len(plan.rows)
    replica, prank = divmod(rank, ranks)
    device = torch.device("cuda", rank % torch.cuda.device_count()) \
        if args.device == "cuda" else torch.device("cpu")
    if args.device == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if args.device == "cuda" else "gloo", rank=rank,
                            world_size=processes(plan),
                            timeout=datetime.timedelta(seconds=args.timeout))
    # one pipeline group per replica, one data-parallel group per pipeline rank (every process
    # creates every group, in the same order, as new_group requires)
    pp_group, dp_group = None, None
    if data > 1:
        for q in range(data):
            g = dist.new_group(list(range(q * ranks, (q + 1) * ranks)))
            pp_group = g if q == replica else pp_group
        for r in range(ranks):
            g = dist.new_group(list(range(r, ranks * data, ranks)))
            dp_group = g if r == prank else dp_group
    model = build_model(torch, layers).to(device)
    torch.manual_seed(99)
    batch = torch.randn(MB_SIZE * mbs * data, WIDTH, device=device)
    target = torch.randn(MB_SIZE * mbs * data, WIDTH, device=device)
    share = slice(replica * MB_SIZE * mbs, (replica + 1) * MB_SIZE * mbs)
    loss_fn = torch.nn.MSELoss()

    # the reference: the whole model, every microbatch of every replica, mean of their losses
    ref = build_model(torch, layers).to(device)
    total = 0
    for mb in range(mbs * data):
        h = batch[mb * MB_SIZE:(mb + 1) * MB_SIZE]
        for blk in ref:
            h = blk(h)
        total = total + loss_fn(h, target[mb * MB_SIZE:(mb + 1) * MB_SIZE])
    (total / (mbs * data)).backward()

    mine = [s for s, st in enumerate(stages) if st[2] == prank]
    rc = set().union(*(plan.rc_layers[s] for s in mine))
    wrapped = checkpoint_layers(torch, model, plan, rc)
    moving = []   # the Offloaded stages
    pstages = []
    for s in mine:
        first, end, _ = stages[s]
        sub = torch.nn.Sequential(*[model[i] for i in range(first, end)])
        if plan.offload[s]:
            sub = offloaded(torch, sub)
            moving.append(sub)
        x, y = example_tensors(torch, device, s == 0)
        pstages.append(PipelineStage(sub, s, len(stages), device, input_args=(x,),
                                     output_args=(y,), group=pp_group))
    sched = _PipelineScheduleRuntime(pstages, mbs, loss_fn=loss_fn)
    sched._load_csv(args.csv, format="compute_only")
    has_first = any(stages[s][0] == 0 for s in mine)
    has_last = any(stages[s][1] == layers for s in mine)
    if has_first and has_last:
        sched.step(batch[share], target=target[share])
    elif has_first:
        sched.step(batch[share])
    elif has_last:
        sched.step(target=target[share])
    else:
        sched.step()

    params = [p for s in mine for i in range(stages[s][0], stages[s][1])
              for p in model[i].parameters()]
    if dp_group is not None:   # the mean over the replicas of their mean gradients
        for p in params:
            if p.grad is not None:
                dist.all_reduce(p.grad, group=dp_group)
                p.grad /= data
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
    for st in moving:
        if st.moved == 0 or st.loaded < st.moved:
            print("rank %d: an offloading stage sent %d saved tensors to host memory and brought "
                  "%d back" % (rank, st.moved, st.loaded))
            worst = float("inf")
    again = sum(w.runs - w.forwards for w in wrapped)
    if again < len(wrapped) * mbs:
        print("rank %d: %d recomputations of %d checkpointed layers x %d microbatches"
              % (rank, again, len(wrapped), mbs))
        worst = float("inf")
    who = "rank %d" % prank if data == 1 else "rank %d replica %d" % (prank, replica)
    print("%s: stages %s, %d layers recomputed (%d forwards again), %d tensors offloaded, "
          "largest gradient difference %.2e" % (who, " ".join(str(s) for s in mine), len(wrapped),
                                                again, sum(st.moved for st in moving), worst),
          flush=True)
    dist.destroy_process_group()
    return worst


def spawned(rank, args, plan, port):
    """Entry of a process started by main (CPU, gloo)."""
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    worst = run_rank(rank, args, plan)
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
    print("plan: %d layers, %d stages on %d ranks, %d microbatches; %s: %d processes; "
          "recompute %s" % (plan.layers, len(plan.stages), len(plan.rows), plan.mbs,
                            replicas(plan.data), processes(plan), plan.recompute))
    for r, acts in enumerate(plan.rows):
        mine = [s for s, st in enumerate(plan.stages) if st[2] == r]
        print("  rank %d: %s; %d actions" % (r, ", ".join(
            "stage %d layers [%d, %d)" % (s, plan.stages[s][0], plan.stages[s][1]) +
            (" recomputes %s" % ",".join(str(i) for i in sorted(plan.rc_layers[s]))
             if plan.rc_layers[s] else "") + (" offloads" if plan.offload[s] else "")
            for s in mine), len(acts)))
    torchrun = "RANK" in os.environ and "WORLD_SIZE" in os.environ
    if torchrun:   # before torch is imported: a wrong count fails here, not in torch
        err = check_world(plan, int(os.environ["WORLD_SIZE"]), sys.argv)
        if err:
            fail(err)
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
    if torchrun:
        worst = run_rank(int(os.environ["RANK"]), args, plan)
        return 0 if worst <= TOLERANCE else 1
    import socket
    import torch.multiprocessing as mp
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    try:
        mp.spawn(spawned, args=(args, plan, port), nprocs=processes(plan), join=True)
    except mp.ProcessRaisedException as e:
        print(e)
        return 1
    except mp.ProcessExitedException:
        return 1
    print("gradients match the sequential run (relative difference <= %g)" % TOLERANCE)
    return 0


if __name__ == "__main__":
    sys.exit(main())
