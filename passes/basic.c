/* basic.c -- the utility passes of the registry: verify, strip-plan, strip-costs, and the
 * test-options pass that exercises the typed option helpers for the pass manager's tests. */
#include <string.h>

#include "passes.h"

/* verify: the verifier as a pass. Errors point at the module's locations when it has them, else
 * at the pass in the pipeline text. */
int pass_run_verify(ir_module *m, const pass_options *opts, diag_engine *d) {
  return ir_verify(m, d, opts->loc) > 0;
}

/* strip-plan: back to a module before partitioning (costs, devices and layers stay). */
int pass_run_strip_plan(ir_module *m, const pass_options *opts, diag_engine *d) {
  (void)opts;
  (void)d;
  ir_module_clear_plan(m);
  return 0;
}

/* strip-costs: every layer as before the cost pass. */
int pass_run_strip_costs(ir_module *m, const pass_options *opts, diag_engine *d) {
  (void)opts;
  (void)d;
  for (int i = 0; i < m->nlayers; i++) memset(&m->layers[i].cost, 0, sizeof m->layers[i].cost);
  ir_module_clear_type_costs(m);
  return 0;
}

/* test-options: parse each given option with the helper of its type and report the value as a
 * remark at the option, so tests can see what a pass receives. The module is not changed. */
int pass_run_test_options(ir_module *m, const pass_options *opts, diag_engine *d) {
  (void)m;
  int bad = 0;
  for (int i = 0; i < opts->count; i++) {
    const pass_option *o = &opts->items[i];
    const char *k = o->key;
    char num[48];
    if (strcmp(k, "int") == 0) {
      int64_t v;
      if (pass_opt_int(opts, k, &v, d)) {
        bad++;
        continue;
      }
      diag_report(d, DIAG_REMARK, o->value_loc, "int = %lld", (long long)v);
    } else if (strcmp(k, "real") == 0) {
      double v;
      if (pass_opt_real(opts, k, &v, d)) {
        bad++;
        continue;
      }
      fmt_shortest_scaled(num, v, 1.0);
      diag_report(d, DIAG_REMARK, o->value_loc, "real = %s", num);
    } else if (strcmp(k, "flag") == 0) {
      bool v;
      if (pass_opt_bool(opts, k, &v, d)) {
        bad++;
        continue;
      }
      diag_report(d, DIAG_REMARK, o->value_loc, "flag = %s", v ? "true" : "false");
    } else if (strcmp(k, "time") == 0 || strcmp(k, "size") == 0 || strcmp(k, "bw") == 0) {
      const char *base = k[0] == 't' ? "s" : k[0] == 's' ? "B" : "B/s";
      double v;
      if (pass_opt_quantity(opts, k, &v, d)) {
        bad++;
        continue;
      }
      fmt_shortest_scaled(num, v, 1.0);
      diag_report(d, DIAG_REMARK, o->value_loc, "%s = %s %s", k, num, base);
    } else if (strcmp(k, "choice") == 0) {
      int v;
      if (pass_opt_choice(opts, k, &v, d)) {
        bad++;
        continue;
      }
      diag_report(d, DIAG_REMARK, o->value_loc, "choice = %s (%d)", o->value, v);
    } else {
      diag_report(d, DIAG_REMARK, o->value_loc, "%s = '%s'", k,
                  pass_opt_str(opts, k, ""));
    }
  }
  return bad > 0;
}
