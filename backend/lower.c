/* lower.c -- lowering (stub until written). */
#include "backend.h"
be_stream *be_lower(const ir_module *m, diag_engine *d, diag_loc where) {
  diag_error(d, where, "lowering of @%s: not implemented", m->name); return NULL; }
be_mem be_mem_stats(const be_stream *s, int r) { (void)s; (void)r; be_mem z = {0, 0, 0, -1}; return z; }
