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

/* Pool body: run the i-th of the plans in ctx. */
typedef struct cmp_job {
  const ir_module *m;   /* the module */
  const char (*name)[32]; /* plan names */
  const char (*pipe)[256]; /* their pipelines */
  pass_baseline *rows;  /* one row per plan */
} cmp_job;

static void cmp_job_run(void *ctx, int i, int worker) {
  (void)worker;
  cmp_job *j = ctx;
  run_baseline(j->m, j->name[i], j->pipe[i], &j->rows[i]);
}

int pass_compare_on(const ir_module *m, support_pool *pool, pass_baseline **out) {
  int nfixed = (int)(sizeof baselines / sizeof baselines[0]);
  /* The fixed plans, then interleaved 1F1B with every v >= 3 that gives each stage the same
   * number of layers (v x devices divides the body), as Megatron requires; the best of those is
   * kept. */
  int first, end, p = m->ndevices;
  ir_module_body(m, &first, &end);
  int body = end - first, n = nfixed;
  char (*name)[32] = xcalloc((size_t)nfixed + 16, sizeof *name);
  char (*pipe)[256] = xcalloc((size_t)nfixed + 16, sizeof *pipe);
  for (int i = 0; i < nfixed; i++) {
    snprintf(name[i], sizeof name[i], "%s", baselines[i].name);
    snprintf(pipe[i], sizeof pipe[i], "%s", baselines[i].pipeline);
  }
  for (int v = 3; p > 0 && v * p <= body && v <= 16; v++) {
    if (body % (v * p)) continue;
    snprintf(name[n], sizeof name[n], "I-1F1B v=%d", v);
    snprintf(pipe[n], sizeof pipe[n], "partition{method=uniform, chunks=%d},"
             "place{method=interleaved},schedule{method=interleaved-1f1b}", v);
    n++;
  }
  pass_baseline *rows = xcalloc((size_t)n, sizeof *rows);
  cmp_job job = {m, (const char(*)[32])name, (const char(*)[256])pipe, rows};
  if (pool) {
    support_pool_run(pool, n, cmp_job_run, &job);
  } else {
    for (int i = 0; i < n; i++) cmp_job_run(&job, i, 0);
  }
  /* Keep the fastest I-1F1B v >= 3 that ran, after the fixed plans. */
  int best = -1;
  for (int i = nfixed; i < n; i++)
    if (rows[i].ok && (best < 0 || rows[i].makespan < rows[best].makespan)) best = i;
  for (int i = nfixed; i < n; i++)
    if (i != best) pass_baseline_free(&rows[i], 1, false);
  if (best >= 0) rows[nfixed] = rows[best];
  free(name);
  free(pipe);
  *out = rows;
  return nfixed + (best >= 0);
}

int pass_compare(const ir_module *m, pass_baseline **out) { return pass_compare_on(m, NULL, out); }

void pass_baseline_free(pass_baseline *rows, int n, bool array) {
  if (!rows) return;
  for (int i = 0; i < n; i++) {
    free(rows[i].peak_mem);
    free(rows[i].stage_end);
    free(rows[i].stage_dev);
  }
  if (array) free(rows);
}
