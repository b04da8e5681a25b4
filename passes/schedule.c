/* schedule.c -- the schedule pass: schedule{method=gpipe|1f1b|interleaved-1f1b|zb-h1|zbv|adaptive}
 * writes the per-device order of F, B, W (or fused BW) operations of one training step. Each
 * classic method reproduces its published order exactly (GPipe, Megatron's 1F1B and interleaved
 * 1F1B, the ZB-H1 figure of Qi et al., PyTorch's ScheduleZBVZeroBubble) and refuses, with a located
 * error that says what would fit, the plans it was not designed for; adaptive (schedule_adaptive.c)
 * accepts any partition and placement. Every order is checked for completeness and freedom from
 * deadlock before the pass returns. See docs/schedules.md. */
#include <stdlib.h>

#include "schedule_impl.h"

/* ---- Shapes ----------------------------------------------------------------------------------*/

/* What a method's check says about a plan. */
typedef enum sched_verdict {
  SCHED_FITS,      /* the method accepts the plan */
  SCHED_BAD_SHAPE, /* the stages or their placement are not the method's */
  SCHED_BAD_COUNT, /* the placement fits but the number of microbatches does not */
} sched_verdict;

/* Device of stage s. */
static int sched_dev(const sched_shape *sh, int s) { return sh->m->stages[s].device; }

/* First stage whose device is not want(s), or -1 when every stage is where 'want' says. */
static int sched_misplaced(const sched_shape *sh, int (*want)(const sched_shape *, int)) {
  for (int s = 0; s < sh->S; s++)
    if (sched_dev(sh, s) != want(sh, s)) return s;
  return -1;
}

/* Placements: stage s on device s (sequential), s mod p (Megatron's loop), or the V of ZB-V. */
static int sched_want_seq(const sched_shape *sh, int s) { (void)sh; return s; }
static int sched_want_loop(const sched_shape *sh, int s) { return s % sh->p; }
static int sched_want_v(const sched_shape *sh, int s) {
  return s < sh->p ? s : 2 * sh->p - 1 - s;
}

/* gpipe, 1f1b, zb-h1: exactly one stage per device, stage i on device i.
 * Pre: why is empty. Post: on a refusal why holds the reason (without a remedy). */
static sched_verdict sched_check_seq(const sched_shape *sh, const char *name, strbuf *why) {
  if (sh->S != sh->p) {
    strbuf_printf(why, "%s needs one stage per device in order (stage i on device i); the module "
                  "has %d stage%s on %d device%s", name, sh->S, sh->S == 1 ? "" : "s", sh->p,
                  sh->p == 1 ? "" : "s");
    return SCHED_BAD_SHAPE;
  }
  int s = sched_misplaced(sh, sched_want_seq);
  if (s >= 0) {
    strbuf_printf(why, "%s needs one stage per device in order (stage i on device i); @s%d is on "
                  "$d%d", name, s, sched_dev(sh, s));
    return SCHED_BAD_SHAPE;
  }
  return SCHED_FITS;
}

/* interleaved-1f1b: v x p stages, v >= 2, stage s on device s mod p, microbatches a multiple of
 * p (Megatron's assertion). Pre/post as sched_check_seq. */
static sched_verdict sched_check_interleaved(const sched_shape *sh, const char *name,
                                             strbuf *why) {
  if (sh->S % sh->p != 0 || sh->S < 2 * sh->p) {
    strbuf_printf(why, "%s needs v x p stages with v >= 2 model chunks per device (stage s on "
                  "device s mod %d: partition{chunks=2},place{method=interleaved} makes them); "
                  "the module has %d stage%s on %d device%s", name, sh->p, sh->S,
                  sh->S == 1 ? "" : "s", sh->p, sh->p == 1 ? "" : "s");
    return SCHED_BAD_SHAPE;
  }
  int s = sched_misplaced(sh, sched_want_loop);
  if (s >= 0) {
    strbuf_printf(why, "%s needs Megatron's loop placement (stage s on device s mod %d); @s%d is "
                  "on $d%d, not $d%d", name, sh->p, s, sched_dev(sh, s), sched_want_loop(sh, s));
    return SCHED_BAD_SHAPE;
  }
  if (sh->mb % sh->p != 0) {
    int lo = sh->mb / sh->p * sh->p, hi = lo + sh->p;
    strbuf_printf(why, "%s needs microbatches to be a multiple of the pipeline size %d; %d is not ",
                  name, sh->p, sh->mb);
    if (lo > 0)
      strbuf_printf(why, "(%d or %d would do)", lo, hi);
    else
      strbuf_printf(why, "(%d would do)", hi);
    return SCHED_BAD_COUNT;
  }
  return SCHED_FITS;
}

/* zbv: exactly two stages per device in a V: stage s on device s for s < p, on 2p - 1 - s after.
 * Any number of microbatches (PyTorch pads to 2p - 1 and drops the extra ones); the bubble is zero
 * only from m >= 2p on. Pre/post as sched_check_seq. */
static sched_verdict sched_check_zbv(const sched_shape *sh, const char *name, strbuf *why) {
  if (sh->S != 2 * sh->p) {
    strbuf_printf(why, "%s needs exactly two stages per device in a V (2 x %d = %d stages: "
                  "partition{chunks=2},place{method=vshape} makes them); the module has %d", name,
                  sh->p, 2 * sh->p, sh->S);
    return SCHED_BAD_SHAPE;
  }
  int s = sched_misplaced(sh, sched_want_v);
  if (s >= 0) {
    strbuf_printf(why, "%s needs the V placement (stage s on device s for s < %d, on device %d - s "
                  "after); @s%d is on $d%d, not $d%d", name, sh->p, 2 * sh->p - 1, s,
                  sched_dev(sh, s), sched_want_v(sh, s));
    return SCHED_BAD_SHAPE;
  }
  return SCHED_FITS;
}

/* adaptive: every plan. */
static sched_verdict sched_check_any(const sched_shape *sh, const char *name, strbuf *why) {
  (void)sh, (void)name, (void)why;
  return SCHED_FITS;
}

/* ---- Classic orders --------------------------------------------------------------------------
 * Each builder: Pre: the method's check accepted sh; sh->m->schedules exist and are empty.
 * Post: every device's schedule holds its order; returns 0 (they cannot fail). */

/* Append one operation to the schedule of device dv. */
static void sched_put(const sched_shape *sh, int dv, ir_op_kind k, int s, int mb) {
  ir_schedule_push(&sh->m->schedules[dv], k, s, mb);
}

/* GPipe (Huang et al. 2019), in PyTorch's ScheduleGPipe order: every forward, then every fused
 * backward, microbatches in order. */
static int sched_build_gpipe(const sched_shape *sh, const sched_params *prm, diag_engine *d) {
  (void)prm, (void)d;
  for (int i = 0; i < sh->p; i++) {
    for (int k = 0; k < sh->mb; k++) sched_put(sh, i, IR_OP_F, i, k);
    for (int k = 0; k < sh->mb; k++) sched_put(sh, i, IR_OP_BW, i, k);
  }
  return 0;
}

/* 1F1B (PipeDream-Flush, Narayanan et al. 2021; Megatron's
 * forward_backward_pipelining_without_interleaving): device i runs min(p - i - 1, m) warm-up
 * forwards, then m - warmup pairs (F, BW), then the remaining BW. */
static int sched_build_1f1b(const sched_shape *sh, const sched_params *prm, diag_engine *d) {
  (void)prm, (void)d;
  for (int i = 0; i < sh->p; i++) {
    int warm = sh->p - i - 1 < sh->mb ? sh->p - i - 1 : sh->mb;
    for (int k = 0; k < warm; k++) sched_put(sh, i, IR_OP_F, i, k);
    for (int k = 0; k < sh->mb - warm; k++) {
      sched_put(sh, i, IR_OP_F, i, warm + k);
      sched_put(sh, i, IR_OP_BW, i, k);
    }
    for (int k = sh->mb - warm; k < sh->mb; k++) sched_put(sh, i, IR_OP_BW, i, k);
  }
  return 0;
}

/* Stage and microbatch of the k-th forward (backward: the chunks in reverse) of device i in
 * Megatron's interleaved schedule: chunk (k mod pv) / p, microbatch (k / pv) p + k mod p. */
static void sched_interleaved_op(const sched_shape *sh, int i, int k, bool fwd, int *s, int *mb) {
  int v = sh->S / sh->p, group = sh->p * v;
  int chunk = (k % group) / sh->p;
  if (!fwd) chunk = v - 1 - chunk;
  *s = chunk * sh->p + i;
  *mb = k / group * sh->p + k % sh->p;
}

/* Interleaved 1F1B (Narayanan et al. 2021; Megatron's
 * forward_backward_pipelining_with_interleaving): m v virtual microbatches per device; warm-up
 * (p - i - 1) 2 + (v - 1) p forwards (all of them when m == p), capped at m v; then forward
 * k + warmup and backward k alternate; then the remaining backwards. Fused BW. */
static int sched_build_interleaved(const sched_shape *sh, const sched_params *prm,
                                   diag_engine *d) {
  (void)prm, (void)d;
  int v = sh->S / sh->p, total = sh->mb * v;
  for (int i = 0; i < sh->p; i++) {
    int warm = sh->mb == sh->p ? total : (sh->p - i - 1) * 2 + (v - 1) * sh->p;
    if (warm > total) warm = total;
    int s, mb;
    for (int k = 0; k < warm; k++) {
      sched_interleaved_op(sh, i, k, true, &s, &mb);
      sched_put(sh, i, IR_OP_F, s, mb);
    }
    for (int k = 0; k < total - warm; k++) {
      sched_interleaved_op(sh, i, k + warm, true, &s, &mb);
      sched_put(sh, i, IR_OP_F, s, mb);
      sched_interleaved_op(sh, i, k, false, &s, &mb);
      sched_put(sh, i, IR_OP_BW, s, mb);
    }
    for (int k = total - warm; k < total; k++) {
      sched_interleaved_op(sh, i, k, false, &s, &mb);
      sched_put(sh, i, IR_OP_BW, s, mb);
    }
  }
  return 0;
}

/* ZB-H1 (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024, the handcrafted schedule of
 * its figure 3): B and W split; at step x = 0 .. m + p - 2 device i runs F x, B x - (p - 1 - i)
 * and W x - (p - 1), each when it is a microbatch 0 .. m - 1. Same warm-up as 1F1B (so the same
 * in-flight count on device 0), W delayed by p - 1 - (p - 1 - i) = i steps behind B to fill the
 * cool-down. */
static int sched_build_zbh1(const sched_shape *sh, const sched_params *prm, diag_engine *d) {
  (void)prm, (void)d;
  int p = sh->p, m = sh->mb;
  for (int i = 0; i < p; i++)
    for (int x = 0; x <= m + p - 2; x++) {
      int b = x - (p - 1 - i), w = x - (p - 1);
      if (x < m) sched_put(sh, i, IR_OP_F, i, x);
      if (b >= 0 && b < m) sched_put(sh, i, IR_OP_B, i, b);
      if (w >= 0 && w < m) sched_put(sh, i, IR_OP_W, i, w);
    }
  return 0;
}

/* sched_put for ZB-V's padded order: operations of microbatches >= m (the padding up to 2p - 1
 * microbatches) are dropped, as PyTorch does. */
static void sched_put_zbv(const sched_shape *sh, int dv, ir_op_kind k, int s, int mb) {
  if (mb < sh->mb) sched_put(sh, dv, k, s, mb);
}

/* ZB-V (Qi et al. 2024, "Pipeline Parallelism with Controllable Memory"), exactly as PyTorch's
 * ScheduleZBVZeroBubble._calculate_single_rank_operations: rank r holds chunk 0 = stage r and
 * chunk 1 = stage 2p - 1 - r; the order is computed for n = max(2p - 1, m) microbatches and the
 * operations of microbatches >= m are dropped. Warm-up: 2(p - r) - 1 F0, r times (F1, F0), p - r
 * times (F1, B1, W1); steady: (F0 while any is left, B0, W0, F1, B1, W1) until every F1 is done;
 * cool-down: r times (B0, B1), p - r times (B0, W0 of the oldest), then the remaining W1, then
 * the remaining W0. */
static int sched_build_zbv(const sched_shape *sh, const sched_params *prm, diag_engine *d) {
  (void)prm, (void)d;
  int p = sh->p, n = sh->mb > 2 * p - 1 ? sh->mb : 2 * p - 1;
  for (int r = 0; r < p; r++) {
    int c0 = r, c1 = 2 * p - 1 - r;
    int f0 = 0, f1 = 0, b0 = 0, b1 = 0;
    for (int k = 0; k < 2 * (p - r) - 1; k++) sched_put_zbv(sh, r, IR_OP_F, c0, f0++);
    for (int k = 0; k < r; k++) {
      sched_put_zbv(sh, r, IR_OP_F, c1, f1++);
      sched_put_zbv(sh, r, IR_OP_F, c0, f0++);
    }
    for (int k = 0; k < p - r; k++, b1++) {
      sched_put_zbv(sh, r, IR_OP_F, c1, f1++);
      sched_put_zbv(sh, r, IR_OP_B, c1, b1);
      sched_put_zbv(sh, r, IR_OP_W, c1, b1);
    }
    while (f1 < f0 || f0 < n) {
      if (f0 < n) sched_put_zbv(sh, r, IR_OP_F, c0, f0++);
      sched_put_zbv(sh, r, IR_OP_B, c0, b0);
      sched_put_zbv(sh, r, IR_OP_W, c0, b0++);
      sched_put_zbv(sh, r, IR_OP_F, c1, f1++);
      sched_put_zbv(sh, r, IR_OP_B, c1, b1);
      sched_put_zbv(sh, r, IR_OP_W, c1, b1++);
    }
    int w0 = b0, w1 = b1;
    for (int k = 0; k < r; k++) {
      sched_put_zbv(sh, r, IR_OP_B, c0, b0++);
      sched_put_zbv(sh, r, IR_OP_B, c1, b1++);
    }
    for (int k = 0; k < p - r; k++) {
      sched_put_zbv(sh, r, IR_OP_B, c0, b0++);
      sched_put_zbv(sh, r, IR_OP_W, c0, w0++);
    }
    while (w1 < b1) sched_put_zbv(sh, r, IR_OP_W, c1, w1++);
    while (w0 < b0) sched_put_zbv(sh, r, IR_OP_W, c0, w0++);
  }
  return 0;
}

/* ---- The method table ----------------------------------------------------------------------- */

/* A schedule method: its name, which plans it accepts, and how it writes the schedules. */
typedef struct sched_method {
  const char *name; /* spelling in schedule{method=...}, as Megatron, PyTorch and the papers */
  sched_verdict (*check)(const sched_shape *sh, const char *name, strbuf *why); /* accepts? */
  int (*build)(const sched_shape *sh, const sched_params *prm, diag_engine *d); /* writes */
} sched_method;

/* The methods, in the order of the 'method' option's words (options.def). */
static const sched_method sched_methods[] = {
    {"gpipe", sched_check_seq, sched_build_gpipe},
    {"1f1b", sched_check_seq, sched_build_1f1b},
    {"interleaved-1f1b", sched_check_interleaved, sched_build_interleaved},
    {"zb-h1", sched_check_seq, sched_build_zbh1},
    {"zbv", sched_check_zbv, sched_build_zbv},
    {"adaptive", sched_check_any, sched_build_adaptive},
};
/* Indices into sched_methods: how many, and adaptive (the last entry). */
enum { SCHED_NMETHODS = sizeof sched_methods / sizeof sched_methods[0] };
enum { SCHED_ADAPTIVE = SCHED_NMETHODS - 1 };

/* Append " — use A, B or C" (bad shape) or ", or use ..." (bad count) naming the other methods
 * that accept the plan as it is. Pre: at least adaptive accepts every plan. */
static void sched_suggest(const sched_shape *sh, int refused, sched_verdict why_kind, strbuf *sb) {
  int fit[SCHED_NMETHODS], n = 0;
  strbuf scratch = {0};
  for (int i = 0; i < SCHED_NMETHODS; i++) {
    if (i == refused) continue;
    scratch.len = 0;
    if (sched_methods[i].check(sh, sched_methods[i].name, &scratch) == SCHED_FITS) fit[n++] = i;
  }
  strbuf_free(&scratch);
  strbuf_puts(sb, why_kind == SCHED_BAD_COUNT ? ", or use " : " \xe2\x80\x94 use ");
  for (int k = 0; k < n; k++) {
    if (k > 0) strbuf_puts(sb, k == n - 1 ? " or " : ", ");
    strbuf_puts(sb, sched_methods[fit[k]].name);
  }
}

/* ---- Checking an order ---------------------------------------------------------------------- */

/* Slots of one (stage, microbatch): its F, its B (or the B half of a BW), its W (or W half). */
enum { SCHED_SLOT_F, SCHED_SLOT_B, SCHED_SLOT_W, SCHED_NSLOTS };

/* Index of slot 'slot' of (stage s, microbatch mb) in arrays of S x m x SCHED_NSLOTS entries. */
static size_t sched_slot(const sched_shape *sh, int s, int mb, int slot) {
  return ((size_t)s * (size_t)sh->mb + (size_t)mb) * SCHED_NSLOTS + (size_t)slot;
}

/* Whether op o (of a valid stage and microbatch) has its inputs, given the slots done: F(s-1)
 * for F(s); F(s) and B(s+1) for B(s) and BW(s); B(s) for W(s). */
static bool sched_ready(const sched_shape *sh, const unsigned char *done, const ir_op *o) {
  int s = o->stage, mb = o->mb;
  if (o->kind == IR_OP_F) return s == 0 || done[sched_slot(sh, s - 1, mb, SCHED_SLOT_F)];
  if (o->kind == IR_OP_W) return done[sched_slot(sh, s, mb, SCHED_SLOT_B)];
  return done[sched_slot(sh, s, mb, SCHED_SLOT_F)] &&
         (s == sh->S - 1 || done[sched_slot(sh, s + 1, mb, SCHED_SLOT_B)]);
}

/* Check that the schedules of sh->m hold every operation of the step exactly once, each on its
 * stage's device, and that running them in order cannot deadlock (each device runs its order; an
 * operation waits for its inputs, see sched_ready). Durations do not matter for a fixed order, so
 * this needs no costs. Pre: sh->m->schedules exist. Returns 0, or reports an internal error at
 * 'where' and returns 1. */
static int sched_check_order(const sched_shape *sh, const char *method, diag_loc where,
                             diag_engine *d) {
  size_t nslots = (size_t)sh->S * (size_t)sh->mb * SCHED_NSLOTS;
  unsigned char *seen = xcalloc(nslots ? nslots : 1, 1), *done = xcalloc(nslots ? nslots : 1, 1);
  int *pos = xcalloc((size_t)sh->p, sizeof *pos);
  const char *bad = NULL;
  for (int dv = 0; dv < sh->p && !bad; dv++) {
    const ir_schedule *sc = &sh->m->schedules[dv];
    for (int i = 0; i < sc->nops && !bad; i++) {
      const ir_op *o = &sc->ops[i];
      if (o->stage < 0 || o->stage >= sh->S || o->mb < 0 || o->mb >= sh->mb ||
          sched_dev(sh, o->stage) != dv) {
        bad = "puts an operation on the wrong device or out of range";
        break;
      }
      bool f = o->kind == IR_OP_F, b = o->kind == IR_OP_B || o->kind == IR_OP_BW,
           w = o->kind == IR_OP_W || o->kind == IR_OP_BW;
      if ((f && seen[sched_slot(sh, o->stage, o->mb, SCHED_SLOT_F)]++) ||
          (b && seen[sched_slot(sh, o->stage, o->mb, SCHED_SLOT_B)]++) ||
          (w && seen[sched_slot(sh, o->stage, o->mb, SCHED_SLOT_W)]++))
        bad = "repeats an operation";
    }
  }
  for (size_t k = 0; k < nslots && !bad; k++)
    if (!seen[k]) bad = "misses an operation";
  /* Run the orders: advance every device as far as its inputs allow until none can move. */
  size_t left = nslots;
  for (bool moved = true; moved && !bad && left > 0;) {
    moved = false;
    for (int dv = 0; dv < sh->p; dv++) {
      const ir_schedule *sc = &sh->m->schedules[dv];
      for (; pos[dv] < sc->nops && sched_ready(sh, done, &sc->ops[pos[dv]]); pos[dv]++) {
        const ir_op *o = &sc->ops[pos[dv]];
        if (o->kind == IR_OP_F) done[sched_slot(sh, o->stage, o->mb, SCHED_SLOT_F)] = 1, left--;
        if (o->kind != IR_OP_F && o->kind != IR_OP_W)
          done[sched_slot(sh, o->stage, o->mb, SCHED_SLOT_B)] = 1, left--;
        if (o->kind == IR_OP_W || o->kind == IR_OP_BW)
          done[sched_slot(sh, o->stage, o->mb, SCHED_SLOT_W)] = 1, left--;
        moved = true;
      }
    }
  }
  if (!bad && left > 0) bad = "deadlocks";
  free(seen);
  free(done);
  free(pos);
  if (!bad) return 0;
  diag_error(d, where, "internal error: schedule{method=%s} built an order that %s (a bug in the "
             "schedule pass)", method, bad);
  return 1;
}

/* ---- The pass ------------------------------------------------------------------------------- */

/* Parse the options. Post: 0 with *method and prm filled, or non-zero after reporting. */
static int sched_parse_options(const pass_options *opts, int *method, sched_params *prm,
                               diag_engine *d) {
  int bad = 0;
  bad += pass_opt_choice(opts, "method", method, d) != 0;
  bad += pass_opt_bool(opts, "split", &prm->adaptive.split, d) != 0;
  bad += pass_opt_real(opts, "mem_margin", &prm->adaptive.mem_margin, d) != 0;
  if (bad) return 1;
  const pass_option *mm = pass_opt_find(opts, "mem_margin");
  if (mm && !(prm->adaptive.mem_margin > 0 && prm->adaptive.mem_margin <= 1)) {
    diag_error(d, mm->value_loc, "invalid value '%s' for option 'mem_margin' of pass 'schedule': "
               "expected a fraction of the memory limit, 0 < mem_margin <= 1", mm->value);
    bad++;
  }
  if (*method != SCHED_ADAPTIVE) {
    static const char *const only_adaptive[] = {"split", "mem_margin"};
    for (int i = 0; i < 2; i++) {
      const pass_option *o = pass_opt_find(opts, only_adaptive[i]);
      if (!o) continue;
      diag_error(d, o->key_loc, "option '%s' of pass 'schedule' applies only to method=adaptive, "
                 "not to method=%s", only_adaptive[i], sched_methods[*method].name);
      bad++;
    }
  }
  prm->method = sched_methods[*method].name;
  return bad != 0;
}

/* Check what every method needs: stages, all placed on existing devices, microbatches. Fills sh.
 * Returns 0, or non-zero after reporting at 'where'. */
static int sched_shape_of(ir_module *m, diag_loc where, sched_shape *sh, diag_engine *d) {
  *sh = (sched_shape){m, m->ndevices, m->nstages, 0};
  if (m->ndevices < 1) {
    diag_error(d, where, "the module has no devices to schedule on");
    return 1;
  }
  if (m->nstages < 1) {
    diag_error(d, where, "the module has no stages: run a partition pass before 'schedule'");
    return 1;
  }
  for (int s = 0; s < m->nstages; s++) {
    int dv = m->stages[s].device;
    if (dv < 0) {
      diag_error(d, where, "stage @s%d is not placed on a device: run a place pass before "
                 "'schedule'", s);
      return 1;
    }
    if (dv >= m->ndevices) {
      diag_error(d, where, "stage @s%d is placed on $d%d, which does not exist (the module has %d "
                 "device%s)", s, dv, m->ndevices, m->ndevices == 1 ? "" : "s");
      return 1;
    }
  }
  double mb = ir_field_value(&m->train, IR_F_TRAIN_microbatches);
  if (!ir_field_is_set(&m->train, IR_F_TRAIN_microbatches) || !(mb >= 1)) {
    diag_error(d, where, "'schedule' needs 'microbatches' (at least 1) in the train record");
    return 1;
  }
  if (mb * m->nstages * 3 > IR_MAX_OPS) {
    diag_error(d, where, "%d stages x %.0f microbatches is too many operations to schedule "
               "(3 x stages x microbatches is at most %.0e)", m->nstages, mb, IR_MAX_OPS);
    return 1;
  }
  sh->mb = (int)mb;
  return 0;
}

/* schedule{method=M, split=B, mem_margin=X}. Pre: m has stages, all placed, and microbatches;
 * adaptive also needs complete layer costs and links. Post: on success m->schedules holds a
 * complete, deadlock-free order of the chosen method and the (now stale) predictions are cleared;
 * a refused plan is reported at the pass in the pipeline and m is left unchanged. */
int pass_run_schedule(ir_module *m, const pass_options *opts, diag_engine *d) {
  int method;
  sched_params prm = {0};
  prm.where = opts->loc;
  if (sched_parse_options(opts, &method, &prm, d)) return 1;
  sched_shape sh;
  if (sched_shape_of(m, opts->loc, &sh, d)) return 1;
  const sched_method *me = &sched_methods[method];
  strbuf why = {0};
  sched_verdict v = me->check(&sh, me->name, &why);
  if (v != SCHED_FITS) {
    sched_suggest(&sh, method, v, &why);
    diag_error(d, opts->loc, "%s", strbuf_cstr(&why));
    strbuf_free(&why);
    return 1;
  }
  strbuf_free(&why);

  /* The old plan's order and predictions go; the new order is written from scratch. */
  ir_module_clear_schedules(m);
  ir_module_init_schedules(m);
  m->schedule_method = arena_strdup(&m->arena, me->name);
  if (me->build(&sh, &prm, d)) return 1;
  return sched_check_order(&sh, me->name, opts->loc, d);
}
