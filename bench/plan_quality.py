#!/usr/bin/env python3
"""plan_quality.py -- how good are OctoPipe's plans? Runs `octoc SPEC --compare --report=json`
over every example and over generated heterogeneous models (huge vocabulary, hybrid
Mamba/attention/MLP, dense-then-MoE, a vision encoder in front of an LLM, long sequences) at
pipeline sizes 4, 8 and 16 and microbatch counts p, 2p, 4p and 8p, and prints one table: per
case, each classic plan's step time, octoc's plan's step time and its speedups over interleaved
1F1B and over the best classic plan, bubble ratios, peak memory, the plan-independent lower bound
and the distance from it, and the compile time. Ends with the geometric means and the targets.

Usage: bench/plan_quality.py BUILD_DIR [--quick] [--ample] [--evals N] [--cases REGEX] [--json OUT]
  --quick   p in {4, 8}, m in {p, 4p} only
  --ample   ample memory: the generated cases run on H100s with 1 TiB each (the limit target)
  --evals   plans the tuner may simulate per case (octoc --evals; default: octoc's own, a
            search that converges)
Speedups are over plans that fit in memory; a classic plan marked '!' does not fit.
It prints figures; it fails only when octoc fails."""
import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLUSTERS = os.path.join(ROOT, "examples", "clusters", "h100.octo")


def cluster_for(p):
    """An H100 cluster with room for p pipeline devices (data parallelism fills the rest)."""
    if p <= 8:
        return "dgx_h100", 8 // p
    return ("dgx_h100_x2", 1) if p <= 16 else ("dgx_h100_x4", 1)


# With --ample: H100s with 1 TiB of memory, so that memory never decides the plan.
AMPLE = """
device h100_ample { peak = 989 TFLOPS, mem = 1 TiB, hbm = 3.35 TB/s, efficiency = 0.45 }
cluster ample_x1 { nodes = 1, gpus_per_node = 8, gpu = h100_ample
                   intra = link { bw = 450 GB/s, lat = 3 us } }
cluster ample_x2 { nodes = 2, gpus_per_node = 8, gpu = h100_ample
                   intra = link { bw = 450 GB/s, lat = 3 us }
                   inter = link { bw = 400 Gb/s, lat = 10 us } }
"""


# Generated models: name -> model body (the train block is added per case).
MODELS = {
    # A Gemma-2-like model: 256K vocabulary; the LM head weighs about 7 decoder layers.
    "huge_vocab": """
model huge_vocab {
  hidden = 2304  heads = 8  kv_heads = 4  head_dim = 256  ffn = 9216  vocab = 256000  seq = 4096
  layer embed : embedding
  repeat 26 { layer attn : attention
              layer mlp : mlp }
  layer head : lm_head
}""",
    # A Nemotron-H-like hybrid: Mamba-2, attention and MLP layers of very different cost.
    "hybrid": """
model hybrid {
  hidden = 4096  heads = 32  kv_heads = 8  ffn = 21504  gated = false  act = relu2
  vocab = 131072  seq = 8192
  layer embed : embedding
  pattern "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-" {
    M = mamba2 { heads = 128, head_dim = 64 }
    * = attention
    - = mlp
  }
  layer head : lm_head
}""",
    # Dense layers first, then MoE layers (DeepSeek-style), at a size that fits 80 GB GPUs.
    "dense_then_moe": """
model dense_then_moe {
  hidden = 2048  heads = 16  ffn = 10944  experts = 64  top_k = 6  shared_experts = 2
  expert_ffn = 1408  vocab = 102400  seq = 4096
  layer embed : embedding
  repeat 3 { layer attn : attention
             layer mlp : mlp }
  repeat 21 { layer attn : attention
              layer moe : moe }
  layer head : lm_head
}""",
    # A CLIP ViT-L encoder in front of a 7B language model (LLaVA-style).
    "vision_llm": """
model vision_llm {
  hidden = 4096  heads = 32  ffn = 11008  vocab = 32000  seq = 4096
  repeat 24 { layer vision : vit { hidden = 1024, heads = 16, ffn = 4096 } }
  layer projector : mlp { hidden = 4096, ffn = 4096, gated = false, act = gelu, seq = 576 }
  layer embed : embedding
  repeat 32 { layer attn : attention
              layer mlp : mlp }
  layer head : lm_head
}""",
}
for seq in (1024, 8192, 32768):
    MODELS["long_seq_%dk" % (seq // 1024)] = """
model long_seq_%dk {
  hidden = 4096  heads = 32  kv_heads = 8  ffn = 14336  vocab = 128256  seq = %d
  layer embed : embedding
  repeat 32 { layer attn : attention
              layer mlp : mlp }
  layer head : lm_head
}""" % (seq // 1024, seq)


def gen_specs(outdir, quick, ample):
    """Write the generated specs; returns [(case name, path)]."""
    cases = []
    ps = (4, 8) if quick else (4, 8, 16)
    for name, body in MODELS.items():
        for p in ps:
            for f in ((1, 4) if quick else (1, 2, 4, 8)):
                m = f * p
                cluster, data = cluster_for(p)
                limit = "mem_limit = 72 GiB, "
                if ample:
                    cluster = {"dgx_h100": "ample_x1", "dgx_h100_x2": "ample_x2"}[cluster]
                    limit = ""
                spec = 'import "%s"\n%s%s\ntrain { cluster = %s, pipeline = %d, data = %d, ' \
                       'microbatches = %d, %srecompute = selective }\n' % (
                           CLUSTERS, AMPLE if ample else "", body, cluster, p, data, m, limit)
                path = os.path.join(outdir, "%s_p%d_m%d.octo" % (name, p, m))
                with open(path, "w") as fh:
                    fh.write(spec)
                cases.append(("%s p=%d m=%d" % (name, p, m), path))
    return cases


def run_case(octoc, path, budget):
    """octoc --compare --report=json on one spec: (report, seconds)."""
    t0 = time.perf_counter()
    effort = [] if budget is None else ["--evals=%d" % budget]
    out = subprocess.run([octoc, path, "--compare", "--report=json"] + effort,
                         capture_output=True, text=True)
    dt = time.perf_counter() - t0
    if out.returncode != 0:
        sys.exit("octoc failed on %s:\n%s" % (path, out.stderr))
    return json.loads(out.stdout), dt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--ample", action="store_true")
    ap.add_argument("--cases", default=None)
    ap.add_argument("--evals", type=int, default=None)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    octoc = os.path.join(a.build, "tools", "octoc")
    tmp = tempfile.mkdtemp(prefix="plan_quality.")
    cases = [("example " + os.path.basename(f)[:-5], os.path.join(ROOT, "examples", f))
             for f in sorted(os.listdir(os.path.join(ROOT, "examples"))) if f.endswith(".octo")]
    gen = gen_specs(tmp, a.quick, a.ample)
    cases += gen
    if a.cases:
        cases = [c for c in cases if re.search(a.cases, c[0])]
    names = ["S-1F1B", "balanced 1F1B", "I-1F1B v=2", "ZB-H1", "ZB-V", "adaptive"]
    head = "%-30s" % "case" + "".join("%12s" % n[:12] for n in names) + \
        "%12s %8s %8s %8s %8s %9s %8s %6s" % ("octoc ms", "vs I1F1B", "vs best", "bubble",
                                                "peak GiB", "bound ms", "to bound", "sec")
    print(head)
    print("-" * len(head))
    rows = []
    for label, path in cases:
        r, dt = run_case(octoc, path, a.evals)
        if r.get("tuner"):
            dt = r["tuner"]["seconds"]
        base = {b["name"]: b for b in r.get("baselines", [])}
        cells = []
        for n in names:
            b = base.get(n)
            cells.append("%12s" % ("%.1f%s" % (b["makespan_ms"], "" if not b["oom"] else "!")
                                   if b and b["ok"] else "n/a"))
        ms = r["makespan_ms"]
        ok = [b for b in base.values() if b["ok"] and not b["oom"]]
        best = min((b["makespan_ms"] for b in ok), default=None)
        inter = [b for b in base.values()
                 if b["ok"] and not b["oom"] and b["name"].startswith("I-1F1B")]
        i1 = min((b["makespan_ms"] for b in inter), default=None)
        limit = r.get("bound_ms") or r.get("lower_bound_ms")
        peak = r["peak_mem_bytes"] / 2 ** 30
        row = {"case": label, "ms": ms, "best_classic": best, "i1f1b": i1, "limit": limit,
               "bubble": r["bubble_ratio"], "seconds": dt, "generated": path.startswith(tmp),
               "fits": not r["oom"], "microbatches": r["microbatches"], "devices": r["devices"]}
        rows.append(row)
        print("%-30s" % label[:30] + "".join(cells) +
              "%12.1f %8s %8s %7.1f%% %8.1f %9.1f %7.1f%% %6.2f" % (
                  ms, "%.2fx" % (i1 / ms) if i1 else "n/a", "%.2fx" % (best / ms) if best else "n/a",
                  100 * r["bubble_ratio"], peak, limit or 0,
                  100 * (ms / limit - 1) if limit else 0, dt))
    het = [x for x in rows if x["generated"]]

    def gmean(v):
        v = [x for x in v if x]
        return math.exp(sum(math.log(x) for x in v) / len(v)) if v else float("nan")
    print()
    print("generated heterogeneous cases: %d" % len(het))
    g_i1 = gmean([x["i1f1b"] / x["ms"] for x in het if x["i1f1b"]])
    g_best = gmean([x["best_classic"] / x["ms"] for x in het if x["best_classic"]])
    print("  geometric-mean speedup over interleaved 1F1B: %.3fx (target 1.4x)" % g_i1)
    print("  geometric-mean speedup over the best classic plan: %.3fx (target 1.15x)" % g_best)
    ample = [x for x in het if x["microbatches"] >= 4 * x["devices"] and x["limit"]]
    within = [x for x in ample if x["ms"] <= 1.05 * x["limit"]]
    print("  m >= 4p: %d of %d within 5%% of the lower bound" % (len(within), len(ample)))
    print("  all plans fit in memory: %s" % all(x["fits"] for x in rows))
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(rows, fh, indent=1)


main()
