/* schedule_impl.h -- private interface between the files of the schedule pass (schedule.c: options,
 * shape checks, the classic orders and the method table; schedule_adaptive.c: the memory-aware
 * list scheduler on the simulator's priority mode). Not part of the passes library's API. */
#ifndef OCTO_SCHEDULE_IMPL_H
#define OCTO_SCHEDULE_IMPL_H

#include <stdbool.h>

#include "passes.h"

/* The plan as a schedule method sees it. Built from a module whose stages are all placed. */
typedef struct sched_shape {
  ir_module *m; /* the module (its stages give the placement) */
  int p;        /* devices: the pipeline size */
  int S;        /* stages */
  int mb;       /* microbatches of one step */
} sched_shape;

/* Knobs of the adaptive method (schedule{method=adaptive, ...}). */
/* Knobs of the adaptive method: pass_adaptive_opts (passes.h). */
typedef pass_adaptive_opts sched_adaptive_opts;

/* Everything a method's builder may need besides the shape. */
typedef struct sched_params {
  const char *method;           /* the method's name, for messages */
  sched_adaptive_opts adaptive; /* adaptive's knobs (ignored by the other methods) */
  diag_loc where;               /* where errors go: the pass in the pipeline */
} sched_params;

/* Adaptive scheduler. Pre: sh->m has stages, all placed, layer costs complete and links between
 * devices that exchange tensors; its schedules are cleared. Post: on success (0) m->schedules
 * holds the order the priority rule chose; otherwise (non-zero) errors were reported through d
 * at prm->where (one microbatch does not fit a device's memory, or the simulator failed). */
int sched_build_adaptive(const sched_shape *sh, const sched_params *prm, diag_engine *d);

#endif
