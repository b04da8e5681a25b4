/* schedule_adaptive.c -- schedule{method=adaptive}: a memory-aware list scheduler on the
 * simulator's priority mode. Whenever a device is free the simulator offers it the next ready F,
 * B (or fused BW) and W of each of its stages; the rule below picks one or waits. It alternates F
 * and B like 1F1B's steady state, runs W when memory runs short or nothing else is ready, and
 * never starts an F that could exceed the device's memory limit: a microbatch enters a device only
 * when the activations of all its stages there fit next to what is in use and reserved, which
 * makes the schedule deadlock-free whenever one microbatch fits. Works on any partition and
 * placement; deterministic. Rules and knobs: docs/schedules.md. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "schedule_impl.h"
#include "sim.h"

/* State of the priority rule over one simulated step. */
typedef struct sched_adapt {
  const sched_adaptive_opts *o; /* knobs */
  double *act;          /* per stage: activation bytes an F allocates (sum of its layers' act) */
  int *lowest;          /* per device: its first stage (every microbatch enters there); -1: none */
  double *total_act;    /* per device: activations of one microbatch on all its stages */
  double *reserved;     /* per device: activations of entered microbatches' stages not yet run */
  ir_op_kind *last;     /* per device: kind of its last F or B (BW) choice, for alternation */
  double *wait_need;    /* per device: bytes the F it last declined would have needed (0: none) */
  double *wait_used;    /* per device: memory in use (and reserved) when it declined */
  ir_op *wait_op;       /* per device: that F */
} sched_adapt;

/* Whether candidate a comes before b among ready operations of the same kind: F by earlier
 * microbatch, then later stage; B (BW) by later stage, then earlier microbatch; W by earlier
 * microbatch, then later stage. */
static bool sched_adapt_before(const sim_cand *a, const sim_cand *b) {
  if (a->kind == IR_OP_B || a->kind == IR_OP_BW)
    return a->stage != b->stage ? a->stage > b->stage : a->mb < b->mb;
  return a->mb != b->mb ? a->mb < b->mb : a->stage > b->stage;
}

/* The priority rule (sim_choose_fn). Pre: n >= 1 candidates of device v->device. Post: the index
 * of the operation to start, or -1 to wait; the rule's state is updated for the choice. */
static int sched_adapt_choose(void *ctx, const sim_view *v, const sim_cand *c, int n) {
  sched_adapt *a = ctx;
  int dv = v->device, f = -1, b = -1, w = -1;
  for (int i = 0; i < n; i++) {
    int *best = c[i].kind == IR_OP_F ? &f : c[i].kind == IR_OP_W ? &w : &b;
    if (*best < 0 || sched_adapt_before(&c[i], &c[*best])) *best = i;
  }
  /* Memory after the next F: a microbatch entering the device reserves all its stages there. */
  double after = v->mem_used + a->reserved[dv];
  bool enters = f >= 0 && c[f].stage == a->lowest[dv];
  if (enters) after += a->total_act[dv];
  bool f_ok = f >= 0 && after <= v->mem_limit;
  bool near = f >= 0 && after > a->o->mem_margin * v->mem_limit;
  int pick;
  if (near && w >= 0)
    pick = w;
  else if (f_ok && b >= 0)
    pick = a->last[dv] == IR_OP_F ? b : f;
  else if (b >= 0)
    pick = b;
  else if (f_ok)
    pick = f;
  else
    pick = w;
  if (pick < 0) {
    a->wait_need[dv] = enters ? a->total_act[dv] : c[f].act;
    a->wait_used[dv] = v->mem_used + a->reserved[dv];
    a->wait_op[dv] = (ir_op){IR_OP_F, c[f].stage, c[f].mb};
    return -1;
  }
  a->wait_need[dv] = 0;
  if (c[pick].kind == IR_OP_F) {
    a->last[dv] = IR_OP_F;
    if (enters)
      a->reserved[dv] += a->total_act[dv] - c[pick].act;
    else
      a->reserved[dv] -= c[pick].act;
  } else if (c[pick].kind != IR_OP_W) {
    a->last[dv] = IR_OP_B;
  }
  return pick;
}

/* Append a size in bytes to sb as the IR prints it ("1.5GiB", "1023KiB"). */
static void sched_size(strbuf *sb, double bytes) { ir_format_value(sb, IR_T_BYTES, bytes); }

/* Memory limit of device dv as the simulator takes it: the train record's mem_limit, else the
 * device's memory, else none. */
static double sched_mem_limit(const ir_module *m, int dv) {
  double lim = ir_field_value(&m->train, IR_F_TRAIN_mem_limit);
  double mem = ir_field_value(&m->devices[dv].rec, IR_F_DEVICE_mem);
  return lim > 0 ? lim : mem > 0 ? mem : INFINITY;
}

/* Report every device on which the parameters plus one microbatch's activations on all its stages
 * exceed the limit. Pre: costs complete. Returns the number of such devices. */
static int sched_adapt_fit_check(const sched_shape *sh, const sched_adapt *a, diag_loc where,
                                 diag_engine *d) {
  const ir_module *m = sh->m;
  int bad = 0;
  strbuf sb = {0}, stages = {0};
  for (int dv = 0; dv < sh->p; dv++) {
    double stat = 0, lim = sched_mem_limit(m, dv);
    stages.len = 0;
    for (int s = 0; s < sh->S; s++) {
      if (m->stages[s].device != dv) continue;
      for (int l = m->stages[s].first; l < m->stages[s].end; l++) stat += m->layers[l].cost.param;
      strbuf_printf(&stages, "%s@s%d", stages.len ? ", " : "", s);
    }
    if (!(stat + a->total_act[dv] > lim)) continue;
    sb.len = 0;
    strbuf_printf(&sb, "the adaptive scheduler cannot fit the plan in memory: $d%d needs ", dv);
    sched_size(&sb, stat + a->total_act[dv]);
    strbuf_puts(&sb, " for one microbatch (parameters and optimizer state ");
    sched_size(&sb, stat);
    strbuf_printf(&sb, ", activations on %s ", strbuf_cstr(&stages));
    sched_size(&sb, a->total_act[dv]);
    strbuf_puts(&sb, "), over its memory limit of ");
    sched_size(&sb, lim);
    diag_error(d, where, "%s", strbuf_cstr(&sb));
    bad++;
  }
  strbuf_free(&sb);
  strbuf_free(&stages);
  return bad;
}

int sched_build_adaptive(const sched_shape *sh, const sched_params *prm, diag_engine *d) {
  ir_module *m = sh->m;
  sim_model *model = sim_model_build(m, d);
  if (!model) return 1;
  size_t np = (size_t)sh->p, ns = (size_t)sh->S;
  sched_adapt a = {&prm->adaptive,
                   xcalloc(ns, sizeof(double)),
                   xmalloc(np * sizeof(int)),
                   xcalloc(np, sizeof(double)),
                   xcalloc(np, sizeof(double)),
                   xmalloc(np * sizeof(ir_op_kind)),
                   xcalloc(np, sizeof(double)),
                   xcalloc(np, sizeof(double)),
                   xcalloc(np, sizeof(ir_op))};
  for (int dv = 0; dv < sh->p; dv++) {
    a.lowest[dv] = -1;
    a.last[dv] = IR_OP_B; /* so that the first choice between F and B is F */
  }
  for (int s = 0; s < sh->S; s++) {
    const ir_stage *st = &m->stages[s];
    for (int l = st->first; l < st->end; l++) a.act[s] += m->layers[l].cost.act;
    if (a.lowest[st->device] < 0) a.lowest[st->device] = s;
    a.total_act[st->device] += a.act[s];
  }
  int rc = 0;
  if (sched_adapt_fit_check(sh, &a, prm->where, d)) {
    rc = 1;
  } else {
    sim_opts so = {sched_adapt_choose, &a, !prm->adaptive.split, false};
    sim_result r = {0};
    if (sim_run(model, m, &so, &r) == SIM_OK) {
      sim_store_order(&r, m);
    } else {
      /* Not expected: the admission rule keeps every step able to go on once one microbatch
       * fits. Say which device waited for memory, then what the simulator saw. */
      int dv = -1;
      for (int i = 0; i < r.nstuck && dv < 0; i++)
        if (a.wait_need[r.stuck[i].device] > 0) dv = r.stuck[i].device;
      if (dv >= 0) {
        strbuf sb = {0};
        strbuf_printf(&sb, "the adaptive scheduler cannot fit the plan in memory: $d%d needs ", dv);
        sched_size(&sb, a.wait_need[dv]);
        strbuf_printf(&sb, " for F @s%d %d next to ", a.wait_op[dv].stage, a.wait_op[dv].mb);
        sched_size(&sb, a.wait_used[dv]);
        strbuf_puts(&sb, " in use or reserved, over its memory limit of ");
        sched_size(&sb, sched_mem_limit(m, dv));
        diag_error(d, prm->where, "%s", strbuf_cstr(&sb));
        strbuf_free(&sb);
      }
      sim_report_failure(&r, d, prm->where);
      rc = 1;
    }
    sim_result_free(&r);
  }
  free(a.act);
  free(a.lowest);
  free(a.total_act);
  free(a.reserved);
  free(a.last);
  free(a.wait_need);
  free(a.wait_used);
  free(a.wait_op);
  sim_model_free(model);
  return rc;
}
