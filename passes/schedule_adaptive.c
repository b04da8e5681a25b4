/* schedule_adaptive.c -- schedule{method=adaptive}: a memory-aware list scheduler on the
 * simulator's priority mode. Whenever a device is free the simulator offers it the next ready F,
 * B (or fused BW) and W of each of its stages; the rule below picks one or waits. It alternates F
 * and B like 1F1B's steady state, runs W when memory runs short or nothing else is ready, and
 * never starts an operation that could exceed the device's memory limit or leave the device in
 * an unsafe state: in the banker's sense, the microbatches inside the device, oldest first, must
 * each be able to allocate all they still will there from the free memory and what the older
 * ones release when they finish. That makes the schedule deadlock-free whenever one microbatch
 * fits, while each microbatch holds only what it has allocated. Works on any partition and
 * placement; deterministic. Rules and knobs: docs/schedules.md. */
#include <stdlib.h>

#include "schedule_impl.h"
#include "sim.h"

/* State of the priority rule for one device. */
typedef struct sched_adapt_dev {
  int lowest;        /* its first stage (every microbatch enters there); -1: none */
  int nstages;       /* its stages */
  double total_act;  /* activations of one microbatch on all its stages, with the state their
                        B rebuilds (a recomputing stage's, sim_cand.rebuild) */
  double *need;      /* per microbatch: bytes it will still allocate here (its F not yet run,
                        the rebuilt state of its B not yet run); total_act before it enters */
  double *held;      /* per microbatch: bytes it holds here that it frees by the end of its W
                        (allocated and not yet freed or being freed; an offloading stage's
                        activations count in need instead while they are on the host) */
  int *left;         /* per microbatch: its operations here not yet started */
  double need_sum;   /* the sum of need over the microbatches that entered */
  int lo;            /* oldest microbatch with operations left here */
  int hi;            /* microbatches that entered (ran the F of the first stage) */
  ir_op_kind last;   /* kind of its last F or B (BW) choice, for alternation */
  double wait_need;  /* bytes the F it last declined would have needed (0: none) */
  double wait_used;  /* memory in use when it declined */
  ir_op wait_op;     /* that F */
} sched_adapt_dev;

/* State of the priority rule over one simulated step. */
typedef struct sched_adapt {
  const sched_adaptive_opts *o; /* knobs */
  int nmb;              /* microbatches */
  double *act;          /* per stage: activation bytes an F allocates (sum of its layers' act) */
  double *act_w;        /* per stage: the part of them B keeps until W */
  double *rebuild;      /* per stage: bytes its B allocates (the state a recomputing stage
                           rebuilds, ir_stage_layer_rebuild; 0 for the others) */
  sched_adapt_dev *dev; /* per device */
} sched_adapt;

/* Whether candidate a comes before b among ready operations of the same kind: F by earlier
 * microbatch, then later stage; B (BW) by later stage, then earlier microbatch; W by earlier
 * microbatch, then later stage. */
static bool sched_adapt_before(const sim_cand *a, const sim_cand *b) {
  if (a->kind == IR_OP_B || a->kind == IR_OP_BW)
    return a->stage != b->stage ? a->stage > b->stage : a->mb < b->mb;
  return a->mb != b->mb ? a->mb < b->mb : a->stage > b->stage;
}

/* Whether device ad stays safe when microbatch k allocates 'bytes' there now, with 'free'
 * bytes free before it: taking the microbatches inside (and k) oldest first, each one's
 * remaining allocations fit in what is free plus what the older ones hold (and free when they
 * finish here). Pre: k >= ad->lo, k <= ad->hi (k == hi: k enters). */
static bool sched_adapt_safe(const sched_adapt_dev *ad, int k, double bytes, double free,
                             double limit) {
  double avail = free - bytes, slack = 1e-9 * limit;
  /* all that every microbatch inside (and k) will still allocate fits at once: safe without
   * looking at each (the common case where memory does not bind) */
  if (ad->need_sum + (k < ad->hi ? 0 : ad->total_act) <= free + slack) return true;
  int end = k < ad->hi ? ad->hi : k + 1;
  for (int i = ad->lo; i < end; i++) {
    double need = ad->need[i] - (i == k ? bytes : 0);
    if (need > avail + slack) return false;
    avail += ad->held[i] + (i == k ? bytes : 0);
  }
  return true;
}

/* The priority rule (sim_choose_fn). Pre: n >= 1 candidates of device v->device. Post: the index
 * of the operation to start, or -1 to wait; the rule's state is updated for the choice. */
static int sched_adapt_choose(void *ctx, const sim_view *v, const sim_cand *c, int n) {
  sched_adapt *a = ctx;
  sched_adapt_dev *ad = &a->dev[v->device];
  int f = -1, b = -1, w = -1;
  for (int i = 0; i < n; i++) {
    int *best = c[i].kind == IR_OP_F ? &f : c[i].kind == IR_OP_W ? &w : &b;
    if (*best < 0 || sched_adapt_before(&c[i], &c[*best])) *best = i;
  }
  double free = v->mem_limit - v->mem_used;
  bool near = f >= 0 && v->mem_used + c[f].act > a->o->mem_margin * v->mem_limit;
  /* W when memory is near the margin; else F and B alternate, each when it is safe (F's safety
   * is checked only where it decides) */
  int pick = w;
  if (!(near && w >= 0)) {
    bool b_ok = b >= 0 && (c[b].rebuild <= 0 ||
                           sched_adapt_safe(ad, c[b].mb, c[b].rebuild, free, v->mem_limit));
    if (b_ok && ad->last == IR_OP_F)
      pick = b;
    else if (f >= 0 && sched_adapt_safe(ad, c[f].mb, c[f].act, free, v->mem_limit))
      pick = f;
    else if (b_ok)
      pick = b;
  }
  /* The preferred B (the latest stage's) would not be safe and nothing else is: another B that
   * allocates nothing, or whose rebuilt state is safe, goes on (else a device holding a
   * recomputing stage and one that does not could wait for each other's microbatches). */
  int other = -1;
  for (int i = 0; pick < 0 && i < n; i++)
    if ((c[i].kind == IR_OP_B || c[i].kind == IR_OP_BW) && i != b &&
        (other < 0 || sched_adapt_before(&c[i], &c[other])) &&
        (c[i].rebuild <= 0 || sched_adapt_safe(ad, c[i].mb, c[i].rebuild, free, v->mem_limit)))
      other = i;
  if (pick < 0) pick = other;
  if (pick < 0) {
    ad->wait_need = f >= 0 ? c[f].act : c[b].rebuild;
    ad->wait_used = v->mem_used;
    ad->wait_op = f >= 0 ? (ir_op){IR_OP_F, c[f].stage, c[f].mb}
                         : (ir_op){c[b].kind, c[b].stage, c[b].mb};
    return -1;
  }
  ad->wait_need = 0;
  const sim_cand *ch = &c[pick];
  int s = ch->stage, k = ch->mb;
  if (ch->kind == IR_OP_F) {
    ad->last = IR_OP_F;
    if (s == ad->lowest) ad->hi = k + 1, ad->need_sum += ad->total_act;
    ad->need[k] -= a->act[s];
    ad->need_sum -= a->act[s];
    ad->held[k] += a->act[s];
  } else if (ch->kind == IR_OP_W) {
    ad->held[k] -= a->act_w[s] + a->rebuild[s];
  } else { /* B allocates the rebuilt state, keeps it and act_w until W; BW frees all */
    ad->last = IR_OP_B;
    ad->need[k] -= a->rebuild[s];
    ad->need_sum -= a->rebuild[s];
    ad->held[k] += a->rebuild[s];
    ad->held[k] -= ch->kind == IR_OP_BW ? a->act[s] + a->rebuild[s] : a->act[s] - a->act_w[s];
  }
  ad->left[k]--;
  while (ad->lo < ad->hi && ad->left[ad->lo] == 0) ad->lo++;
  return pick;
}

/* The simulator's word on an offloading stage's activations (sim_host_fn): when they reach the
 * host, microbatch mb no longer holds them and will allocate them again (need); when they come
 * back, it holds them again. */
static void sched_adapt_host(void *ctx, int device, int stage, int mb, bool back) {
  sched_adapt *a = ctx;
  sched_adapt_dev *ad = &a->dev[device];
  double x = back ? a->act[stage] : -a->act[stage];
  ad->need[mb] -= x;
  ad->need_sum -= x;
  ad->held[mb] += x;
}

/* Append a size in bytes to sb as the IR prints it ("1.5GiB", "1023KiB"). */
static void sched_size(strbuf *sb, double bytes) { ir_format_value(sb, IR_T_BYTES, bytes); }

/* Bytes by which device dv cannot hold its static memory plus one microbatch's activations on
 * all its stages (<= 0: it can). */
static double sched_adapt_overflow(const sim_model *model, const sched_adapt *a, int dv) {
  return sim_model_static_mem(model, dv) + a->dev[dv].total_act - sim_model_mem_limit(model, dv);
}

/* Report every device on which the parameters plus one microbatch's activations on all its stages
 * exceed the limit. Pre: costs complete. Returns the number of such devices. */
static int sched_adapt_fit_check(const sched_shape *sh, const sim_model *model,
                                 const sched_adapt *a, diag_loc where, diag_engine *d) {
  const ir_module *m = sh->m;
  int bad = 0;
  strbuf sb = {0}, stages = {0};
  for (int dv = 0; dv < sh->p; dv++) {
    if (!(sched_adapt_overflow(model, a, dv) > 0)) continue;
    double stat = sim_model_static_mem(model, dv), lim = sim_model_mem_limit(model, dv);
    double act = a->dev[dv].total_act;
    stages.len = 0;
    for (int s = 0; s < sh->S; s++)
      if (m->stages[s].device == dv) strbuf_printf(&stages, "%s@s%d", stages.len ? ", " : "", s);
    sb.len = 0;
    strbuf_printf(&sb, "the adaptive scheduler cannot fit the plan in memory: $d%d needs ", dv);
    sched_size(&sb, stat + act);
    strbuf_puts(&sb, " for one microbatch (parameters and optimizer state ");
    sched_size(&sb, stat);
    strbuf_printf(&sb, ", activations on %s ", strbuf_cstr(&stages));
    sched_size(&sb, act);
    strbuf_puts(&sb, "), over its memory limit of ");
    sched_size(&sb, lim);
    diag_error(d, where, "%s", strbuf_cstr(&sb));
    bad++;
  }
  strbuf_free(&sb);
  strbuf_free(&stages);
  return bad;
}

/* Set up the rule's state for the plan of m (stages placed), split or fused. Free it with
 * sched_adapt_free. */
static void sched_adapt_init(sched_adapt *a, const ir_module *m, int p,
                             const sched_adaptive_opts *o) {
  a->o = o;
  a->nmb = (int)ir_field_value(&m->train, IR_F_TRAIN_microbatches);
  if (a->nmb < 1) a->nmb = 1;
  size_t ns = (size_t)(m->nstages ? m->nstages : 1);
  a->act = xcalloc(ns, sizeof *a->act);
  a->act_w = xcalloc(ns, sizeof *a->act_w);
  a->rebuild = xcalloc(ns, sizeof *a->rebuild);
  a->dev = xcalloc((size_t)(p ? p : 1), sizeof *a->dev);
  for (int dv = 0; dv < p; dv++) {
    a->dev[dv].lowest = -1;
    a->dev[dv].last = IR_OP_B; /* so that the first choice between F and B is F */
  }
  for (int s = 0; s < m->nstages; s++) {
    const ir_stage *st = &m->stages[s];
    sched_adapt_dev *ad = &a->dev[st->device];
    for (int l = st->first; l < st->end; l++) { /* as the simulator (recomputation) */
      ir_cost c = ir_stage_layer_cost(m, st, l);
      a->act[s] += c.act;
      a->act_w[s] += c.act_w;
      a->rebuild[s] += ir_stage_layer_rebuild(m, st, l);
    }
    if (ad->lowest < 0) ad->lowest = s;
    ad->nstages++;
    ad->total_act += a->act[s] + a->rebuild[s];
  }
  for (int dv = 0; dv < p; dv++) {
    sched_adapt_dev *ad = &a->dev[dv];
    ad->need = xmalloc((size_t)a->nmb * sizeof *ad->need);
    ad->held = xcalloc((size_t)a->nmb, sizeof *ad->held);
    ad->left = xmalloc((size_t)a->nmb * sizeof *ad->left);
    for (int k = 0; k < a->nmb; k++) {
      ad->need[k] = ad->total_act;
      ad->left[k] = ad->nstages * (o->split ? 3 : 2);
    }
  }
}

/* Free what sched_adapt_init allocated for p devices. */
static void sched_adapt_free(sched_adapt *a, int p) {
  for (int dv = 0; dv < p; dv++) {
    free(a->dev[dv].need);
    free(a->dev[dv].held);
    free(a->dev[dv].left);
  }
  free(a->act);
  free(a->act_w);
  free(a->rebuild);
  free(a->dev);
}

pass_adaptive_opts pass_adaptive_default(void) {
  const pass_info *p = &pass_registry[PASS_ID_SCHEDULE];
  pass_adaptive_opts o = {pass_option_find(p, "split")->def != 0,
                          pass_option_find(p, "mem_margin")->def};
  return o;
}

sim_status pass_adaptive_run(const sim_model *p, const ir_module *m, const pass_adaptive_opts *o,
                             const sim_opts *limits, sim_result *r, int *overflow_dev,
                             double *overflow) {
  sched_adapt a;
  sched_adapt_init(&a, m, m->ndevices, o);
  *overflow_dev = -1;
  *overflow = 0;
  /* One microbatch must fit on every device next to its static memory. */
  for (int dv = 0; dv < m->ndevices; dv++) {
    double over = sched_adapt_overflow(p, &a, dv);
    if (over > *overflow) *overflow = over, *overflow_dev = dv;
  }
  sim_status st = SIM_DEADLOCK;
  if (*overflow_dev < 0) {
    sim_opts so = {.choose = sched_adapt_choose, .ctx = &a, .host = sched_adapt_host,
                   .fused_bw = !o->split};
    if (limits) so.cutoff = limits->cutoff, so.stop = limits->stop, so.stop_ctx = limits->stop_ctx;
    st = sim_run(p, m, &so, r);
  }
  sched_adapt_free(&a, m->ndevices);
  return st;
}

int sched_build_adaptive(const sched_shape *sh, const sched_params *prm, diag_engine *d) {
  ir_module *m = sh->m;
  sim_model *model = sim_model_build(m, d);
  if (!model) return 1;
  sched_adapt a;
  sched_adapt_init(&a, m, sh->p, &prm->adaptive);
  int rc = 0;
  if (sched_adapt_fit_check(sh, model, &a, prm->where, d)) {
    rc = 1;
  } else {
    sim_opts so = {.choose = sched_adapt_choose, .ctx = &a, .host = sched_adapt_host,
                   .fused_bw = !prm->adaptive.split, .order = true};
    sim_result r = {0};
    if (sim_run(model, m, &so, &r) == SIM_OK) {
      sim_store_order(&r, m);
    } else {
      /* Not expected: the admission rule keeps every step able to go on once one microbatch
       * fits. Say which device waited for memory, then what the simulator saw. */
      int dv = -1;
      for (int i = 0; i < r.nstuck && dv < 0; i++)
        if (a.dev[r.stuck[i].device].wait_need > 0) dv = r.stuck[i].device;
      if (dv >= 0) {
        const sched_adapt_dev *ad = &a.dev[dv];
        strbuf sb = {0};
        strbuf_printf(&sb, "the adaptive scheduler cannot fit the plan in memory: $d%d needs ", dv);
        sched_size(&sb, ad->wait_need);
        strbuf_printf(&sb, " for %s @s%d %d next to ", ir_op_names[ad->wait_op.kind],
                      ad->wait_op.stage, ad->wait_op.mb);
        sched_size(&sb, ad->wait_used);
        strbuf_puts(&sb, " in use, over its memory limit of ");
        sched_size(&sb, sim_model_mem_limit(model, dv));
        diag_error(d, prm->where, "%s", strbuf_cstr(&sb));
        strbuf_free(&sb);
      }
      sim_report_failure(&r, d, prm->where);
      rc = 1;
    }
    sim_result_free(&r);
  }
  sched_adapt_free(&a, sh->p);
  sim_model_free(model);
  return rc;
}
