/* test_sim.c -- unit tests of the simulator through its API: priority mode reproduces 1F1B and
 * records the order it chose; the recorded timeline has the exact times of operations and
 * transfers; the data-parallel all-reduce follows the ring formula; a rule that declines
 * everything is a deadlock, not a hang; runs are bit-for-bit repeatable; problems that cannot be
 * built are errors. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"
#include "unit.h"

/* ---- Helpers ------------------------------------------------------------------------------ */

/* A module of 'nstages' one-layer stages, stage s on device place[s] (NULL: s mod ndev), with
 * F, B, W = f, b, w seconds (stage s scaled by 1 + s * skew), 'act' and 'out' bytes per layer,
 * 'mb' microbatches, a 100 GB/s intra link with 'lat' latency, and no schedule. */
typedef struct plan_spec {
  int ndev, nstages, mb;
  const int *place;
  double f, b, w, skew, act, out, lat;
} plan_spec;

static ir_module *make_plan(const plan_spec *ps) {
  ir_module *m = ir_module_new("t");
  ir_field_set(&m->train, IR_F_TRAIN_microbatches, ps->mb);
  ir_field_set(&m->train, IR_F_TRAIN_data, 1);
  ir_field_set(&m->intra, IR_F_LINK_bw, 100e9);
  ir_field_set(&m->intra, IR_F_LINK_lat, ps->lat);
  for (int i = 0; i < ps->ndev; i++) {
    ir_device *d = ir_module_add_device(m, "x");
    ir_field_set(&d->rec, IR_F_DEVICE_mem, 80e9);
    ir_field_set(&d->rec, IR_F_DEVICE_hbm, 1e12);
    ir_field_set(&d->rec, IR_F_DEVICE_node, 0);
  }
  for (int s = 0; s < ps->nstages; s++) {
    char name[16];
    snprintf(name, sizeof name, "l%d", s);
    ir_layer *l = ir_module_add_layer(m, name, IR_KIND_CUSTOM);
    double k = 1 + s * ps->skew;
    double v[] = {ps->f * k, ps->b * k, ps->w * k, ps->act, 0, ps->out, 0, 0};
    int f[] = {IR_F_COST_f,     IR_F_COST_b,   IR_F_COST_w,     IR_F_COST_act,
               IR_F_COST_act_w, IR_F_COST_out, IR_F_COST_param, IR_F_COST_grad};
    for (int i = 0; i < 8; i++) ir_field_set(&l->cost, f[i], v[i]);
    ir_stage *st = ir_module_add_stage(m, s, s + 1);
    st->device = ps->place ? ps->place[s] : s % ps->ndev;
  }
  return m;
}

/* A priority rule in the manner of 1F1B: run a ready B (or BW) first, else W, else an F while
 * fewer than (devices - device) microbatches are in flight. */
static int rule_1f1b(void *ctx, const sim_view *v, const sim_cand *c, int n) {
  int ndev = *(const int *)ctx;
  int pick = -1;
  for (int i = 0; i < n; i++)
    if (c[i].kind == IR_OP_B || c[i].kind == IR_OP_BW) return i;
  for (int i = 0; i < n; i++)
    if (c[i].kind == IR_OP_W) return i;
  for (int i = 0; i < n; i++)
    if (c[i].kind == IR_OP_F && v->in_flight < ndev - v->device) pick = i;
  return pick;
}

/* A greedy rule without a memory cap: B (or BW) first, else the F of the latest stage, else W. */
static int rule_greedy(void *ctx, const sim_view *v, const sim_cand *c, int n) {
  (void)ctx, (void)v;
  int best = -1;
  for (int i = 0; i < n; i++) {
    if (c[i].kind == IR_OP_B || c[i].kind == IR_OP_BW) return i;
    if (c[i].kind == IR_OP_F && (best < 0 || c[best].kind != IR_OP_F || c[i].stage > c[best].stage))
      best = i;
    if (c[i].kind == IR_OP_W && best < 0) best = i;
  }
  return best;
}

static int rule_decline(void *ctx, const sim_view *v, const sim_cand *c, int n) {
  (void)ctx, (void)v, (void)c, (void)n;
  return -1;
}

/* ---- Tests --------------------------------------------------------------------------------- */

/* Priority mode with a 1F1B rule on a uniform 4-stage pipeline gives (m + p - 1)(F + B + W), and
 * the order it records runs again in fixed mode to the same timeline. */
void test_sim_priority_1f1b(void) {
  plan_spec ps = {4, 4, 8, NULL, 1e-3, 1e-3, 1e-3, 0, 1e6, 0, 0};
  ir_module *m = make_plan(&ps);
  diag_engine *d = diag_new(stderr);
  sim_model *p = sim_model_build(m, d);
  UNIT_CHECK(p != NULL);
  int ndev = 4;
  sim_opts o = {.choose = rule_1f1b, .ctx = &ndev, .fused_bw = true, .order = true};
  sim_result r = {0};
  UNIT_CHECK(sim_run(p, m, &o, &r) == SIM_OK);
  UNIT_CHECK_EQ_DBL(r.makespan, 0.033);
  UNIT_CHECK_EQ_DBL(r.lb_work, 0.027); /* $d3 starts after 3 ms */
  UNIT_CHECK(r.order != NULL && r.order[3].nops == 16);
  /* Device 0 warms up with p - 1 = 3 forwards, then alternates. */
  UNIT_CHECK(r.order[0].ops[3].kind == IR_OP_F && r.order[0].ops[4].kind == IR_OP_BW);
  UNIT_CHECK(r.order[3].ops[0].kind == IR_OP_F && r.order[3].ops[1].kind == IR_OP_BW);
  sim_store_order(&r, m);
  sim_opts fixed = {0};
  sim_result r2 = {0};
  UNIT_CHECK(sim_run(p, m, &fixed, &r2) == SIM_OK);
  UNIT_CHECK_EQ_DBL(r2.makespan, r.makespan);
  /* The result is reusable: a second priority run on the same result gives the same answer. */
  UNIT_CHECK(sim_run(p, m, &o, &r2) == SIM_OK);
  UNIT_CHECK_EQ_DBL(r2.makespan, 0.033);
  sim_result_free(&r);
  sim_result_free(&r2);
  sim_model_free(p);
  diag_free(d);
  ir_module_free(m);
}

/* The recorded timeline of a 2-stage pipeline over a link with latency: exact operation and
 * transfer times, and the transfer queue on one link direction. */
void test_sim_timeline(void) {
  /* 2 microbatches, F = 1 ms, B = 2 ms, W = 0.5 ms; 1 GB outputs at 100 GB/s + 1 ms = 11 ms. */
  plan_spec ps = {2, 2, 2, NULL, 1e-3, 2e-3, 0.5e-3, 0, 1e6, 1e9, 1e-3};
  ir_module *m = make_plan(&ps);
  ir_module_init_schedules(m);
  ir_schedule_push(&m->schedules[0], IR_OP_F, 0, 0);
  ir_schedule_push(&m->schedules[0], IR_OP_F, 0, 1);
  ir_schedule_push(&m->schedules[0], IR_OP_B, 0, 0);
  ir_schedule_push(&m->schedules[0], IR_OP_W, 0, 0);
  ir_schedule_push(&m->schedules[0], IR_OP_B, 0, 1);
  ir_schedule_push(&m->schedules[0], IR_OP_W, 0, 1);
  ir_schedule_push(&m->schedules[1], IR_OP_F, 1, 0);
  ir_schedule_push(&m->schedules[1], IR_OP_B, 1, 0);
  ir_schedule_push(&m->schedules[1], IR_OP_F, 1, 1);
  ir_schedule_push(&m->schedules[1], IR_OP_B, 1, 1);
  ir_schedule_push(&m->schedules[1], IR_OP_W, 1, 0);
  ir_schedule_push(&m->schedules[1], IR_OP_W, 1, 1);
  diag_engine *d = diag_new(stderr);
  sim_model *p = sim_model_build(m, d);
  sim_opts o = {.record = true};
  sim_result r = {0};
  UNIT_CHECK(sim_run(p, m, &o, &r) == SIM_OK);
  /* $d0: F0 [0,1) F1 [1,2); act0 on the link [1,12), act1 queues behind it [12,23).
   * $d1: F0 [12,13) B0 [13,15); F1 [23,24) B1 [24,26) W0 [26,26.5) W1 [26.5,27).
   * grad0 [15,26) and grad1 [26,37) on the other direction; $d0: B0 [26,28) W0 [28,28.5)
   * B1 [37,39) W1 [39,39.5). Makespan 39.5 ms (no parameters: no optimizer step). */
  UNIT_CHECK(r.nxfers == 4);
  UNIT_CHECK(r.nxfers == 4 && fabs(r.xfers[1].start - 0.012) < 1e-12 &&
             fabs(r.xfers[1].end - 0.023) < 1e-12 && fabs(r.xfers[1].ready - 0.002) < 1e-12);
  UNIT_CHECK(r.nxfers == 4 && r.xfers[2].kind == IR_OP_B && r.xfers[2].from == 1 &&
             fabs(r.xfers[2].start - 0.015) < 1e-12);
  UNIT_CHECK_EQ_DBL(r.makespan, 0.0395);
  UNIT_CHECK(r.nops == 12);
  int found = 0;
  for (int i = 0; i < r.nops; i++) {
    const sim_op_event *e = &r.ops[i];
    if (i > 0) UNIT_CHECK(e->start >= r.ops[i - 1].start); /* in start order */
    if (e->device == 1 && e->kind == IR_OP_F && e->mb == 1) {
      UNIT_CHECK(fabs(e->start - 0.023) < 1e-12 && fabs(e->end - 0.024) < 1e-12);
      found++;
    }
  }
  UNIT_CHECK(found == 1);
  UNIT_CHECK(fabs(r.lb_critical - (0.001 + 0.011 + 0.001 + 0.002 + 0.011 + 0.002 + 0.0005)) <
             1e-12);
  sim_result_free(&r);
  sim_model_free(p);
  diag_free(d);
  ir_module_free(m);
}

/* With data = 4 the step ends with a ring all-reduce of the gradients, 2 (n-1)/n x bytes / bw +
 * 2 (n-1) x latency, then the optimizer step, 2 x state bytes / hbm. */
void test_sim_data_parallel(void) {
  plan_spec ps = {1, 1, 1, NULL, 1e-3, 1e-3, 1e-3, 0, 1e6, 0, 1e-6};
  ir_module *m = make_plan(&ps);
  ir_field_set(&m->train, IR_F_TRAIN_data, 4);
  ir_field_set(&m->layers[0].cost, IR_F_COST_grad, 1e9);
  ir_field_set(&m->layers[0].cost, IR_F_COST_param, 8e9);
  ir_module_init_schedules(m);
  ir_schedule_push(&m->schedules[0], IR_OP_F, 0, 0);
  ir_schedule_push(&m->schedules[0], IR_OP_BW, 0, 0);
  diag_engine *d = diag_new(stderr);
  sim_model *p = sim_model_build(m, d);
  sim_opts o = {.record = true};
  sim_result r = {0};
  UNIT_CHECK(sim_run(p, m, &o, &r) == SIM_OK);
  double ar = 2.0 * 3 / 4 * 1e9 / 100e9 + 6 * 1e-6; /* 15.006 ms */
  double opt = 2 * 8e9 / 1e12;                      /* 16 ms */
  UNIT_CHECK(fabs(r.dev[0].comm - ar) < 1e-12);
  UNIT_CHECK(fabs(r.makespan - (0.003 + ar + opt)) < 1e-12);
  UNIT_CHECK(fabs(r.dev[0].busy - (0.003 + opt)) < 1e-12);
  UNIT_CHECK(r.nops == 4 && r.ops[2].kind == (ir_op_kind)SIM_OP_ALLREDUCE &&
             r.ops[3].kind == (ir_op_kind)SIM_OP_OPTIM);
  UNIT_CHECK(r.dev[0].static_mem == 8e9 && r.dev[0].peak_mem == 8e9 + 1e6);
  sim_result_free(&r);
  sim_model_free(p);
  diag_free(d);
  ir_module_free(m);
}

/* A rule that declines every candidate ends in a deadlock report, not a hang. */
void test_sim_priority_decline(void) {
  plan_spec ps = {2, 2, 2, NULL, 1e-3, 1e-3, 1e-3, 0, 1e6, 0, 0};
  ir_module *m = make_plan(&ps);
  diag_engine *d = diag_new(stderr);
  sim_model *p = sim_model_build(m, d);
  sim_opts o = {.choose = rule_decline};
  sim_result r = {0};
  UNIT_CHECK(sim_run(p, m, &o, &r) == SIM_DEADLOCK);
  UNIT_CHECK(r.nstuck == 2);
  UNIT_CHECK(r.nstuck == 2 && r.stuck[0].device == 0 && r.stuck[0].waits_on == -1 &&
             r.stuck[0].op.kind == IR_OP_F && r.stuck[0].op.mb == 0);
  UNIT_CHECK(r.nstuck == 2 && r.stuck[1].waits_on == 0 && r.stuck[1].waits.stage == 0);
  sim_result_free(&r);
  sim_model_free(p);
  diag_free(d);
  ir_module_free(m);
}

/* sim_opts.stop: counts the questions; says stop at the 'at'-th (0: never). */
typedef struct stop_count {
  int asked, at;
} stop_count;

static bool stop_at(void *ctx) {
  stop_count *sc = ctx;
  return ++sc->asked == sc->at;
}

/* sim_opts.stop is asked every SIM_STOP_EVERY events and ends the run with SIM_STOPPED when it
 * says so; a stop that never says so changes nothing. */
void test_sim_stop(void) {
  plan_spec ps = {4, 4, 256, NULL, 1e-3, 1e-3, 1e-3, 0, 1e6, 1e6, 1e-6};
  ir_module *m = make_plan(&ps);
  diag_engine *d = diag_new(stderr);
  sim_model *p = sim_model_build(m, d);
  UNIT_CHECK(p != NULL);
  sim_opts plain = {.choose = rule_greedy};
  sim_result a = {0}, b = {0};
  UNIT_CHECK(sim_run(p, m, &plain, &a) == SIM_OK);
  stop_count never = {0, 0}, third = {0, 3};
  sim_opts o = {.choose = rule_greedy, .stop = stop_at, .stop_ctx = &never};
  UNIT_CHECK(sim_run(p, m, &o, &b) == SIM_OK);
  UNIT_CHECK_EQ_DBL(b.makespan, a.makespan);
  UNIT_CHECK(never.asked >= 4); /* over 4 x 256 x 3 operations, two events for most */
  o.stop_ctx = &third;
  UNIT_CHECK(sim_run(p, m, &o, &b) == SIM_STOPPED);
  UNIT_CHECK(third.asked == 3);
  UNIT_CHECK(strcmp(b.why, "stopped by the caller") == 0);
  sim_result_free(&a);
  sim_result_free(&b);
  sim_model_free(p);
  diag_free(d);
  ir_module_free(m);
}

/* Same input, same output bit for bit, recorded or not, fresh result or reused; an irregular
 * placement (stages 0..5 on devices 0 1 2 2 1 0) with skewed costs and link latency. */
void test_sim_deterministic(void) {
  static const int place[] = {0, 1, 2, 2, 1, 0};
  plan_spec ps = {3, 6, 16, place, 1.1e-3, 2.3e-3, 0.7e-3, 0.37, 3e8, 7e7, 3.3e-6};
  ir_module *m = make_plan(&ps);
  diag_engine *d = diag_new(stderr);
  sim_model *p = sim_model_build(m, d);
  sim_opts pri = {.choose = rule_greedy, .record = true, .order = true};
  sim_result a = {0}, b = {0};
  UNIT_CHECK(sim_run(p, m, &pri, &a) == SIM_OK);
  UNIT_CHECK(sim_run(p, m, &pri, &b) == SIM_OK);
  UNIT_CHECK(a.nops == b.nops && a.nxfers == b.nxfers && a.nops == 6 * 16 * 3);
  UNIT_CHECK(a.nops == b.nops && memcmp(a.ops, b.ops, (size_t)a.nops * sizeof *a.ops) == 0);
  UNIT_CHECK(a.nxfers == b.nxfers &&
             memcmp(a.xfers, b.xfers, (size_t)a.nxfers * sizeof *a.xfers) == 0);
  sim_store_order(&a, m);
  sim_opts rec = {.record = true}, norec = {0};
  sim_result c = {0};
  UNIT_CHECK(sim_run(p, m, &rec, &c) == SIM_OK);
  UNIT_CHECK_EQ_DBL(c.makespan, a.makespan);
  UNIT_CHECK(c.nops == a.nops && memcmp(c.ops, a.ops, (size_t)a.nops * sizeof *a.ops) == 0);
  UNIT_CHECK(sim_run(p, m, &norec, &c) == SIM_OK);
  UNIT_CHECK_EQ_DBL(c.makespan, a.makespan);
  UNIT_CHECK_EQ_DBL(c.bubble, a.bubble);
  UNIT_CHECK(c.makespan >= c.lb_work && c.makespan >= c.lb_critical);
  sim_result_free(&a);
  sim_result_free(&b);
  sim_result_free(&c);
  sim_model_free(p);
  diag_free(d);
  ir_module_free(m);
}

/* Problems that cannot be built are reported, and no model is returned. */
void test_sim_build_errors(void) {
  static const int place[] = {0, 5};
  plan_spec ps = {2, 2, 1, place, 1e-3, 1e-3, 1e-3, 0, 1e6, 0, 0};
  ir_module *m = make_plan(&ps);
  FILE *f = tmpfile();
  diag_engine *d = diag_new(f);
  UNIT_CHECK(sim_model_build(m, d) == NULL);
  m->stages[1].device = 1;
  ir_field_set(&m->train, IR_F_TRAIN_microbatches, 0);
  UNIT_CHECK(sim_model_build(m, d) == NULL);
  ir_field_set(&m->train, IR_F_TRAIN_microbatches, 1);
  m->intra.set = 0;
  UNIT_CHECK(sim_model_build(m, d) == NULL);
  UNIT_CHECK(diag_error_count(d) == 3);
  char text[2048] = {0};
  rewind(f);
  size_t n = fread(text, 1, sizeof text - 1, f);
  text[n] = 0;
  UNIT_CHECK(strstr(text, "stage @s1 is placed on $d5, which does not exist") != NULL);
  UNIT_CHECK(strstr(text, "'microbatches'") != NULL);
  UNIT_CHECK(strstr(text, "no link from $d0 to $d1") != NULL);
  diag_free(d);
  fclose(f);
  ir_module_free(m);
}
