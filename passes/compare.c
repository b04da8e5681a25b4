/* compare.c -- the classic plans side by side: each baseline of compare.def is a pass pipeline
 * (partition, placement, schedule) run on a copy of the module and simulated; a baseline whose
 * passes refuse the model's shape is kept in the list with the reason. This is what
 * `octoc --compare` prints and what --report=json calls "baselines". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "passes.h"
#include "sim.h"

/* The fixed baselines, in the order of the table. */
static const struct {
  const char *name;     /* table name */
  const char *pipeline; /* what makes the plan */
} baselines[] = {
#define BASELINE(NAME, PIPELINE) {NAME, PIPELINE},
#include "compare.def"
#undef BASELINE
};

/* Run 'pipeline' on a copy of m and simulate the result into *row. Errors of the passes go to a
 * private engine; the first one becomes row->why. */
static void run_baseline(const ir_module *m, const char *name, const char *pipeline,
                         pass_baseline *row) {
  memset(row, 0, sizeof *row);
  snprintf(row->name, sizeof row->name, "%s", name);
  snprintf(row->pipeline, sizeof row->pipeline, "%s", pipeline);
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  if (!f) {
    snprintf(row->why, sizeof row->why, "cannot collect the passes' messages: out of memory");
    return;
  }
  diag_engine *d = diag_new(f);
  ir_module *c = ir_module_clone(m);
  if (pass_run_text(c, pipeline, d) == PASS_OK) {
    sim_model *p = sim_model_build(c, d);
    sim_result r = {0};
    if (p && sim_run(p, c, NULL, &r) == SIM_OK) {
      row->ok = true;
      row->makespan = r.makespan;
      row->bubble = r.bubble;
      row->bound = r.lb_work > r.lb_critical ? r.lb_work : r.lb_critical;
      row->fits = r.fits;
      row->ndevices = r.ndevices;
      row->peak_mem = xmalloc((size_t)(r.ndevices ? r.ndevices : 1) * sizeof *row->peak_mem);
      for (int i = 0; i < r.ndevices; i++) row->peak_mem[i] = r.dev[i].peak_mem;
      row->nstages = c->nstages;
      row->stage_end = xmalloc((size_t)(c->nstages ? c->nstages : 1) * sizeof *row->stage_end);
      row->stage_dev = xmalloc((size_t)(c->nstages ? c->nstages : 1) * sizeof *row->stage_dev);
      for (int s = 0; s < c->nstages; s++) {
        row->stage_end[s] = c->stages[s].end;
        row->stage_dev[s] = c->stages[s].device;
      }
    } else if (p) {
      sim_report_failure(&r, d, diag_mkloc(0, 0, 0, 0));
    }
    sim_result_free(&r);
    sim_model_free(p);
  }
  ir_module_free(c);
  diag_free(d);
  fclose(f);
  if (!row->ok) {
    /* The first message, without its location prefix ("<pipeline>:1:2: error: "). */
    const char *msg = text ? strstr(text, "error: ") : NULL;
    msg = msg ? msg + 7 : "the plan could not be made";
    size_t n = strcspn(msg, "\n");
    if (n >= sizeof row->why) n = sizeof row->why - 1;
    memcpy(row->why, msg, n);
    row->why[n] = 0;
  }
  free(text);
}

int pass_compare(const ir_module *m, pass_baseline **out) {
  int n = (int)(sizeof baselines / sizeof baselines[0]);
  /* Interleaved 1F1B with the best v: every v >= 3 that gives each stage the same number of
   * layers (v x devices divides the body), as Megatron requires. */
  int first, end, p = m->ndevices;
  ir_module_body(m, &first, &end);
  int body = end - first;
  pass_baseline *rows = xcalloc((size_t)n + 1, sizeof *rows); /* + the best I-1F1B v >= 3 */
  for (int i = 0; i < n; i++) run_baseline(m, baselines[i].name, baselines[i].pipeline, &rows[i]);
  pass_baseline best = {0};
  bool have_best = false;
  for (int v = 3; p > 0 && v * p <= body && v <= 16; v++) {
    if (body % (v * p)) continue;
    char name[32], pipe[256];
    snprintf(name, sizeof name, "I-1F1B v=%d", v);
    snprintf(pipe, sizeof pipe, "partition{method=uniform, chunks=%d},place{method=interleaved},"
             "schedule{method=interleaved-1f1b}", v);
    pass_baseline row;
    run_baseline(m, name, pipe, &row);
    if (row.ok && (!have_best || row.makespan < best.makespan)) {
      pass_baseline_free(&best, 1, false);
      best = row;
      have_best = true;
    } else {
      pass_baseline_free(&row, 1, false);
    }
  }
  if (have_best) rows[n++] = best;
  *out = rows;
  return n;
}

void pass_baseline_free(pass_baseline *rows, int n, bool array) {
  if (!rows) return;
  for (int i = 0; i < n; i++) {
    free(rows[i].peak_mem);
    free(rows[i].stage_end);
    free(rows[i].stage_dev);
  }
  if (array) free(rows);
}
