/* simulate.c -- the simulate pass (stub until written). */
#include "passes.h"
#include "sim.h"

int pass_run_simulate(ir_module *m, const pass_options *opts, diag_engine *d) {
  (void)m;
  (void)opts;
  (void)d;
  return 0;
}
