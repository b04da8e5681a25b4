/* cost_pass.c -- the cost pass: fills every layer's cost record from the analytic model and the
 * module's profile files (cost/cost.h, docs/cost-model.md). */
#include "cost.h"
#include "passes.h"

/* cost{overwrite=true|false}: run the cost model; with overwrite=false layers whose cost record
 * is already complete keep it. Returns non-zero after reporting errors. */
int pass_run_cost(ir_module *m, const pass_options *opts, diag_engine *d) {
  bool overwrite;
  if (pass_opt_bool(opts, "overwrite", &overwrite, d)) return 1;
  return cost_run(m, overwrite, d) > 0;
}
