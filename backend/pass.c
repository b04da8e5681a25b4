/* pass.c -- the backend's pass, registered into the pass registry by the tools: check-stream
 * lowers the module's plan to instruction streams and proves them (be_lower validates and
 * checks), without changing the module. */
#include "backend.h"
#include "passes.h"

/* check-stream: lower and check; the module is unchanged. */
static int run_check_stream(ir_module *m, const pass_options *opts, diag_engine *d) {
  be_stream *s = be_lower(m, d, opts->loc.file ? opts->loc : ir_diag_loc(m->loc));
  be_stream_free(s);
  return s ? 0 : 1;
}

static const pass_info be_passes[] = {
    {PASS_ID_COUNT, "check-stream",
     "lower the plan to per-rank instruction streams and prove them valid and deadlock-free "
     "(the module is unchanged)",
     run_check_stream},
};

void be_register_passes(void) {
  pass_register_extra(be_passes, (int)(sizeof be_passes / sizeof *be_passes));
}
