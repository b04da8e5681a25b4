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
  pass_quiet q;
  if (!pass_quiet_begin(&q)) {
    snprintf(row->why, sizeof row->why, "cannot collect the passes' messages: out of memory");
    return;
  }
  diag_engine *d = q.d;
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
  pass_quiet_end(&q, row->why, sizeof row->why);
  if (row->ok) row->why[0] = 0;
  else if (!row->why[0]) snprintf(row->why, sizeof row->why, "the plan could not be made");
}

bool pass_quiet_begin(pass_quiet *q) {
  memset(q, 0, sizeof *q);
  q->f = open_memstream(&q->text, &q->len);
  if (!q->f) return false;
  q->d = diag_new(q->f);
  return true;
}

void pass_quiet_end(pass_quiet *q, char *why, size_t n) {
  diag_free(q->d);
  fclose(q->f);
  /* The first message, without its location prefix ("<pipeline>:1:2: error: "). */
  const char *msg = q->text ? strstr(q->text, "error: ") : NULL;
  size_t k = msg ? strcspn(msg + 7, "\n") : 0;
  if (k >= n) k = n - 1;
  if (msg) memcpy(why, msg + 7, k);
  why[k] = 0;
  free(q->text);
  memset(q, 0, sizeof *q);
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

/* The baselines of compare.def (megatron: only uniform 1F1B and I-1F1B v=2), then the best
 * interleaved 1F1B with v > 2. */
static int compare(const ir_module *m, support_pool *pool, bool megatron, pass_baseline **out) {
  int nall = (int)(sizeof baselines / sizeof baselines[0]), nfixed = 0;
  /* The fixed plans, then interleaved 1F1B with every v >= 3 that gives each stage the same
   * number of layers (v x devices divides the body), as Megatron requires; the best of those is
   * kept. */
  int first, end, p = m->ndevices;
  ir_module_body(m, &first, &end);
  int body = end - first, n;
  char (*name)[32] = xcalloc((size_t)nall + 16, sizeof *name);
  char (*pipe)[256] = xcalloc((size_t)nall + 16, sizeof *pipe);
  for (int i = 0; i < nall; i++) {
    if (megatron && strcmp(baselines[i].name, "S-1F1B") != 0 &&
        strcmp(baselines[i].name, "I-1F1B v=2") != 0)
      continue;
    snprintf(name[nfixed], sizeof name[nfixed], "%s", baselines[i].name);
    snprintf(pipe[nfixed], sizeof pipe[nfixed], "%s", baselines[i].pipeline);
    nfixed++;
  }
  n = nfixed;
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

int pass_compare_on(const ir_module *m, support_pool *pool, pass_baseline **out) {
  return compare(m, pool, false, out);
}

int pass_compare_megatron(const ir_module *m, support_pool *pool, pass_baseline **out) {
  return compare(m, pool, true, out);
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
