/* cost_pass.c -- the cost pass (stub until written). */
#include "cost.h"
#include "passes.h"

int pass_run_cost(ir_module *m, const pass_options *opts, diag_engine *d) {
  (void)m;
  (void)opts;
  (void)d;
  return 0;
}
