/* config.c -- the configuration search (the config pass, docs/passes.md#config): chooses the
 * train fields a spec leaves free (tensor, pipeline and data degrees, micro_batch, recompute,
 * zero) together with the partition, placement and schedule. Every valid configuration is
 * costed and bounded (sim_bound); they are tuned in bound order, a configuration whose bound
 * cannot beat the best step found is skipped, and the best few get a long tune. Beside it: the
 * best configuration of the grid a Megatron-LM user would try by hand, and the PP-only tuned plan.
 * Deterministic: candidates are enumerated, judged and tie-broken in one fixed order. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cost.h"
#include "passes.h"
#include "sim.h"

/* One configuration under evaluation. */
typedef struct cfg_cand {
  pass_config_row row; /* its choice and figures */
  ir_module *m;        /* its module: costs, then its latest plan; NULL when costing failed */
  double overflow;     /* when no plan fits: bytes over the limit of the best one found */
  bool late_pruned;    /* its exact bound, computed in its wave, was not below the best step */
} cfg_cand;

/* What every step of the search shares. */
typedef struct cfg_ctx {
  const ir_module *m;      /* the module with free fields (not changed until the end) */
  pass_config_opts o;      /* options */
  ir_module *base;         /* m without its devices: what each candidate's module is cloned
                              from (a free pipeline gives m a device per GPU) */
  ir_device *tpl;          /* the last of m's devices on each node, by node: the templates of
                              each node's GPUs (copies; their strings live in m) */
  int ntpl;                /* their count */
  cfg_cand *c;             /* candidates, in enumeration order */
  int n, cap;              /* count, allocated */
  double model_flops;      /* 3 x forward FLOPs of every layer for one sequence */
  double peak;             /* peak FLOP/s of device 0's type */
} cfg_ctx;

/* Whether the train field f of m is fixed (not free; unset fields take their defaults). */
static bool fixed(const ir_module *m, int f) { return !ir_train_is_free(&m->train, f); }

/* The value of train field f of m (its default when unset). */
static int64_t val(const ir_module *m, int f) { return (int64_t)ir_field_value(&m->train, f); }

/* Whether tensor degree t divides every dimension tensor parallelism splits (layer_params.def). */
static bool tensor_divides(const ir_module *m, int64_t t) {
  for (int i = 0; i < m->nlayers; i++)
    if (ir_layer_tp_misfit(&m->layers[i], t) >= 0) return false;
  return true;
}

/* The module of configuration r: m with r's train fields, no plan and no costs, and one device
 * per pipeline rank. Rank i owns GPUs [i t d, (i+1) t d) (Megatron's order: tensor, then data,
 * then pipeline), so it takes the type of the node its first GPU is in (the module's device on
 * that node, or on the nearest node before it). */
static ir_module *cand_module(const cfg_ctx *x, const pass_config_row *r) {
  ir_module *c = ir_module_clone(x->base);
  ir_train *t = &c->train;
  t->free = 0;
  ir_field_set(t, IR_F_TRAIN_pipeline, (double)r->pipeline);
  ir_field_set(t, IR_F_TRAIN_tensor, (double)r->tensor);
  ir_field_set(t, IR_F_TRAIN_data, (double)r->data);
  ir_field_set(t, IR_F_TRAIN_micro_batch, (double)r->micro_batch);
  ir_field_set(t, IR_F_TRAIN_recompute, r->recompute);
  ir_field_set(t, IR_F_TRAIN_zero, r->zero);
  ir_field_set(t, IR_F_TRAIN_microbatches,
               (double)(t->global_batch / (r->micro_batch * r->data)));
  ir_module_clear_plan(c);
  ir_module_clear_type_costs(c);
  for (int i = 0; i < c->nlayers; i++) memset(&c->layers[i].cost, 0, sizeof c->layers[i].cost);
  int64_t gpn = (int64_t)ir_field_value(&c->cluster, IR_F_CLUSTER_gpus_per_node);
  for (int64_t i = 0; i < r->pipeline; i++) {
    int64_t node = i * r->tensor * r->data / gpn;
    int k = 0, hi = x->ntpl - 1; /* the template on the latest node not after 'node' */
    while (k < hi) {
      int mid = k + (hi - k + 1) / 2;
      if (x->tpl[mid].rec.node <= node) k = mid;
      else hi = mid - 1;
    }
    ir_device *dv = ir_module_add_device(c, x->tpl[k].type);
    dv->rec = x->tpl[k].rec;
    ir_field_set(&dv->rec, IR_F_DEVICE_node, (double)node);
    dv->loc = x->tpl[k].loc;
    dv->loc.file = NULL; /* the template's string lives in the module's arena */
  }
  return c;
}

/* A device of the module, for ordering the templates: its node and its index. */
typedef struct cfg_tpl_key {
  double node; /* the node its GPUs are in */
  int index;   /* its index in the module */
} cfg_tpl_key;
/* qsort order of devices: by node, then by their order in the module. */
static int tpl_cmp(const void *a, const void *b) {
  const cfg_tpl_key *x = a, *y = b;
  if (x->node != y->node) return x->node < y->node ? -1 : 1;
  return (x->index > y->index) - (x->index < y->index);
}

/* Add configuration r to the candidates. */
static void cand_add(cfg_ctx *x, const pass_config_row *r) {
  VEC_RESERVE(x->c, x->n, x->cap);
  cfg_cand *k = &x->c[x->n++];
  memset(k, 0, sizeof *k);
  k->row = *r;
  k->row.gpus = r->tensor * r->pipeline * r->data;
  k->row.makespan = INFINITY;
  snprintf(k->row.plan, sizeof k->row.plan, "-");
}

/* Enumerate the configurations the free fields allow, in a fixed order: GPUs used (all first),
 * tensor, pipeline, micro_batch, recompute, zero. 'grid': Megatron's hand grid instead (all
 * GPUs, micro_batch 1, 2, 4, every recompute, the fixed or no ZeRO). */
static void enumerate(cfg_ctx *x, bool grid) {
  const ir_module *m = x->m;
  const ir_train *t = &m->train;
  int64_t gpn = (int64_t)ir_field_value(&m->cluster, IR_F_CLUSTER_gpus_per_node);
  int64_t gpus = gpn * (int64_t)ir_field_value(&m->cluster, IR_F_CLUSTER_nodes);
  bool flash = ir_field_value(t, IR_F_TRAIN_flash) != 0;
  for (int64_t g = gpus; g >= 1; g--) {
    if (gpus % g != 0 || (g != gpus && (grid || !x->o.fewer))) continue;
    for (int64_t tp = 1; tp <= gpn && tp <= g; tp++) {
      if (gpn % tp || g % tp || !tensor_divides(m, tp)) continue;
      if (fixed(m, IR_F_TRAIN_tensor) && tp != val(m, IR_F_TRAIN_tensor)) continue;
      for (int64_t pp = 1; pp <= g / tp && pp <= m->nlayers; pp++) {
        if ((g / tp) % pp) continue;
        int64_t dp = g / tp / pp;
        if (fixed(m, IR_F_TRAIN_pipeline) && pp != val(m, IR_F_TRAIN_pipeline)) continue;
        if (fixed(m, IR_F_TRAIN_data) && dp != val(m, IR_F_TRAIN_data)) continue;
        if (t->global_batch % dp) continue;
        int64_t mb_max = fixed(m, IR_F_TRAIN_micro_batch) ? val(m, IR_F_TRAIN_micro_batch)
                         : grid                            ? 4
                                                           : x->o.max_micro_batch;
        /* the microbatches per pipeline stay within their limit (ir/limits.def) and the
           schedule's operations within IR_MAX_OPS: smaller micro_batches are not candidates */
        int64_t per = t->global_batch / dp;
        double most = fmin(ir_field_limit(IR_F_TRAIN_microbatches)->max, IR_MAX_OPS / (3.0 * pp));
        for (int64_t mb = (int64_t)ceil((double)per / most); mb <= per && mb <= mb_max; mb++) {
          if (per % mb) continue;
          if (fixed(m, IR_F_TRAIN_micro_batch) ? mb != val(m, IR_F_TRAIN_micro_batch)
                                               : grid ? mb != 1 && mb != 2 && mb != 4
                                                      : mb > x->o.max_micro_batch)
            continue;
          for (int rc = 0; rc < 3; rc++) {
            if (fixed(m, IR_F_TRAIN_recompute) ? rc != val(m, IR_F_TRAIN_recompute)
                                               : !grid && rc == IR_RECOMPUTE_SELECTIVE && flash)
              continue; /* with flash attention, selective keeps the same memory for more time */
            for (int z = 0; z < 2; z++) {
              if (fixed(m, IR_F_TRAIN_zero) ? z != val(m, IR_F_TRAIN_zero)
                                            : z == 1 && (grid || dp == 1))
                continue;
              pass_config_row r = {.tensor = tp, .pipeline = pp, .data = dp, .micro_batch = mb,
                                   .recompute = rc, .zero = z};
              cand_add(x, &r);
            }
          }
        }
      }
    }
  }
}

/* Pool body: cost candidate i and compute its bound. */
static void cand_prepare(void *ctx, int i, int worker) {
  (void)worker;
  cfg_ctx *x = ctx;
  cfg_cand *k = &x->c[i];
  pass_quiet q;
  k->row.bound = INFINITY;
  if (!pass_quiet_begin(&q)) {
    snprintf(k->row.why, sizeof k->row.why, "out of memory");
    return;
  }
  k->m = cand_module(x, &k->row);
  sim_bound b;
  bool costed = cost_run(k->m, true, q.d) == 0;
  if (costed && sim_bound_quick(k->m, &b)) k->row.bound = b.bound; /* exact later, if tuned */
  pass_quiet_end(&q, k->row.why, sizeof k->row.why);
  if (!isfinite(k->row.bound)) {
    if (!k->row.why[0]) snprintf(k->row.why, sizeof k->row.why, "no bound: a layer has no cost");
    ir_module_free(k->m);
    k->m = NULL;
  }
}

/* Fill r's figures from its module after a plan was simulated. */
static void row_figures(const cfg_ctx *x, pass_config_row *r, const ir_module *c) {
  r->makespan = c->predict.makespan;
  r->bubble = c->predict.bubble;
  r->peak_mem = c->predict.peak_mem;
  double seq = ir_field_value(&c->train, IR_F_TRAIN_seq);
  double gb = (double)c->train.global_batch;
  r->tokens_per_gpu = gb * seq / r->makespan / (double)r->gpus;
  r->mfu = x->peak > 0 ? x->model_flops * gb / r->makespan / ((double)r->gpus * x->peak) : 0;
}

/* Plan candidate k (its plan replaced) and simulate the result: a tune of 'evals' plans on 'jobs'
 * threads, or with x->o.megatron the megatron pass under the candidate's own recompute policy. */
static void cand_tune(const cfg_ctx *x, cfg_cand *k, int evals, int jobs) {
  pass_quiet q;
  if (!k->m || !pass_quiet_begin(&q)) return;
  pass_tune_opts to = pass_tune_defaults();
  to.evals = evals;
  to.jobs = jobs;
  to.seed = x->o.seed;
  pass_tune_stats ts;
  memset(&ts, 0, sizeof ts);
  k->row.makespan = INFINITY;
  if (x->o.megatron) {
    if (pass_run_text(k->m, "megatron{recompute=false}", q.d) == PASS_OK) {
      row_figures(x, &k->row, k->m);
      snprintf(k->row.plan, sizeof k->row.plan, "megatron");
    }
    k->row.evals++;
  } else {
    if (pass_tune(k->m, &to, &ts, q.d, diag_mkloc(0, 0, 0, 0)) == 0 &&
        pass_run_text(k->m, "simulate", q.d) == PASS_OK) {
      row_figures(x, &k->row, k->m);
      snprintf(k->row.plan, sizeof k->row.plan, "%s", ts.start);
    }
    k->overflow = ts.overflow;
    k->row.evals += ts.evaluations;
  }
  pass_tune_stats_free(&ts);
  pass_quiet_end(&q, k->row.why, sizeof k->row.why);
  if (isfinite(k->row.makespan)) k->row.why[0] = 0;
}

/* Whether candidate a ranks before b: the faster step, then the earlier in enumeration order. */
static bool ranks_before(const cfg_cand *a, const cfg_cand *b) {
  if (a->row.makespan != b->row.makespan) return a->row.makespan < b->row.makespan;
  return a < b;
}

/* Whether candidate a comes before b in bound order: the smaller bound, then the earlier. */
static bool bound_before(const cfg_cand *a, const cfg_cand *b) {
  if (a->row.bound != b->row.bound) return a->row.bound < b->row.bound;
  return a < b;
}

/* Sort the indices idx[0..n) of x's candidates by bound (by_bound) or by step (insertion sort:
 * n is at most a few thousand, and the order is total, so the result is unique). */
static void sort_cands(const cfg_ctx *x, int *idx, int n, bool by_bound) {
  for (int i = 1; i < n; i++) {
    int v = idx[i], j = i;
    const cfg_cand *c = &x->c[v];
    while (j > 0 && (by_bound ? bound_before(c, &x->c[idx[j - 1]])
                              : ranks_before(c, &x->c[idx[j - 1]]))) {
      idx[j] = idx[j - 1];
      j--;
    }
    idx[j] = v;
  }
}

/* Free every candidate of x and forget them. */
static void cands_free(cfg_ctx *x) {
  for (int i = 0; i < x->n; i++) ir_module_free(x->c[i].m);
  free(x->c);
  x->c = NULL;
  x->n = x->cap = 0;
}

/* A wave: candidates evaluated side by side, one per thread (each tune single-threaded). */
typedef struct cfg_wave {
  cfg_ctx *x;     /* the search */
  const int *idx; /* the candidates of the wave */
  int evals;      /* plans each tune simulates */
  bool grid;      /* the Megatron grid's plans instead of tunes */
  double best;    /* the best step before the wave: a tune whose exact bound is not below it is
                     skipped */
} cfg_wave;

/* Pool body of the grid, defined below. */
static void grid_plan(void *ctx, int i, int worker);

/* Pool body: evaluate the i-th candidate of a wave (tune it, or make its grid plans). */
static void wave_run(void *ctx, int i, int worker) {
  cfg_wave *w = ctx;
  cfg_cand *k = &w->x->c[w->idx[i]];
  if (w->grid) {
    grid_plan(w->x, w->idx[i], worker);
    return;
  }
  sim_bound b; /* the exact bound (the quick one ordered the search) */
  if (isfinite(w->best) && sim_bound_compute(k->m, &b) && b.bound > k->row.bound)
    k->row.bound = b.bound;
  k->late_pruned = k->row.bound >= w->best;
  if (!k->late_pruned) cand_tune(w->x, k, w->evals, 1);
}

/* Candidates per wave: fixed, so the result does not depend on the thread count. */
#define CFG_WAVE 8

/* Evaluate the candidates idx[0..n) of x, sorted by bound, in waves of CFG_WAVE: a wave takes
 * the next candidates that have a bound below *best (all of them when 'all'), evaluates them on
 * the pool (grid: the Megatron plans; else a tune of 'evals' plans), then lowers *best by their
 * steps. Returns the number of candidates evaluated; *pruned counts those skipped. */
static int waves(cfg_ctx *x, support_pool *pool, const int *idx, int n, bool grid, int evals,
                 bool all, double *best, int *pruned) {
  int *wave = xmalloc(CFG_WAVE * sizeof *wave), done = 0;
  for (int j = 0; j < n;) {
    int k = 0;
    for (; j < n && k < CFG_WAVE; j++) {
      cfg_cand *c = &x->c[idx[j]];
      if (!c->m) continue;
      if (!all && c->row.bound >= *best) {
        (*pruned)++;
        continue;
      }
      wave[k++] = idx[j];
    }
    cfg_wave w = {x, wave, evals, grid, all ? INFINITY : *best};
    support_pool_run(pool, k, wave_run, &w);
    for (int i = 0; i < k; i++) {
      const cfg_cand *c = &x->c[wave[i]];
      if (c->late_pruned) (*pruned)++;
      else done++;
      if (c->row.makespan < *best) *best = c->row.makespan;
    }
  }
  free(wave);
  return done;
}

/* Pool body of the grid: the best Megatron plan (uniform 1F1B or interleaved 1F1B) of grid
 * point i, already costed. */
static void grid_plan(void *ctx, int i, int worker) {
  (void)worker;
  cfg_ctx *x = ctx;
  cfg_cand *k = &x->c[i];
  if (!k->m) return;
  pass_baseline *rows;
  int n = pass_compare_megatron(k->m, NULL, &rows);
  int best = -1;
  for (int j = 0; j < n; j++)
    if (rows[j].ok && rows[j].fits && (best < 0 || rows[j].makespan < rows[best].makespan))
      best = j;
  if (best >= 0) {
    pass_quiet q;
    if (pass_quiet_begin(&q)) {
      strbuf text = {0};
      strbuf_printf(&text, "%s,simulate", rows[best].pipeline);
      if (pass_run_text(k->m, strbuf_cstr(&text), q.d) == PASS_OK) {
        row_figures(x, &k->row, k->m);
        snprintf(k->row.plan, sizeof k->row.plan, "%s", rows[best].name);
      }
      strbuf_free(&text);
      pass_quiet_end(&q, k->row.why, sizeof k->row.why);
    }
  }
  pass_baseline_free(rows, n, true);
}

/* The baselines: the best Megatron grid configuration and the PP-only tuned plan. */
static void baselines(cfg_ctx *x, support_pool *pool, pass_config_stats *st) {
  enumerate(x, true);
  support_pool_run(pool, x->n, cand_prepare, x);
  int *idx = xmalloc((size_t)(x->n ? x->n : 1) * sizeof *idx);
  for (int i = 0; i < x->n; i++) idx[i] = i;
  sort_cands(x, idx, x->n, true);
  double step = INFINITY;
  int pruned = 0;
  waves(x, pool, idx, x->n, true, 0, false, &step, &pruned);
  free(idx);
  int best = -1;
  for (int i = 0; i < x->n; i++)
    if (isfinite(x->c[i].row.makespan) && (best < 0 || ranks_before(&x->c[i], &x->c[best])))
      best = i;
  if (best >= 0) {
    st->grid = x->c[best].row;
    st->has_grid = true;
  }
  cands_free(x);
  /* PP-only: tensor = data = 1 and as many stages' devices as there are GPUs (or layers). */
  const ir_module *m = x->m;
  const ir_train *t = &m->train;
  int64_t gpus = (int64_t)(ir_field_value(&m->cluster, IR_F_CLUSTER_gpus_per_node) *
                           ir_field_value(&m->cluster, IR_F_CLUSTER_nodes));
  int64_t pp = gpus;
  while (pp > m->nlayers || gpus % pp) pp--;
  /* a free field takes PP-only's value; a fixed one must agree with it */
  pass_config_row r = {.tensor = 1, .pipeline = pp, .data = 1, .micro_batch = 1};
  if (fixed(m, IR_F_TRAIN_micro_batch)) r.micro_batch = val(m, IR_F_TRAIN_micro_batch);
  if (fixed(m, IR_F_TRAIN_recompute)) r.recompute = (int)val(m, IR_F_TRAIN_recompute);
  if (fixed(m, IR_F_TRAIN_zero)) r.zero = (int)val(m, IR_F_TRAIN_zero);
  if ((fixed(m, IR_F_TRAIN_tensor) && val(m, IR_F_TRAIN_tensor) != 1) ||
      (fixed(m, IR_F_TRAIN_data) && val(m, IR_F_TRAIN_data) != 1) ||
      (fixed(m, IR_F_TRAIN_pipeline) && val(m, IR_F_TRAIN_pipeline) != pp) ||
      t->global_batch % r.micro_batch)
    return;
  cand_add(x, &r);
  cand_prepare(x, 0, 0);
  cand_tune(x, &x->c[0], x->o.long_evals, x->o.jobs);
  if (isfinite(x->c[0].row.makespan)) {
    st->pp_only = x->c[0].row;
    st->has_pp_only = true;
  }
  cands_free(x);
}

/* Report why no configuration has a plan: the divisibility, or the smallest memory overflow, or
 * the first candidate's reason. */
static void no_config(const cfg_ctx *x, diag_engine *d, diag_loc where) {
  const ir_train *t = &x->m->train;
  if (x->n == 0) {
    diag_error(d, where, "no configuration divides evenly: the fixed train fields leave no "
               "tensor x pipeline x data that divides the cluster's GPUs (tensor within a node "
               "and dividing every tensor-split dimension, pipeline at most the %d layers) with "
               "a micro_batch x data dividing global_batch = %lld into at most %.0f microbatches "
               "(micro_batch at most %d)", x->m->nlayers, (long long)t->global_batch,
               ir_field_limit(IR_F_TRAIN_microbatches)->max, x->o.max_micro_batch);
    return;
  }
  const cfg_cand *best = NULL;
  for (int i = 0; i < x->n; i++)
    if (x->c[i].overflow > 0 && (!best || x->c[i].overflow < best->overflow)) best = &x->c[i];
  const pass_config_row *r = best ? &best->row : &x->c[0].row;
  strbuf sb = {0};
  if (best) ir_format_value(&sb, IR_T_BYTES, best->overflow);
  diag_error(d, where, "no configuration %s: the closest (tensor = %lld, pipeline = %lld, data "
             "= %lld, micro_batch = %lld, recompute = %s, zero = %d) %s%s%s",
             best ? "fits in memory" : "has a plan", (long long)r->tensor,
             (long long)r->pipeline, (long long)r->data, (long long)r->micro_batch,
             ir_enum_name(IR_T_RECOMPUTE, r->recompute), r->zero,
             best ? "still needs " : "failed: ",
             best ? strbuf_cstr(&sb) : r->why[0] ? r->why : "no plan",
             best ? " more than the limit" : "");
  strbuf_free(&sb);
}

int pass_config(ir_module *m, const pass_config_opts *o, pass_config_stats *st, diag_engine *d,
                diag_loc where) {
  memset(st, 0, sizeof *st);
  double t0 = support_seconds();
  if (!m->cluster_name || m->ndevices == 0) {
    diag_error(d, where, "config: the module has no cluster to choose a configuration for");
    return 1;
  }
  if (m->nlinks > 0 && ir_train_first_free(m) >= 0) {
    diag_error(d, where, "config: explicit links name devices, so the configuration cannot "
               "change them: fix every free train field or drop the links");
    return 1;
  }
  cfg_ctx x = {.m = m, .o = *o, .base = ir_module_clone(m)};
  x.base->ndevices = 0;
  x.tpl = xmalloc((size_t)m->ndevices * sizeof *x.tpl);
  cfg_tpl_key *order = xmalloc((size_t)m->ndevices * sizeof *order);
  for (int i = 0; i < m->ndevices; i++) order[i] = (cfg_tpl_key){m->devices[i].rec.node, i};
  qsort(order, (size_t)m->ndevices, sizeof *order, tpl_cmp);
  for (int i = 0; i < m->ndevices; i++) /* the last device of each node is its template */
    if (i + 1 == m->ndevices || order[i + 1].node != order[i].node)
      x.tpl[x.ntpl++] = m->devices[order[i].index];
  free(order);
  for (int i = 0; i < m->nlayers; i++)
    x.model_flops += 3 * cost_forward_flops_per_sequence(m, &m->layers[i]);
  x.peak = ir_field_value(&m->devices[0].rec, IR_F_DEVICE_peak);
  support_pool *pool = support_pool_new(o->jobs > 0 ? o->jobs : support_cores());

  enumerate(&x, false);
  st->candidates = x.n;
  support_pool_run(pool, x.n, cand_prepare, &x);
  int *idx = xmalloc((size_t)(x.n ? x.n : 1) * sizeof *idx);
  for (int i = 0; i < x.n; i++) idx[i] = i;
  sort_cands(&x, idx, x.n, true);
  /* Tune in bound order, in waves; a bound at or above the best step found cannot win. */
  double best = INFINITY;
  int tuned = waves(&x, pool, idx, x.n, false, o->exhaustive ? o->long_evals : o->evals,
                    o->exhaustive, &best, &st->pruned);
  if (o->exhaustive) st->long_tuned = tuned;
  else st->short_tuned = tuned;
  /* The best few by their short tune get a long one (side by side); a long tune that does worse
   * keeps the short one's plan. The megatron pass has no effort to raise. */
  sort_cands(&x, idx, x.n, false);
  int top = 0;
  while (!o->exhaustive && !o->megatron && top < x.n && top < o->top && isfinite(x.c[idx[top]].row.makespan))
    top++;
  pass_config_row *before = xmalloc((size_t)(top ? top : 1) * sizeof *before);
  ir_module **keep = xmalloc((size_t)(top ? top : 1) * sizeof *keep);
  for (int j = 0; j < top; j++) {
    before[j] = x.c[idx[j]].row;
    keep[j] = ir_module_clone(x.c[idx[j]].m);
  }
  cfg_wave lw = {&x, idx, o->long_evals, false, INFINITY};
  support_pool_run(pool, top, wave_run, &lw);
  for (int j = 0; j < top; j++) {
    cfg_cand *k = &x.c[idx[j]];
    if (!(k->row.makespan <= before[j].makespan)) {
      int evals = k->row.evals;
      k->row = before[j];
      k->row.evals = evals;
      ir_module_free(k->m);
      k->m = keep[j];
    } else {
      ir_module_free(keep[j]);
    }
  }
  st->long_tuned += top;
  free(before);
  free(keep);
  sort_cands(&x, idx, x.n, false);
  st->bound = INFINITY;
  for (int i = 0; i < x.n; i++) st->bound = fmin(st->bound, x.c[i].row.bound);
  int rc = 0;
  if (x.n == 0 || !isfinite(x.c[idx[0]].row.makespan)) {
    no_config(&x, d, where);
    rc = 1;
  } else {
    for (int j = 0; j < x.n && isfinite(x.c[idx[j]].row.makespan); j++) st->nrows++;
    st->rows = xmalloc((size_t)st->nrows * sizeof *st->rows);
    for (int j = 0; j < st->nrows; j++) st->rows[j] = x.c[idx[j]].row;
    if (o->baselines) {
      cfg_ctx b = x;
      b.o.megatron = false; /* PP-only is the tuner's plan, as its row says */
      b.c = NULL;
      b.n = b.cap = 0;
      baselines(&b, pool, st);
    }
    /* The winner's module becomes m. */
    ir_module tmp = *m;
    *m = *x.c[idx[0]].m;
    *x.c[idx[0]].m = tmp;
  }
  free(idx);
  cands_free(&x);
  free(x.tpl);
  ir_module_free(x.base);
  support_pool_free(pool);
  st->seconds = support_seconds() - t0;
  return rc;
}

void pass_config_stats_free(pass_config_stats *st) {
  free(st->rows);
  st->rows = NULL;
  st->nrows = 0;
}

/* Free a heap pass_config_stats and what it holds (pass_results' free_figures). */
static void config_stats_delete(void *p) {
  pass_config_stats_free(p);
  free(p);
}

/* config: the configuration search as a pass; its figures (pass_config_stats) go to
 * opts->results when given. */
int pass_run_config(ir_module *m, const pass_options *opts, diag_engine *d) {
  pass_config_opts o = {0};
  int64_t evals, long_evals, top, max_mb, jobs;
  if (pass_opt_int(opts, "evals", &evals, d) || pass_opt_int(opts, "long_evals", &long_evals, d) ||
      pass_opt_int(opts, "top", &top, d) || pass_opt_int(opts, "max_micro_batch", &max_mb, d) ||
      pass_opt_bool(opts, "fewer", &o.fewer, d) ||
      pass_opt_bool(opts, "exhaustive", &o.exhaustive, d) ||
      pass_opt_bool(opts, "baselines", &o.baselines, d) ||
      pass_opt_bool(opts, "megatron", &o.megatron, d) || pass_opt_int(opts, "jobs", &jobs, d) ||
      pass_opt_seed(opts, "seed", &o.seed, d))
    return 1;
  o.evals = (int)evals;
  o.long_evals = (int)long_evals;
  o.top = (int)top;
  o.max_micro_batch = (int)max_mb;
  o.jobs = (int)jobs;
  pass_config_stats *st = xmalloc(sizeof *st);
  diag_loc where = opts->loc.file ? opts->loc : ir_diag_loc(m->train_loc);
  return pass_results_keep(opts->results, PASS_ID_CONFIG, pass_config(m, &o, st, d, where), st,
                           config_stats_delete);
}
