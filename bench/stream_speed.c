/* stream_speed.c -- speed and buffer figures of the backend on synthetic plans: for each size
 * (devices, stages per device, microbatches) it builds a module with heterogeneous costs, places
 * the stages in Megatron's loop, schedules them (interleaved 1F1B, or 1F1B with one stage per
 * device), and times be_lower (simulation, reference order, lowering, buffer placement, and the
 * validator and checker it runs), then be_validate, be_check, be_write and be_read on their own.
 * It also prints, over the ranks, the largest ratio of arena size to peak live bytes (the
 * fragmentation of the buffer placement). Figures only. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "backend.h"
#include "passes.h"

/* One benchmark size. */
typedef struct bench_size {
  int devices, per_device, mb; /* pipeline devices, stages per device, microbatches */
} bench_size;

/* D devices, D*V one-layer stages with costs and activations varying up to 2x (a deterministic
 * pattern), 16 MiB outputs, a 450 GB/s link with 3 us latency, scheduled. NULL when the passes
 * refuse the shape. */
static ir_module *make_plan(const bench_size *b, diag_engine *d) {
  ir_module *m = ir_module_new("bench");
  int nst = b->devices * b->per_device;
  ir_field_set(&m->train, IR_F_TRAIN_microbatches, b->mb);
  ir_field_set(&m->train, IR_F_TRAIN_micro_batch, 1);
  ir_field_set(&m->train, IR_F_TRAIN_seq, 4096);
  ir_field_set(&m->train, IR_F_TRAIN_data, 1);
  ir_field_set(&m->intra, IR_F_LINK_bw, 450e9);
  ir_field_set(&m->intra, IR_F_LINK_lat, 3e-6);
  for (int i = 0; i < b->devices; i++) {
    ir_device *dv = ir_module_add_device(m, "h100");
    ir_field_set(&dv->rec, IR_F_DEVICE_mem, 80.0 * (1 << 30));
    ir_field_set(&dv->rec, IR_F_DEVICE_hbm, 3.35e12);
    ir_field_set(&dv->rec, IR_F_DEVICE_node, 0);
  }
  for (int s = 0; s < nst; s++) {
    ir_layer *l = ir_module_add_layer(m, "l", IR_KIND_CUSTOM);
    double k = 1.0 + (double)((s * 7919) % 97) / 97.0;
    const struct {
      int field;    /* IR_F_COST_* */
      double value; /* seconds or bytes */
    } cost[] = {
        {IR_F_COST_f, 1e-3 * k},           {IR_F_COST_b, 1.1e-3 * k},
        {IR_F_COST_w, 0.9e-3 * k},         {IR_F_COST_act, 4194304.0 * (int)(4 * k)},
        {IR_F_COST_act_w, 1048576},        {IR_F_COST_out, 16777216},
        {IR_F_COST_param, 1e9},            {IR_F_COST_grad, 2e8},
    };
    for (size_t i = 0; i < sizeof cost / sizeof cost[0]; i++)
      ir_field_set(&l->cost, cost[i].field, cost[i].value);
    l->p[IR_LP_CUSTOM_F] = cost[0].value; /* a custom layer's own times, which the IR requires */
    l->p[IR_LP_CUSTOM_B] = cost[1].value;
  }
  char text[200];
  snprintf(text, sizeof text,
           "partition{method=uniform, chunks=%d},place{method=%s},schedule{method=%s}",
           b->per_device, b->per_device > 1 ? "interleaved" : "sequential",
           b->per_device > 1 ? "interleaved-1f1b" : "1f1b");
  if (pass_run_text(m, text, d) != PASS_OK) {
    ir_module_free(m);
    return NULL;
  }
  return m;
}

/* usage: stream_speed [SIZES]: the first SIZES sizes (default all; 1 is the smallest, the smoke
 * run of tests/bench). */
int main(int argc, char **argv) {
  static const bench_size sizes[] = {{4, 1, 32},  {8, 1, 64},  {8, 4, 64},
                                     {16, 2, 128}, {16, 4, 256}, {32, 2, 256}};
  size_t nsizes = sizeof sizes / sizeof *sizes;
  if (argc > 1 && atoi(argv[1]) >= 1 && (size_t)atoi(argv[1]) < nsizes)
    nsizes = (size_t)atoi(argv[1]);
  diag_engine *d = diag_new(stderr);
  printf("%-16s %8s %9s %9s %9s %9s %9s %9s %7s\n", "devices x v x m", "instrs", "lower ms",
         "valid ms", "check ms", "write ms", "read ms", "MB", "arena/peak");
  for (size_t i = 0; i < nsizes; i++) {
    const bench_size *b = &sizes[i];
    ir_module *m = make_plan(b, d);
    if (!m) continue;
    double t0 = support_seconds();
    be_stream *s = be_lower(m, d, diag_mkloc(0, 0, 0, 0));
    double t_lower = support_seconds() - t0;
    if (!s) {
      ir_module_free(m);
      continue;
    }
    long instrs = 0;
    double worst = 1;
    for (int r = 0; r < s->nranks; r++) {
      instrs += s->ranks[r].ncode;
      be_mem mm = be_mem_stats(s, r);
      if (mm.peak_live > 0 && mm.arena_bytes / mm.peak_live > worst)
        worst = mm.arena_bytes / mm.peak_live;
    }
    strbuf err = {0}, bin = {0};
    t0 = support_seconds();
    int ok = be_validate(s, &err) == 0;
    double t_valid = support_seconds() - t0;
    t0 = support_seconds();
    ok &= be_check(s, &err) == 0;
    double t_check = support_seconds() - t0;
    t0 = support_seconds();
    be_write(s, &bin);
    double t_write = support_seconds() - t0;
    t0 = support_seconds();
    be_stream *back = be_read((const uint8_t *)bin.data, bin.len, &err);
    double t_read = support_seconds() - t0;
    char label[40];
    snprintf(label, sizeof label, "%d x %d x %d", b->devices, b->per_device, b->mb);
    printf("%-16s %8ld %9.1f %9.1f %9.1f %9.1f %9.1f %9.2f %7.3f%s\n", label, instrs,
           t_lower * 1e3, t_valid * 1e3, t_check * 1e3, t_write * 1e3, t_read * 1e3,
           (double)bin.len / 1e6, worst, ok && back ? "" : "  FAILED");
    be_stream_free(back);
    strbuf_free(&err);
    strbuf_free(&bin);
    be_stream_free(s);
    ir_module_free(m);
  }
  diag_free(d);
  return 0;
}
