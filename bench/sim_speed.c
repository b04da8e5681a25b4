/* sim_speed.c -- speed of the simulator on synthetic plans: for each size (devices, stages per
 * device, microbatches) it builds a module with heterogeneous stage costs, an interleaved
 * placement (stage s on device s mod D) and link latencies, lets priority mode choose an order
 * (greedy: backward first, else the forward of the latest stage, else W) and stores it, then
 * times fixed-mode runs (what a tuner calls per candidate schedule), priority-mode runs, and
 * fixed-mode runs that record the whole timeline. Prints operations per second and time per run
 * against the targets of issue 3 (>= 5 M operations/s; the 16 x 2 x 128 plan under 5 ms). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sim.h"

/* One benchmark size. */
typedef struct bench_size {
  int devices, per_device, mb; /* pipeline devices, stages per device, microbatches */
} bench_size;

/* The plan: D devices, D*V one-layer stages with costs varying up to 2x (a deterministic
 * pattern), 4 MiB activations, 16 MiB outputs, a 450 GB/s link with 3 us latency. */
static ir_module *make_module(const bench_size *b) {
  ir_module *m = ir_module_new("bench");
  int nst = b->devices * b->per_device;
  ir_field_set(&m->train, IR_F_TRAIN_microbatches, b->mb);
  ir_field_set(&m->train, IR_F_TRAIN_data, 1);
  ir_field_set(&m->intra, IR_F_LINK_bw, 450e9);
  ir_field_set(&m->intra, IR_F_LINK_lat, 3e-6);
  for (int i = 0; i < b->devices; i++) {
    ir_device *d = ir_module_add_device(m, "h100");
    ir_field_set(&d->rec, IR_F_DEVICE_mem, 80.0 * (1 << 30));
    ir_field_set(&d->rec, IR_F_DEVICE_hbm, 3.35e12);
    ir_field_set(&d->rec, IR_F_DEVICE_node, 0);
  }
  for (int s = 0; s < nst; s++) {
    ir_layer *l = ir_module_add_layer(m, "l", IR_KIND_CUSTOM);
    double k = 1.0 + (double)((s * 7919) % 97) / 97.0;
    const struct {
      int field;    /* IR_F_COST_* */
      double value; /* seconds or bytes */
    } cost[] = {
        {IR_F_COST_f, 1e-3 * k},       {IR_F_COST_b, 1.1e-3 * k},    {IR_F_COST_w, 0.9e-3 * k},
        {IR_F_COST_act, 4194304},      {IR_F_COST_act_w, 1048576},   {IR_F_COST_out, 16777216},
        {IR_F_COST_param, 1e9},        {IR_F_COST_grad, 2e8},
    };
    for (size_t i = 0; i < sizeof cost / sizeof cost[0]; i++)
      ir_field_set(&l->cost, cost[i].field, cost[i].value);
    ir_module_add_stage(m, s, s + 1)->device = s % b->devices;
  }
  return m;
}

/* The priority rule of the benchmark (sim_choose_fn): a B first, else the F of the latest stage,
 * else a W. */
static int greedy(void *ctx, const sim_view *v, const sim_cand *c, int n) {
  (void)ctx, (void)v;
  int best = -1;
  for (int i = 0; i < n; i++) {
    if (c[i].kind == IR_OP_B) return i;
    if (c[i].kind == IR_OP_F && (best < 0 || c[best].kind != IR_OP_F || c[i].stage > c[best].stage))
      best = i;
    if (c[i].kind == IR_OP_W && best < 0) best = i;
  }
  return best;
}

/* Best wall time of 'reps' runs of mode o, in seconds; *makespan gets the simulated step. */
static double time_runs(const sim_model *p, const ir_module *m, const sim_opts *o, int reps,
                        sim_result *r, double *makespan) {
  double best = 1e30;
  for (int i = 0; i < reps; i++) {
    double t0 = support_seconds();
    if (sim_run(p, m, o, r) != SIM_OK) {
      fprintf(stderr, "sim_speed: simulation failed\n");
      exit(1);
    }
    double t = support_seconds() - t0;
    if (t < best) best = t;
  }
  *makespan = r->makespan;
  return best;
}

/* usage: sim_speed [REPS [SIZES]]: best of REPS runs (default 200) of the first SIZES sizes
 * (default all; 1 is the smallest, the smoke run of tests/bench). */
int main(int argc, char **argv) {
  int reps = argc > 1 ? atoi(argv[1]) : 200;
  if (reps < 1) reps = 1;
  static const bench_size sizes[] = {
      {4, 1, 32}, {8, 2, 64}, {16, 2, 128}, {32, 4, 256}, {64, 2, 1024},
  };
  size_t nsizes = sizeof sizes / sizeof sizes[0];
  if (argc > 2 && atoi(argv[2]) >= 1 && (size_t)atoi(argv[2]) < nsizes)
    nsizes = (size_t)atoi(argv[2]);
  diag_engine *d = diag_new(stderr);
  printf("simulator speed (best of %d runs each; targets: >= 5 M ops/s, 16x2x128 < 5 ms)\n\n",
         reps);
  printf("%-22s %8s %11s %11s %11s %12s %11s\n", "devices x stages x mb", "ops", "fixed ms",
         "fixed Mop/s", "priority ms", "priority Mop/s", "recorded ms");
  for (size_t i = 0; i < nsizes; i++) {
    const bench_size *b = &sizes[i];
    ir_module *m = make_module(b);
    sim_model *p = sim_model_build(m, d);
    if (!p) return 1;
    long ops = (long)b->devices * b->per_device * b->mb * 3;
    sim_result r = {0};
    sim_opts pri = {.choose = greedy, .order = true}, fixed = {0}, rec = {.record = true};
    double ms_p, ms_f, ms_r;
    double tp = time_runs(p, m, &pri, reps, &r, &ms_p);
    sim_store_order(&r, m);
    double tf = time_runs(p, m, &fixed, reps, &r, &ms_f);
    double tr = time_runs(p, m, &rec, reps, &r, &ms_r);
    if (ms_f != ms_p || ms_r != ms_p) {
      fprintf(stderr, "sim_speed: modes disagree on the makespan\n");
      return 1;
    }
    char label[64];
    snprintf(label, sizeof label, "%d x %d x %d", b->devices, b->per_device, b->mb);
    printf("%-22s %8ld %11.3f %11.1f %11.3f %12.1f %11.3f%s\n", label, ops, tf * 1e3,
           ops / tf * 1e-6, tp * 1e3, ops / tp * 1e-6, tr * 1e3,
           b->devices == 16 && b->per_device == 2 && b->mb == 128
               ? (tf < 5e-3 ? "   (target 5 ms: met)" : "   (target 5 ms: MISSED)")
               : "");
    sim_result_free(&r);
    sim_model_free(p);
    ir_module_free(m);
  }
  diag_free(d);
  return 0;
}
