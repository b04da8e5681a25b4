/* simulate.c -- the simulate pass: run the simulator on the module's plan and record its
 * prediction (makespan, bubble ratio, peak memory, memory verdict, lower bound; per-device busy,
 * idle and peak memory). A device over its memory limit is a warning that names the device, the
 * operation and the time of the overflow; a schedule that cannot run is an error. */
#include "passes.h"
#include "sim.h"

/* Bytes in GiB (messages print them with two decimals). */
static double gib(double b) { return b / 1073741824.0; }

int pass_run_simulate(ir_module *m, const pass_options *opts, diag_engine *d) {
  diag_loc where = m->loc.line ? ir_diag_loc(m->loc) : opts->loc;
  if (!m->schedules) {
    diag_error(d, where, "the module has no schedule: run a schedule pass before 'simulate'");
    return 1;
  }
  sim_model *p = sim_model_build(m, d);
  if (!p) return 1;
  sim_result r = {0};
  sim_opts so = {0};
  int rc = 0;
  if (sim_run(p, m, &so, &r) != SIM_OK) {
    sim_report_failure(&r, d, where);
    rc = 1;
  } else {
    sim_store_prediction(&r, m);
    for (int dv = 0; dv < r.ndevices; dv++) {
      const sim_device_stats *s = &r.dev[dv];
      if (s->peak_mem <= s->mem_limit) continue;
      diag_loc at = m->devices[dv].loc.line ? ir_diag_loc(m->devices[dv].loc) : where;
      if (s->peak_at.stage >= 0)
        diag_warning(d, at, "$d%d exceeds its memory limit: %.2f GiB > %.2f GiB at %s @s%d %d "
                     "(t = %.3f ms)", dv, gib(s->peak_mem), gib(s->mem_limit),
                     ir_op_names[s->peak_at.kind], s->peak_at.stage, s->peak_at.mb,
                     s->peak_time * 1e3);
      else
        diag_warning(d, at, "$d%d exceeds its memory limit before any activation: parameters "
                     "and optimizer state take %.2f GiB > %.2f GiB", dv, gib(s->static_mem),
                     gib(s->mem_limit));
    }
  }
  sim_result_free(&r);
  sim_model_free(p);
  return rc;
}
