/* megatron.c -- the megatron pass (octoc --megatron, docs/passes.md#megatron): a plan Megatron-LM
 * can run as exported, within memory. For the module's recompute policy, and with recompute=true
 * for full recomputation (Megatron's --recompute-granularity full --recompute-method uniform
 * --recompute-num-layers 1) too, it cuts the layers where Megatron can (partition{method=balanced,
 * megatron=true}: each stage costed on its own device and kept within its memory limit), places
 * stage i on device i and schedules 1F1B, simulated; the fastest plan that fits is kept. When
 * none fits, the error names the memory the closest one needs. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cost.h"
#include "passes.h"

/* Bytes per GiB, for the error's figures. */
#define GIB (1024.0 * 1024.0 * 1024.0)

/* Megatron's plan of one recompute policy, fit=true or not. */
#define MEGATRON_PLAN(FIT)                                                                   \
  "partition{method=balanced, megatron=true, fit=" FIT "},place{method=sequential},"       \
  "schedule{method=1f1b},simulate"

/* One recompute policy tried. */
typedef struct mg_try {
  ir_module *m;    /* its module, planned when ok (owned) */
  bool ok;         /* a plan within memory was made */
  double over;     /* when !ok and the plan without the limits simulated: the largest bytes a
                      device needs above its limit; else NAN */
  int over_dev;    /* that device */
  double need;     /* its peak memory */
  char why[240];   /* when !ok: the first error of the plan without the limits */
} mg_try;

/* Plan m's copy t->m under recompute policy rc (re-costed when it is not m's): within memory
 * (t->ok), else without the limits, for the figures of the error. */
static void mg_plan(const ir_module *m, int rc, mg_try *t) {
  memset(t, 0, sizeof *t);
  t->over = NAN;
  t->m = ir_module_clone(m);
  pass_quiet q;
  if (!pass_quiet_begin(&q)) {
    snprintf(t->why, sizeof t->why, "out of memory");
    return;
  }
  bool costed = true;
  if (rc != (int)ir_field_value(&m->train, IR_F_TRAIN_recompute)) {
    ir_field_set(&t->m->train, IR_F_TRAIN_recompute, rc);
    costed = cost_run(t->m, true, q.d) == 0;
  }
  if (costed && pass_run_text(t->m, MEGATRON_PLAN("true"), q.d) == PASS_OK) {
    t->ok = ir_field_value(&t->m->predict, IR_F_PREDICT_fits) != 0;
  }
  if (costed && !t->ok && pass_run_text(t->m, MEGATRON_PLAN("false"), q.d) == PASS_OK) {
    t->ok = ir_field_value(&t->m->predict, IR_F_PREDICT_fits) != 0; /* the stage model erred */
    for (int dv = 0; dv < t->m->ndevices; dv++) {
      double need = ir_field_value(&t->m->devices[dv].predict, IR_F_DEVPREDICT_peak_mem);
      double over = need - ir_device_mem_limit(t->m, dv);
      if (isnan(t->over) || over > t->over) t->over = over, t->over_dev = dv, t->need = need;
    }
  }
  pass_quiet_end(&q, t->why, sizeof t->why);
}

int pass_run_megatron(ir_module *m, const pass_options *opts, diag_engine *d) {
  bool recompute;
  if (pass_opt_bool(opts, "recompute", &recompute, d)) return 1;
  int own = (int)ir_field_value(&m->train, IR_F_TRAIN_recompute);
  int policies[2] = {own, IR_RECOMPUTE_FULL};
  int n = recompute && own != IR_RECOMPUTE_FULL ? 2 : 1;
  mg_try tries[2];
  for (int i = 0; i < n; i++) mg_plan(m, policies[i], &tries[i]);
  int best = -1, closest = -1;
  for (int i = 0; i < n; i++) {
    double ms = tries[i].ok ? tries[i].m->predict.makespan : INFINITY;
    if (tries[i].ok && (best < 0 || ms < tries[best].m->predict.makespan)) best = i;
    if (!isnan(tries[i].over) && (closest < 0 || tries[i].over < tries[closest].over))
      closest = i;
  }
  int rc = 0;
  if (best >= 0) {
    ir_module tmp = *m; /* the plan's module becomes m */
    *m = *tries[best].m;
    *tries[best].m = tmp;
  } else if (closest >= 0) {
    const mg_try *t = &tries[closest];
    diag_loc where = m->train_loc.line ? ir_diag_loc(m->train_loc) : opts->loc;
    diag_error(d, where, "no plan Megatron can express fits in memory: its closest (recompute = "
               "%s, %d stages, 1F1B) needs %.2f GiB on $d%d, above its limit of %.2f GiB, and no "
               "cut Megatron can express keeps every stage within it%s",
               ir_enum_name(IR_T_RECOMPUTE,
                            (int)ir_field_value(&t->m->train, IR_F_TRAIN_recompute)),
               t->m->nstages, t->need / GIB, t->over_dev,
               ir_device_mem_limit(t->m, t->over_dev) / GIB,
               n == 1 && own != IR_RECOMPUTE_FULL ? " (recomputation was not tried)" : "");
    rc = 1;
  } else {
    diag_error(d, opts->loc, "no plan Megatron can express: %s",
               tries[0].why[0] ? tries[0].why : "the plan could not be made");
    rc = 1;
  }
  for (int i = 0; i < n; i++) ir_module_free(tries[i].m);
  return rc;
}
