/* test_tune.c -- unit tests of the tuner (passes/tune.c): on small models it is at least as fast
 * as an exhaustive search over partition and placement with the adaptive scheduler; on random
 * heterogeneous models it is never slower than the best classic plan; it respects memory limits
 * (and says so when nothing fits); the same seed gives the same plan, with any number of
 * threads; its bound is never above the optimum and is exact for whole-layer packing. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "passes.h"
#include "unit.h"

/* A module of n custom layers with random F (B = F x 1.1, W = F x 0.9), activations and
 * parameters, on p devices of one node (100 GB/s, 5 us), mb microbatches, memory limit 'lim'
 * bytes. */
static ir_module *tt_model(uint64_t *seed, int n, int p, int mb, double lim) {
  ir_module *m = ir_module_new("rand");
  ir_field_set(&m->train, IR_F_TRAIN_microbatches, mb);
  ir_field_set(&m->train, IR_F_TRAIN_data, 1);
  ir_field_set(&m->train, IR_F_TRAIN_mem_limit, lim);
  ir_field_set(&m->intra, IR_F_LINK_bw, 100e9);
  ir_field_set(&m->intra, IR_F_LINK_lat, 5e-6);
  for (int i = 0; i < p; i++) {
    ir_device *d = ir_module_add_device(m, "x");
    ir_field_set(&d->rec, IR_F_DEVICE_mem, 80e9);
    ir_field_set(&d->rec, IR_F_DEVICE_hbm, 2e12);
    ir_field_set(&d->rec, IR_F_DEVICE_node, 0);
  }
  for (int i = 0; i < n; i++) {
    ir_layer *l = ir_module_add_layer(m, "l", IR_KIND_CUSTOM);
    /* Heterogeneous: costs from 0.1 ms to 5 ms, one layer in four much heavier. */
    double f = (0.1 + (double)(unit_rng(seed) % 1000) / 1000 * 1.9) * 1e-3;
    if (unit_rng(seed) % 4 == 0) f *= 2.5;
    double act = (double)(1 + unit_rng(seed) % 64) * 1048576;
    static const int fields[] = {IR_F_COST_f,     IR_F_COST_b,   IR_F_COST_w,     IR_F_COST_act,
                                 IR_F_COST_act_w, IR_F_COST_out, IR_F_COST_param, IR_F_COST_grad};
    double v[] = {f, f * 1.1, f * 0.9, act, act / 2, 8388608, 1e8, 0};
    for (int k = 0; k < 8; k++) ir_field_set(&l->cost, fields[k], v[k]);
  }
  return m;
}

/* Makespan of m's current plan under the adaptive scheduler; INFINITY when it does not fit. */
static double tt_adaptive(ir_module *m, diag_engine *q) {
  sim_model *p = sim_model_build(m, q);
  if (!p) return INFINITY;
  sim_result r = {0};
  pass_adaptive_opts o = {true, 0.9};
  int dev;
  double over;
  double ms = pass_adaptive_run(p, m, &o, NULL, &r, &dev, &over) == SIM_OK && r.fits ? r.makespan
                                                                                : INFINITY;
  sim_result_free(&r);
  sim_model_free(p);
  return ms;
}

/* Best adaptive makespan over every partition and placement of m's layers from layer 'at' on
 * (exhaustive), with every stage also offloading or not when 'offload' (m's devices have a
 * 'pcie'). */
static double tt_search(ir_module *m, int at, bool offload, diag_engine *q) {
  if (at == m->nlayers) return tt_adaptive(m, q);
  double best = INFINITY;
  int k = m->nstages;
  for (int end = at + 1; end <= m->nlayers; end++)
    for (int dv = 0; dv < m->ndevices; dv++)
      for (int off = 0; off <= (int)offload; off++) {
        m->nstages = k;
        ir_stage *st = ir_module_add_stage(m, at, end);
        st->device = dv;
        st->offload = off;
        double ms = tt_search(m, end, offload, q);
        if (ms < best) best = ms;
      }
  m->nstages = k;
  return best;
}

/* Best adaptive makespan over every partition and placement of m's layers (exhaustive). */
static double tt_exhaustive(ir_module *m, int at, diag_engine *q) {
  return tt_search(m, at, false, q);
}

/* Check that m's plan-independent bound is positive and not above 'want', the best step found
 * by a search (what: the check's name). Returns whether want was finite (checked), else only
 * that the bound computes. */
static bool tt_bound_below(const ir_module *m, double want, const char *what) {
  sim_bound bd;
  UNIT_CHECK(sim_bound_compute(m, &bd));
  if (!isfinite(want)) return false;
  if (!(bd.bound > 0 && bd.bound <= want * (1 + 1e-9)))
    unit_fail_dbl(__FILE__, __LINE__, what, bd.bound, want);
  return true;
}

/* Tuner options for tests: converges well before the budget. */
static const pass_tune_opts tt_opts = {.evals = 1000000, .seed = 7, .restarts = 30};

void test_tune_exhaustive(void) {
  uint64_t seed = 11;
  FILE *sink = tmpfile();
  diag_engine *q = diag_new(sink);
  for (int trial = 0; trial < 6; trial++) {
    int n = 4 + trial % 2, p = 2, mb = 4;
    ir_module *m = tt_model(&seed, n, p, mb, 1e12);
    ir_module *e = ir_module_clone(m);
    double want = tt_exhaustive(e, 0, q);
    ir_module_free(e);
    pass_tune_stats st;
    UNIT_CHECK(pass_tune(m, &tt_opts, &st, q, diag_mkloc(0, 0, 0, 0)) == 0);
    if (!(st.makespan <= want * (1 + 1e-12)))
      unit_fail_dbl(__FILE__, __LINE__, "tuned <= exhaustive", st.makespan, want);
    /* The plan-independent bound is never above the optimum. */
    if (!(st.bound.bound > 0 && st.bound.bound <= want * (1 + 1e-9)))
      unit_fail_dbl(__FILE__, __LINE__, "bound <= exhaustive", st.bound.bound, want);
    UNIT_CHECK(m->nstages > 0 && m->schedules != NULL);
    pass_tune_stats_free(&st);
    ir_module_free(m);
  }
  /* Where memory binds (room for one to five microbatches' largest activations beside the
   * static bytes of half the layers), the bound, which counts each device's memory-time, is
   * still never above the best plan. */
  int bound_checked = 0;
  for (int trial = 0; trial < 24; trial++) {
    int n = 4 + trial % 3, p = 2, mb = 4 + trial % 5;
    double lim = 1e8 * ((n + 1) / 2) + (double)(1 + trial % 5) * 64 * 1048576;
    ir_module *m = tt_model(&seed, n, p, mb, lim);
    ir_module *e = ir_module_clone(m);
    double want = tt_exhaustive(e, 0, q);
    ir_module_free(e);
    bound_checked += tt_bound_below(m, want, "bound <= exhaustive (memory)");
    ir_module_free(m);
  }
  UNIT_CHECK(bound_checked >= 12);
  /* With a link to host memory (a copy of a microbatch's largest activations taking 0.2 to 6
   * ms) every stage may also offload: the bound, whose memory parts then count the shorter
   * hold, stays below the best plan, offloading or not, and offload is what fits or wins
   * somewhere. */
  int off_checked = 0, off_better = 0;
  for (int trial = 0; trial < 12; trial++) {
    int n = 4, p = 2, mb = 4 + trial % 5;
    double lim = 1e8 * ((n + 1) / 2) + (double)(1 + trial % 3) * 64 * 1048576;
    ir_module *m = tt_model(&seed, n, p, mb, lim);
    for (int dv = 0; dv < p; dv++)
      ir_field_set(&m->devices[dv].rec, IR_F_DEVICE_pcie, 64 * 1048576 / (0.2e-3 + 0.5e-3 * trial));
    ir_module *e = ir_module_clone(m);
    double plain = tt_exhaustive(e, 0, q);
    e->nstages = 0;
    double want = tt_search(e, 0, true, q);
    ir_module_free(e);
    UNIT_CHECK(want <= plain);
    off_better += want < plain * (1 - 1e-9);
    off_checked += tt_bound_below(m, want, "bound <= exhaustive (offload)");
    ir_module_free(m);
  }
  UNIT_CHECK(off_checked >= 6 && off_better >= 1);
  diag_free(q);
  fclose(sink);
}

void test_tune_never_worse(void) {
  uint64_t seed = 2024;
  FILE *sink = tmpfile();
  diag_engine *q = diag_new(sink);
  for (int trial = 0; trial < 12; trial++) {
    int p = 2 + trial % 3, n = 3 * p + (int)(unit_rng(&seed) % 6), mb = p * (1 + trial % 3);
    ir_module *m = tt_model(&seed, n, p, mb, 1e12);
    pass_tune_stats st;
    UNIT_CHECK(pass_tune(m, &tt_opts, &st, q, diag_mkloc(0, 0, 0, 0)) == 0);
    double best = INFINITY;
    for (int i = 0; i < st.nbaselines; i++)
      if (st.baselines[i].ok && st.baselines[i].fits && st.baselines[i].makespan < best)
        best = st.baselines[i].makespan;
    if (!(st.makespan <= best))
      unit_fail_dbl(__FILE__, __LINE__, "tuned <= best classic", st.makespan, best);
    for (int i = 0; i < st.nbaselines; i++) /* the bound holds for every plan that fits */
      if (st.baselines[i].ok && st.baselines[i].fits && !(st.bound.bound <= st.baselines[i].makespan))
        unit_fail_dbl(__FILE__, __LINE__, "bound <= classic", st.bound.bound,
                      st.baselines[i].makespan);
    if (!(st.bound.bound <= st.makespan))
      unit_fail_dbl(__FILE__, __LINE__, "bound <= tuned", st.bound.bound, st.makespan);
    UNIT_CHECK(st.fits && st.evaluations > 0);
    /* The plan left in the module is the one the tuner measured. */
    sim_model *pm = sim_model_build(m, q);
    sim_result r = {0};
    UNIT_CHECK(pm && sim_run(pm, m, NULL, &r) == SIM_OK);
    UNIT_CHECK_EQ_DBL(r.makespan, st.makespan);
    sim_result_free(&r);
    sim_model_free(pm);
    pass_tune_stats_free(&st);
    ir_module_free(m);
  }
  diag_free(q);
  fclose(sink);
}

void test_tune_memory(void) {
  uint64_t seed = 99;
  FILE *sink = tmpfile();
  diag_engine *q = diag_new(sink);
  /* 12 layers of 100 MB parameters and up to 64 MiB activations per microbatch, 16 microbatches
   * on 3 devices: a 1.2 GB limit leaves little room for activations. */
  ir_module *m = tt_model(&seed, 12, 3, 16, 1.2e9);
  pass_tune_stats st;
  UNIT_CHECK(pass_tune(m, &tt_opts, &st, q, diag_mkloc(0, 0, 0, 0)) == 0);
  UNIT_CHECK(st.fits);
  sim_model *pm = sim_model_build(m, q);
  sim_result r = {0};
  UNIT_CHECK(pm && sim_run(pm, m, NULL, &r) == SIM_OK && r.fits);
  for (int i = 0; i < r.ndevices; i++) UNIT_CHECK(r.dev[i].peak_mem <= 1.2e9);
  sim_result_free(&r);
  sim_model_free(pm);
  pass_tune_stats_free(&st);
  ir_module_free(m);
  /* 400 MB of parameters per device at the least: nothing fits in 300 MB. */
  m = tt_model(&seed, 12, 3, 4, 3e8);
  int before = diag_error_count(q);
  UNIT_CHECK(pass_tune(m, &tt_opts, &st, q, diag_mkloc(0, 0, 0, 0)) == 1);
  UNIT_CHECK(diag_error_count(q) == before + 1);
  UNIT_CHECK(!st.fits);
  pass_tune_stats_free(&st);
  ir_module_free(m);
  diag_free(q);
  char text[4096] = {0};
  rewind(sink);
  size_t got = fread(text, 1, sizeof text - 1, sink);
  text[got] = 0;
  UNIT_CHECK(strstr(text, "no plan fits in memory: the best the tuner found still needs") != NULL);
  fclose(sink);
}

/* The adaptive scheduler's admission (the banker's rule) on random irregular plans: stages of
 * random lengths on random devices (several per device, in any order), some recomputing, some
 * offloading their activations to host memory, split or fused backward, under a limit from just enough for one microbatch on the fullest device
 * to 2.5 times that: every run ends (no deadlock) and no device goes over the limit. The same
 * runs with a cutoff (sim_opts.cutoff): at the step's own length never cut and the same step;
 * at 0.9 of it cut in most plans. */
void test_tune_adaptive_safe(void) {
  uint64_t seed = 4242;
  int cut = 0, ran = 0;
  FILE *sink = tmpfile();
  diag_engine *q = diag_new(sink);
  for (int trial = 0; trial < 300; trial++) {
    int n = 4 + (int)(unit_rng(&seed) % 7), p = 2 + (int)(unit_rng(&seed) % 3);
    int mb = 2 + (int)(unit_rng(&seed) % 11);
    ir_module *m = tt_model(&seed, n, p, mb, 1e6);
    for (int i = 1; i < n; i += 2) /* recomputable: a recomputing stage's B rebuilds their state */
      m->layers[i].kind = IR_KIND_MLP;
    for (int at = 0; at < n;) {
      int end = at + 1 + (int)(unit_rng(&seed) % 3);
      if (end > n) end = n;
      ir_stage *st = ir_module_add_stage(m, at, end);
      st->device = (int)(unit_rng(&seed) % (uint64_t)p);
      if (unit_rng(&seed) % 4 == 0) st->recompute = IR_RECOMPUTE_FULL;
      st->offload = unit_rng(&seed) % 4 == 0; /* to host memory between F and B */
      at = end;
    }
    for (int dv = 0; dv < p; dv++) /* a copy of 1-64 MiB takes 0.01 to 6 ms */
      ir_field_set(&m->devices[dv].rec, IR_F_DEVICE_pcie, 1e10 * (1 + (double)(unit_rng(&seed) % 100)) / 100);
    pass_adaptive_opts o = {unit_rng(&seed) % 2 == 0, 0.5 + (double)(unit_rng(&seed) % 6) / 10};
    double slack = (double)(unit_rng(&seed) % 16) / 10, lim = 1e6;
    for (int tries = 0; tries < 2; tries++) {
      ir_field_set(&m->train, IR_F_TRAIN_mem_limit, lim);
      sim_model *pm = sim_model_build(m, q);
      UNIT_CHECK(pm != NULL);
      sim_result r = {0};
      int dev;
      double over;
      sim_status st = pass_adaptive_run(pm, m, &o, NULL, &r, &dev, &over);
      if (tries == 0) { /* learn what one microbatch needs on the fullest device */
        UNIT_CHECK(st == SIM_DEADLOCK && dev >= 0 && over > 0);
        lim = (lim + over) * (1 + slack);
      } else {
        if (st != SIM_OK) unit_fail_dbl(__FILE__, __LINE__, "adaptive ends", trial, slack);
        UNIT_CHECK(r.fits);
        for (int i = 0; i < r.ndevices; i++)
          if (!(r.dev[i].peak_mem <= lim * (1 + 1e-9)))
            unit_fail_dbl(__FILE__, __LINE__, "peak <= limit", r.dev[i].peak_mem, lim);
        double step = r.makespan;
        sim_opts at = {.cutoff = step}, below = {.cutoff = 0.9 * step};
        if (pass_adaptive_run(pm, m, &o, &at, &r, &dev, &over) != SIM_OK || r.makespan != step)
          unit_fail_dbl(__FILE__, __LINE__, "not cut at its own step", r.makespan, step);
        cut += pass_adaptive_run(pm, m, &o, &below, &r, &dev, &over) == SIM_CUTOFF;
        ran++;
      }
      sim_result_free(&r);
      sim_model_free(pm);
    }
    ir_module_free(m);
  }
  if (!(cut > ran / 2)) unit_fail_dbl(__FILE__, __LINE__, "most cut at 0.9", cut, ran);
  diag_free(q);
  fclose(sink);
}

/* Make device dv of m a slower type "y": every layer's F, B and W there cost 'slow' times more. */
static void tt_slow_device(ir_module *m, int dv, double slow) {
  m->devices[dv].type = "y";
  for (int i = 0; i < m->nlayers; i++) {
    ir_layer *l = &m->layers[i];
    ir_cost c = l->cost;
    c.f *= slow, c.b *= slow, c.w *= slow;
    *ir_layer_add_type_cost(m, l, "y") = c;
  }
}

/* The bound on devices of two types: whole layers packed onto each class (a''), never above the
 * exhaustive optimum; and on three equal layers, two fast devices and a ten times slower one, it
 * is the two layers one fast device must take, where the relaxation that splits layers gives
 * less. */
void test_tune_bound_classes(void) {
  uint64_t seed = 77;
  FILE *sink = tmpfile();
  diag_engine *q = diag_new(sink);
  for (int trial = 0; trial < 12; trial++) {
    int n = 4 + trial % 3, p = 3, mb = 2 + trial % 3;
    double lim = trial % 2 ? 1e12 : 1e8 * ((n + 2) / 3) + 2e8;
    ir_module *m = tt_model(&seed, n, p, mb, lim);
    tt_slow_device(m, 2, 1.5 + trial % 4);
    ir_module *e = ir_module_clone(m);
    double want = tt_exhaustive(e, 0, q);
    ir_module_free(e);
    sim_bound bd;
    UNIT_CHECK(sim_bound_compute(m, &bd));
    if (isfinite(want) && !(bd.bound > 0 && bd.bound <= want * (1 + 1e-9)))
      unit_fail_dbl(__FILE__, __LINE__, "bound <= exhaustive (two types)", bd.bound, want);
    ir_module_free(m);
  }
  ir_module *m = tt_model(&seed, 3, 3, 1, 1e12);
  for (int i = 0; i < 3; i++) {
    ir_cost *c = &m->layers[i].cost;
    c->f = c->b = c->w = 1e-3, c->param = 0;
  }
  tt_slow_device(m, 2, 10);
  sim_bound bd;
  UNIT_CHECK(sim_bound_compute(m, &bd));
  UNIT_CHECK_EQ_DBL(round(bd.work * 1e9) / 1e9, 6e-3);
  ir_module_free(m);
  diag_free(q);
  fclose(sink);
}

void test_tune_deterministic(void) {
  uint64_t seed = 5;
  FILE *sink = tmpfile();
  diag_engine *q = diag_new(sink);
  ir_module *a = tt_model(&seed, 14, 4, 8, 1e12);
  ir_module *b = ir_module_clone(a);
  pass_tune_stats sa, sb;
  UNIT_CHECK(pass_tune(a, &tt_opts, &sa, q, diag_mkloc(0, 0, 0, 0)) == 0);
  UNIT_CHECK(pass_tune(b, &tt_opts, &sb, q, diag_mkloc(0, 0, 0, 0)) == 0);
  UNIT_CHECK_EQ_DBL(sa.makespan, sb.makespan);
  UNIT_CHECK(sa.evaluations == sb.evaluations && a->nstages == b->nstages);
  for (int s = 0; s < a->nstages && s < b->nstages; s++)
    UNIT_CHECK(a->stages[s].end == b->stages[s].end && a->stages[s].device == b->stages[s].device);
  pass_tune_stats_free(&sa);
  pass_tune_stats_free(&sb);
  ir_module_free(a);
  ir_module_free(b);
  diag_free(q);
  fclose(sink);
}

/* The same plan with 1, 2 and 5 threads when the effort budget cuts the search. */
void test_tune_jobs(void) {
  uint64_t seed = 31;
  FILE *sink = tmpfile();
  diag_engine *q = diag_new(sink);
  ir_module *base = tt_model(&seed, 40, 6, 24, 1e12);
  static const int jobs[] = {1, 2, 5};
  double makespan[3];
  int evals[3], nstages[3], ends[3][64], devs[3][64];
  for (int j = 0; j < 3; j++) {
    ir_module *m = ir_module_clone(base);
    pass_tune_opts o = {.evals = 150, .jobs = jobs[j], .seed = 3, .restarts = 60};
    pass_tune_stats st;
    UNIT_CHECK(pass_tune(m, &o, &st, q, diag_mkloc(0, 0, 0, 0)) == 0);
    UNIT_CHECK(strcmp(st.stop, "effort") == 0 && st.jobs == jobs[j]);
    makespan[j] = st.makespan;
    evals[j] = st.evaluations;
    nstages[j] = m->nstages < 64 ? m->nstages : 64;
    for (int s = 0; s < nstages[j]; s++) ends[j][s] = m->stages[s].end, devs[j][s] = m->stages[s].device;
    pass_tune_stats_free(&st);
    ir_module_free(m);
  }
  for (int j = 1; j < 3; j++) {
    UNIT_CHECK_EQ_DBL(makespan[j], makespan[0]);
    UNIT_CHECK(evals[j] == evals[0] && nstages[j] == nstages[0]);
    for (int s = 0; s < nstages[0] && s < nstages[j]; s++)
      UNIT_CHECK(ends[j][s] == ends[0][s] && devs[j][s] == devs[0][s]);
  }
  ir_module_free(base);
  diag_free(q);
  fclose(sink);
}

/* The work part of the bound is the best packing of whole layers: three equal layers on two
 * devices need two on one device (2 x 4 ms), not the average (6 ms); with a memory limit that
 * holds one layer per device, three layers cannot go on two devices at all. */
void test_tune_bound_packing(void) {
  uint64_t seed = 1;
  ir_module *m = tt_model(&seed, 3, 2, 1, 1e12);
  for (int i = 0; i < 3; i++) {
    ir_cost *c = &m->layers[i].cost;
    c->f = 2e-3, c->b = 1e-3, c->w = 1e-3, c->param = 0, c->act = 1e6;
  }
  sim_bound bd;
  UNIT_CHECK(sim_bound_compute(m, &bd));
  UNIT_CHECK(bd.exact);
  UNIT_CHECK_EQ_DBL(round(bd.work * 1e9) / 1e9, 8e-3);
  UNIT_CHECK(bd.bound >= bd.work && bd.bound >= bd.chain && bd.bound >= bd.path);
  /* One microbatch's path: every F and B, then the first layer's W. */
  UNIT_CHECK_EQ_DBL(round(bd.path * 1e9) / 1e9, 10e-3);
  ir_field_set(&m->train, IR_F_TRAIN_mem_limit, 1.5e6);
  UNIT_CHECK(sim_bound_compute(m, &bd));
  UNIT_CHECK(bd.work > 11e-3); /* no packing fits: the bound rises to all the work */
  ir_module_free(m);
}
