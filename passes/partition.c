/* partition.c -- the partition pass: cut the model's layers into contiguous stages.
 *   uniform   equal layer counts per stage, the leading embedding and trailing LM head riding
 *             with the first and last stage (Megatron's default split);
 *   balanced  the exact min-max split of per-layer cost (F + B + W) into k contiguous stages, by
 *             bisection over the bottleneck with a greedy feasibility test, optionally under a
 *             per-stage memory cap; with megatron=true, of the blocks Megatron can cut between,
 *             each stage costed on its own device and kept within its memory (a dynamic
 *             program: pass_partition_minmax);
 *   explicit  layer counts given as an option, as a Megatron pipeline layout string or hybrid
 *             pattern with '|' cuts, or the stages the module already has (a spec's
 *             `stages = [...]`).
 * The stage count is devices x chunks unless stages=N says otherwise; any other count given
 * explicitly is an error that says what would fit. The pass replaces the plan (stages,
 * placement, schedule, prediction). */
#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "passes.h"

/* What the pass works with. */
typedef struct part_ctx {
  ir_module *m;             /* the module to partition */
  const pass_options *opts; /* the pass's options */
  diag_engine *d;           /* where errors go */
  int k;                    /* number of stages to make */
  int chunks;               /* stages per device */
  bool k_given;             /* stages=N was given */
} part_ctx;

/* The methods, in the order of the 'method' option's words (options.def). */
enum { PART_UNIFORM, PART_BALANCED, PART_EXPLICIT, PART_NMETHODS };

/* Where a pass error points: the option when given, else the pass name. */
static diag_loc opt_loc(const part_ctx *c, const char *key) {
  const pass_option *o = pass_opt_find(c->opts, key);
  return o ? o->value_loc : c->opts->loc;
}

/* Replace the module's plan with k stages ending at ends[0..k) (exclusive ends, strictly
 * increasing, ends[k-1] == nlayers). */
static void apply_cuts(ir_module *m, const int *ends, int k) {
  ir_module_clear_plan(m);
  int first = 0;
  for (int i = 0; i < k; i++) {
    ir_module_add_stage(m, first, ends[i]);
    first = ends[i];
  }
}

/* ---- Balanced: exact min-max by bisection -------------------------------------------------- */

/* Greedy feasibility for bottleneck t, filling stages from the last layer backwards (so the
 * early stages, which hold the most microbatches in flight, get the lighter share among optimal
 * splits): each stage takes layers while its cost stays <= t and, with cap > 0, its static memory
 * plus activations times the microbatches 1F1B keeps in flight at its index, min(k - i, mb), stay
 * <= cap. Writes the ends of the stages it fills into ends[k - used .. k) when ends != NULL.
 * Returns the number of stages used (<= k), or -1 when k stages do not suffice. */
static int greedy_fits(const int64_t *cost, const double *mem_static, const double *mem_act,
                       int n, int k, int64_t t, double cap, int mb, int *ends) {
  int end = n, stage = k - 1;
  while (end > 0) {
    if (stage < 0) return -1;
    int64_t sum = 0;
    double ms = 0, ma = 0;
    int inflight = k - stage < mb ? k - stage : mb;
    int first = end;
    while (first > 0) {
      int64_t c = sum + cost[first - 1];
      double s2 = ms + mem_static[first - 1], a2 = ma + mem_act[first - 1];
      if (c > t || (cap > 0 && s2 + a2 * inflight > cap)) break;
      sum = c, ms = s2, ma = a2;
      first--;
    }
    if (first == end) return -1; /* the next layer alone does not fit here */
    if (ends) ends[stage] = end;
    end = first;
    stage--;
  }
  return k - 1 - stage;
}

int pass_partition_balanced(const int64_t *cost, const double *mem_static, const double *mem_act,
                            int n, int k, double cap, int mb, int *ends, int64_t *bottleneck) {
  if (k < 1 || n < k) return -1;
  int64_t lo = 0, hi = 0;
  for (int i = 0; i < n; i++) {
    if (cost[i] < 0 || cost[i] > INT64_MAX - hi) return -1; /* negative, or the sum overflows */
    if (cost[i] > lo) lo = cost[i];
    hi += cost[i];
  }
  if (greedy_fits(cost, mem_static, mem_act, n, k, hi, cap, mb, NULL) < 0) return -2;
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    if (greedy_fits(cost, mem_static, mem_act, n, k, mid, cap, mb, NULL) >= 0)
      hi = mid;
    else
      lo = mid + 1;
  }
  int used = greedy_fits(cost, mem_static, mem_act, n, k, lo, cap, mb, ends);
  /* Fewer than k stages were needed: the empty leading stages take one layer each from the
   * front (splitting a stage never raises the bottleneck). Ends stay strictly increasing since
   * n >= k. */
  for (int i = 0; i < k - used; i++) ends[i] = i + 1;
  for (int i = 1; i < k; i++)
    if (ends[i] <= ends[i - 1]) ends[i] = ends[i - 1] + 1;
  /* The carved single-layer stages sit at earlier indices (more microbatches in flight): check
   * the cap once more. */
  for (int i = 0, first = 0; cap > 0 && i < k; first = ends[i++]) {
    double ms = 0, ma = 0;
    int inflight = k - i < mb ? k - i : mb;
    for (int j = first; j < ends[i]; j++) ms += mem_static[j], ma += mem_act[j];
    if (ms + ma * inflight > cap) return -2;
  }
  if (bottleneck) *bottleneck = lo;
  return 0;
}

int pass_partition_minmax(const int64_t *cost, const double *mem, const double *cap, int n,
                          int k, int *ends, int64_t *bottleneck) {
  if (k < 1 || n < k) return -1;
  /* Every sum below is of distinct units, each at most its largest cost: bound that total. */
  int64_t most = 0;
  for (int u = 0; u < n; u++) {
    int64_t top = 0;
    for (int s = 0; s < k; s++) {
      int64_t c = cost[(size_t)s * n + u];
      if (c < 0) return -1;
      if (c > top) top = c;
    }
    if (top > INT64_MAX / 2 - most) return -1;
    most += top;
  }
  size_t row = (size_t)n + 1;
  int64_t *pc = xcalloc((size_t)k * row, sizeof *pc); /* prefix sums of each stage's costs */
  double *pm = xcalloc((size_t)k * row, sizeof *pm);  /* ... and of its memory */
  for (int s = 0; s < k; s++)
    for (int u = 0; u < n; u++) {
      pc[s * row + u + 1] = pc[s * row + u] + cost[(size_t)s * n + u];
      pm[s * row + u + 1] = pm[s * row + u] + mem[(size_t)s * n + u];
    }
  /* Stage s over units [a, b): its cost, and whether it fits its cap. */
#define MM_COST(s, a, b) (pc[(s) * row + (b)] - pc[(s) * row + (a)])
#define MM_FITS(s, a, b) (!cap || pm[(s) * row + (b)] - pm[(s) * row + (a)] <= cap[s])
  /* Pass 1: f[s][j] = the least bottleneck of stages 0..s over units [0, j) (-1: none). */
  int64_t *f = xmalloc((size_t)k * row * sizeof *f);
  for (size_t i = 0; i < (size_t)k * row; i++) f[i] = -1;
  for (int j = 1; j <= n; j++)
    if (MM_FITS(0, 0, j)) f[j] = MM_COST(0, 0, j);
  for (int s = 1; s < k; s++)
    for (int j = s + 1; j <= n; j++)
      for (int a = s; a < j; a++) {
        int64_t prev = f[(s - 1) * row + a];
        if (prev < 0 || !MM_FITS(s, a, j)) continue;
        int64_t c = MM_COST(s, a, j), v = c > prev ? c : prev;
        if (f[s * row + j] < 0 || v < f[s * row + j]) f[s * row + j] = v;
      }
  int64_t t = f[(k - 1) * row + n];
  int rc = t < 0 ? -2 : 0;
  if (rc == 0) {
    /* Pass 2: g[s][j] = the least sum of stage costs with every stage <= t; from[] the start of
     * stage s that gives it (the earliest among equal sums: later stages as large as possible,
     * the early stages, which hold the most microbatches in flight, the lighter). */
    int64_t *g = f; /* pass 1 is done with */
    int *from = xmalloc((size_t)k * row * sizeof *from);
    for (size_t i = 0; i < (size_t)k * row; i++) g[i] = -1;
    for (int j = 1; j <= n; j++)
      if (MM_FITS(0, 0, j) && MM_COST(0, 0, j) <= t) g[j] = MM_COST(0, 0, j), from[j] = 0;
    for (int s = 1; s < k; s++)
      for (int j = s + 1; j <= n; j++)
        for (int a = s; a < j; a++) {
          int64_t prev = g[(s - 1) * row + a], c = MM_COST(s, a, j);
          if (prev < 0 || c > t || !MM_FITS(s, a, j)) continue;
          if (g[s * row + j] < 0 || prev + c < g[s * row + j])
            g[s * row + j] = prev + c, from[s * row + j] = a;
        }
    for (int s = k - 1, j = n; s >= 0; s--) {
      ends[s] = j;
      j = from[s * row + j];
    }
    free(from);
    if (bottleneck) *bottleneck = t;
  }
#undef MM_COST
#undef MM_FITS
  free(f);
  free(pc);
  free(pm);
  return rc;
}

/* ---- Methods ------------------------------------------------------------------------------- */

/* uniform: the body (layers after the leading embeddings and before the trailing LM heads) in
 * equal counts; when k does not divide it, the last (body mod k) stages get one layer more. */
static int part_uniform(part_ctx *c) {
  ir_module *m = c->m;
  int lead, body_end, n = m->nlayers;
  ir_module_body(m, &lead, &body_end);
  int body = body_end - lead;
  if (body < c->k) {
    diag_error(c->d, c->opts->loc, "partition{method=uniform} cannot cut %d layer%s (without the "
               "embedding and LM head) into %d stages", body, body == 1 ? "" : "s", c->k);
    return 1;
  }
  int *ends = xmalloc((size_t)c->k * sizeof *ends);
  int q = body / c->k, r = body % c->k, at = lead;
  for (int i = 0; i < c->k; i++) {
    at += q + (i >= c->k - r);
    ends[i] = at;
  }
  ends[c->k - 1] = n;
  apply_cuts(m, ends, c->k);
  free(ends);
  return 0;
}

/* Whether every layer has a complete cost record. */
static int need_costs(part_ctx *c, const char *method) {
  for (int i = 0; i < c->m->nlayers; i++) {
    const ir_cost *k = &c->m->layers[i].cost;
    if (!ir_field_is_set(k, IR_F_COST_f) || !ir_field_is_set(k, IR_F_COST_b) ||
        !ir_field_is_set(k, IR_F_COST_w) || !ir_field_is_set(k, IR_F_COST_param) ||
        !ir_field_is_set(k, IR_F_COST_act)) {
      diag_error(c->d, c->opts->loc, "partition{method=%s} needs layer costs (layer %%%d \"%s\" "
                 "has none): run the cost pass first", method, i, c->m->layers[i].name);
      return 1;
    }
  }
  return 0;
}

/* Largest sum of the layers' F + B + W times (seconds) the balanced method takes: in picoseconds
 * it stays below INT64_MAX with room for rounding. */
#define PART_MAX_TOTAL_S 9e6

/* The units the balanced split works on: layers, or with megatron=true the blocks between the
 * cuts Megatron allows. Writes unit u's exclusive layer end into uend[u] (m->nlayers + 1
 * entries); returns the count. */
static int part_units(const ir_module *m, bool megatron, int *uend) {
  int n = 0;
  for (int i = 1; i <= m->nlayers; i++)
    if (i == m->nlayers || !megatron || pass_megatron_cut_ok(m, i)) uend[n++] = i;
  return n;
}

/* Picoseconds of F + B + W of cost record k, as the simulator counts time. */
static int64_t part_ps(const ir_cost *k) { return llround((k->f + k->b + k->w) * 1e12); }

/* balanced, megatron=true: the n units (ending at uend[]) as Megatron runs them, stage i on
 * device i mod p (its placement: sequential, or its loop with chunks > 1): each unit costs its
 * layers' F + B + W on that device's type and needs their static memory plus activations times
 * the microbatches 1F1B keeps in flight at stage i, min(k - i, mb), within mem_cap when given,
 * else (fit=true, one stage per device) within the device's memory limit. The exact split of
 * pass_partition_minmax. */
static int part_balanced_megatron(part_ctx *c, const int *uend, int n, double cap, int mb,
                                  int *ends) {
  ir_module *m = c->m;
  bool fit;
  if (pass_opt_bool(c->opts, "fit", &fit, c->d)) return 1;
  int k = c->k, p = m->ndevices;
  int64_t *cost = xcalloc((size_t)k * (size_t)n, sizeof *cost);
  double *mem = xcalloc((size_t)k * (size_t)n, sizeof *mem);
  double *caps = xmalloc((size_t)k * sizeof *caps);
  for (int s = 0; s < k; s++) {
    int dv = p > 0 ? s % p : -1;
    int inflight = k - s < mb ? k - s : mb;
    caps[s] = cap > 0 ? cap : fit && dv >= 0 && k == p ? ir_device_mem_limit(m, dv) : INFINITY;
    for (int u = 0, i = 0; u < n; u++)
      for (; i < uend[u]; i++) {
        const ir_cost *r = dv >= 0 ? ir_layer_cost_on(m, &m->layers[i], dv) : &m->layers[i].cost;
        cost[(size_t)s * n + u] += part_ps(r);
        mem[(size_t)s * n + u] += r->param + r->act * inflight;
      }
  }
  int rc = pass_partition_minmax(cost, mem, caps, n, k, ends, NULL);
  if (rc == -2) {
    strbuf sb = {0};
    if (cap > 0) ir_format_value(&sb, IR_T_BYTES, cap);
    diag_error(c->d, cap > 0 ? opt_loc(c, "mem_cap") : c->opts->loc,
               "no partition into %d stages Megatron can express keeps every stage within %s%s "
               "(static memory plus activations of the microbatches 1F1B keeps in flight)", k,
               cap > 0 ? "mem_cap = " : "its device's memory limit", strbuf_cstr(&sb));
    strbuf_free(&sb);
  } else if (rc != 0) {
    diag_error(c->d, c->opts->loc, "partition{method=balanced, megatron=true} cannot balance "
               "these layer costs (their F + B + W times add up past what it can count)");
  }
  free(cost);
  free(mem);
  free(caps);
  return rc != 0;
}

/* balanced: the exact min-max split of F + B + W per layer (pass_partition_balanced), under
 * mem_cap when given; with megatron=true, cuts only where pass_megatron_cut_ok allows, each
 * stage costed on its own device within its memory (part_balanced_megatron). Needs complete
 * layer costs. */
static int part_balanced(part_ctx *c) {
  ir_module *m = c->m;
  if (need_costs(c, "balanced")) return 1;
  bool megatron;
  if (pass_opt_bool(c->opts, "megatron", &megatron, c->d)) return 1;
  if (!megatron && pass_opt_find(c->opts, "fit")) {
    diag_error(c->d, pass_opt_find(c->opts, "fit")->key_loc, "'fit' is for megatron=true");
    return 1;
  }
  double cap;
  if (pass_opt_quantity(c->opts, "mem_cap", &cap, c->d)) return 1;
  if (pass_opt_find(c->opts, "mem_cap") && !(cap > 0)) { /* 0 would mean "no cap" below */
    diag_error(c->d, opt_loc(c, "mem_cap"), "mem_cap must be a positive size");
    return 1;
  }
  /* Unit u ends at layer uend[u]. */
  int *uend = xmalloc(((size_t)m->nlayers + 1) * sizeof *uend);
  int n = part_units(m, megatron, uend);
  if (n < c->k) {
    if (megatron)
      diag_error(c->d, c->opts->loc, "partition{method=balanced, megatron=true} cannot cut %d "
                 "blocks (layers between the cuts Megatron can express) into %d stages", n, c->k);
    else
      diag_error(c->d, c->opts->loc, "partition{method=balanced} cannot cut %d layers into %d "
                 "stages", n, c->k);
    free(uend);
    return 1;
  }
  /* Picoseconds, as the simulator: their sum must fit in int64_t (9.2e18 ps, about 106 days). */
  double total = 0; /* each layer at its dearest device type */
  for (int i = 0; i < m->nlayers; i++) {
    const ir_layer *l = &m->layers[i];
    double most = l->cost.f + l->cost.b + l->cost.w;
    for (int t = 0; t < l->ntcosts; t++) {
      const ir_cost *o = &l->tcosts[t].cost;
      if (o->f + o->b + o->w > most) most = o->f + o->b + o->w;
    }
    total += most;
  }
  if (!(total <= PART_MAX_TOTAL_S)) {
    diag_error(c->d, c->opts->loc, "partition{method=balanced} cannot balance layers whose F + B "
               "+ W times add up to %g s (at most %g s)", total, PART_MAX_TOTAL_S);
    free(uend);
    return 1;
  }
  /* In flight at a stage: min(k - i, mb), so mb only matters up to k (NAN when unset: 1). */
  double mbs = ir_field_value(&m->train, IR_F_TRAIN_microbatches);
  int mb = !(mbs >= 1) ? 1 : mbs < c->k ? (int)mbs : c->k;
  int *ends = xmalloc((size_t)c->k * sizeof *ends);
  int rc;
  if (megatron) {
    rc = part_balanced_megatron(c, uend, n, cap, mb, ends);
  } else {
    int64_t *cost = xcalloc((size_t)n, sizeof *cost);
    double *ms = xcalloc((size_t)n, sizeof *ms), *ma = xcalloc((size_t)n, sizeof *ma);
    for (int u = 0, i = 0; u < n; u++)
      for (; i < uend[u]; i++) {
        const ir_cost *k = &m->layers[i].cost;
        cost[u] += part_ps(k);
        ms[u] += k->param;
        ma[u] += k->act;
      }
    rc = pass_partition_balanced(cost, ms, ma, n, c->k, cap, mb, ends, NULL) != 0;
    if (rc) {
      strbuf sb = {0};
      ir_format_value(&sb, IR_T_BYTES, cap);
      diag_error(c->d, opt_loc(c, "mem_cap"), "no partition into %d stages keeps every stage "
                 "under mem_cap = %s (static memory plus activations of the microbatches 1F1B "
                 "keeps in flight)", c->k, strbuf_cstr(&sb));
      strbuf_free(&sb);
    }
    free(cost);
    free(ms);
    free(ma);
  }
  if (rc == 0) {
    for (int s = 0; s < c->k; s++) ends[s] = uend[ends[s] - 1]; /* unit ends to layer ends */
    apply_cuts(m, ends, c->k);
  }
  free(ends);
  free(uend);
  return rc;
}

/* Check an explicit stage count against devices x chunks; report what would fit. */
static int check_count(part_ctx *c, int given, diag_loc at, const char *what) {
  int dev = c->m->ndevices;
  if (c->k_given || dev == 0) {
    if (c->k_given && given != c->k) {
      diag_error(c->d, at, "%s has %d stages but stages=%d was asked for", what, given, c->k);
      return 1;
    }
    return 0;
  }
  if (given == c->k) return 0;
  if (given % dev == 0)
    diag_error(c->d, at, "%s has %d stages; the pipeline has %d device%s x %d chunk%s = %d "
               "(with chunks=%d the %d stages would fit)", what, given, dev, dev == 1 ? "" : "s",
               c->chunks, c->chunks == 1 ? "" : "s", c->k, given / dev, given);
  else
    diag_error(c->d, at, "%s has %d stages; the pipeline has %d device%s x %d chunk%s = %d "
               "(a multiple of %d would fit with chunks=N)", what, given, dev,
               dev == 1 ? "" : "s", c->chunks, c->chunks == 1 ? "" : "s", c->k, dev);
  return 1;
}

/* explicit counts="a,b,c". */
static int part_counts(part_ctx *c, const pass_option *o) {
  int n = 0, cap = 0, *ends = NULL;
  int64_t sum = 0; /* counts are at most 1e8 each: no overflow before the string ends */
  const char *p = o->value;
  while (*p) {
    char *e;
    long v = strtol(p, &e, 10);
    if (e == p || v < 1 || v > 100000000) {
      diag_error(c->d, o->value_loc, "counts: expected positive layer counts separated by commas, "
                 "got '%s'", o->value);
      free(ends);
      return 1;
    }
    sum += v;
    int end = sum <= c->m->nlayers ? (int)sum : c->m->nlayers; /* too many: reported below */
    VEC_PUSH(ends, n, cap, end);
    p = e;
    while (*p == ' ') p++;
    if (*p == ',') p++;
    while (*p == ' ') p++;
  }
  int rc = 1;
  if (n == 0) {
    diag_error(c->d, o->value_loc, "counts: no layer counts given");
  } else if (sum != c->m->nlayers) {
    diag_error(c->d, o->value_loc, "counts add up to %lld layers but the module has %d",
               (long long)sum, c->m->nlayers);
  } else if (!check_count(c, n, o->value_loc, "the explicit partition")) {
    apply_cuts(c->m, ends, n);
    rc = 0;
  }
  free(ends);
  return rc;
}

/* Expand a layout string: drop spaces and commas, repeat "(...)*N" groups and "x*N" symbols.
 * Returns the expanded text in 'out', or false with *err set (position in the input). */
static bool layout_expand(const char *s, size_t *i, strbuf *out, int depth, const char **err) {
  if (depth > 16) {
    *err = "parentheses nested too deeply";
    return false;
  }
  while (s[*i] && s[*i] != ')') {
    char ch = s[*i];
    if (ch == ' ' || ch == ',') {
      (*i)++;
      continue;
    }
    strbuf item = {0};
    if (ch == '(') {
      (*i)++;
      if (!layout_expand(s, i, &item, depth + 1, err)) {
        strbuf_free(&item);
        return false;
      }
      if (s[*i] != ')') {
        *err = "missing ')'";
        strbuf_free(&item);
        return false;
      }
      (*i)++;
    } else {
      strbuf_putc(&item, ch);
      (*i)++;
    }
    long rep = 1;
    if (s[*i] == '*' && isdigit((unsigned char)s[*i + 1])) {
      char *e;
      rep = strtol(s + *i + 1, &e, 10);
      *i = (size_t)(e - s);
      if (rep < 1 || rep > 1000000) {
        *err = "repeat count out of range";
        strbuf_free(&item);
        return false;
      }
    }
    for (long r = 0; r < rep && out->len < 10000000; r++)
      strbuf_append(out, item.data ? item.data : "", item.len);
    strbuf_free(&item);
  }
  return true;
}

/* explicit layout="...": Megatron's --pipeline-model-parallel-layout (E embedding, t transformer
 * layer = attention + its MLP or MoE, L LM head; '|' between stages) or, when it has no 't' or
 * 'L', a hybrid pattern with '|' cuts (M Mamba-2, * attention, - MLP, E MoE; leading embeddings
 * and trailing LM heads join the first and last stage). */
static int part_layout(part_ctx *c, const pass_option *o) {
  ir_module *m = c->m;
  strbuf ex = {0};
  size_t i = 0;
  const char *err = NULL;
  if (!layout_expand(o->value, &i, &ex, 0, &err) || o->value[i]) {
    diag_error(c->d, o->value_loc, "layout: %s at offset %zu of '%s'", err ? err : "unmatched ')'",
               i, o->value);
    strbuf_free(&ex);
    return 1;
  }
  const char *s = strbuf_cstr(&ex);
  bool megatron = strchr(s, 't') || strchr(s, 'L');
  pass_layout_notation notation = megatron ? PASS_LAYOUT_MEGATRON : PASS_LAYOUT_HYBRID;
  int n = m->nlayers, at = 0, stage = 0, sym = 0, nends = 0, cap = 0, *ends = NULL;
  if (!megatron)
    while (at < n && m->layers[at].kind == IR_KIND_EMBEDDING) at++;
  int rc = 0;
  for (const char *p = s;; p++) {
    if (*p == '|' || *p == 0) {
      if (!megatron && *p == 0)
        while (at < n && m->layers[at].kind == IR_KIND_LM_HEAD) at++;
      if (at == (nends ? ends[nends - 1] : 0)) {
        diag_error(c->d, o->value_loc, "layout: stage %d is empty", stage);
        rc = 1;
        break;
      }
      VEC_PUSH(ends, nends, cap, at);
      if (*p == 0) break;
      stage++;
      sym = 0;
      continue;
    }
    sym++;
    /* What the symbol consumes: one or two layers of the expected kinds. */
    int want = pass_layout_kind(notation, *p);
    if (want < 0) {
      strbuf syms = {0};
      pass_layout_symbols(notation, &syms);
      diag_error(c->d, o->value_loc, "layout: unknown symbol '%c' in stage %d (a %s uses %s)", *p,
                 stage, megatron ? "Megatron layout" : "hybrid pattern", strbuf_cstr(&syms));
      strbuf_free(&syms);
      rc = 1;
      break;
    }
    if (at >= n) {
      diag_error(c->d, o->value_loc, "layout: symbol %d ('%c') of stage %d is past the last layer "
                 "(the module has %d layers)", sym, *p, stage, n);
      rc = 1;
      break;
    }
    if (pass_layout_symbol(notation, m->layers[at].kind) != *p) {
      strbuf kinds = {0};
      pass_layout_kinds(notation, *p, &kinds);
      diag_error(c->d, o->value_loc, "layout: symbol %d ('%c') of stage %d needs a layer of kind "
                 "%s; layer %%%d \"%s\" is %s", sym, *p, stage, strbuf_cstr(&kinds), at,
                 m->layers[at].name, ir_kinds[m->layers[at].kind].name);
      strbuf_free(&kinds);
      rc = 1;
      break;
    }
    at++;
    if (*p == 't' && at < n &&
        (m->layers[at].kind == IR_KIND_MLP || m->layers[at].kind == IR_KIND_MOE))
      at++;
  }
  if (!rc && at != n) {
    diag_error(c->d, o->value_loc, "layout covers %d of the module's %d layers (layer %%%d \"%s\" "
               "is in no stage)", at, n, at, m->layers[at].name);
    rc = 1;
  }
  if (!rc && !check_count(c, nends, o->value_loc, "the layout")) apply_cuts(m, ends, nends);
  else rc = 1;
  free(ends);
  strbuf_free(&ex);
  return rc;
}

/* explicit: counts, a layout, or the stages the module has (kept, with the rest of the plan
 * dropped). */
static int part_explicit(part_ctx *c) {
  const pass_option *counts = pass_opt_find(c->opts, "counts");
  const pass_option *layout = pass_opt_find(c->opts, "layout");
  if (counts && layout) {
    diag_error(c->d, layout->key_loc, "give either counts or layout, not both");
    return 1;
  }
  if (counts) return part_counts(c, counts);
  if (layout) return part_layout(c, layout);
  if (c->m->nstages == 0) {
    diag_error(c->d, c->opts->loc, "partition{method=explicit} needs counts=\"...\" or "
               "layout=\"...\", or a module with stages (a spec's 'stages = [...]')");
    return 1;
  }
  /* Keep the module's stages; drop the rest of the plan. */
  ir_module *m = c->m;
  int k = m->nstages;
  if (check_count(c, k, c->opts->loc, "the module's partition")) return 1;
  int *ends = xmalloc((size_t)k * sizeof *ends);
  for (int i = 0; i < k; i++) ends[i] = m->stages[i].end;
  apply_cuts(m, ends, k);
  free(ends);
  return 0;
}

int pass_run_partition(ir_module *m, const pass_options *opts, diag_engine *d) {
  int method;
  int64_t stages, chunks;
  if (pass_opt_choice(opts, "method", &method, d) || pass_opt_int(opts, "stages", &stages, d) ||
      pass_opt_int(opts, "chunks", &chunks, d))
    return 1;
  part_ctx c = {m, opts, d, 0, 1, stages > 0};
  c.chunks = (int)chunks;
  if (pass_opt_find(opts, "stages") && pass_opt_find(opts, "chunks")) {
    diag_error(d, opt_loc(&c, "chunks"), "give either stages or chunks, not both");
    return 1;
  }
  if ((pass_opt_find(opts, "counts") || pass_opt_find(opts, "layout")) && method != PART_EXPLICIT) {
    const pass_option *o = pass_opt_find(opts, "counts");
    if (!o) o = pass_opt_find(opts, "layout");
    diag_error(d, o->key_loc, "'%s' is for method=explicit", o->key);
    return 1;
  }
  for (int i = 0; i < 3; i++) {
    const char *key = i == 2 ? "fit" : i ? "megatron" : "mem_cap";
    if (pass_opt_find(opts, key) && method != PART_BALANCED) {
      diag_error(d, pass_opt_find(opts, key)->key_loc, "'%s' is for method=balanced", key);
      return 1;
    }
  }
  if (stages > 0) {
    c.k = (int)stages;
  } else if (m->ndevices > 0) {
    c.k = m->ndevices * (int)chunks;
  } else if (method != PART_EXPLICIT) {
    diag_error(d, opts->loc, "the module has no devices: give the number of stages (stages=N)");
    return 1;
  }
  if (method != PART_EXPLICIT && c.k > m->nlayers) {
    diag_error(d, opts->loc, "cannot cut %d layer%s into %d stages", m->nlayers,
               m->nlayers == 1 ? "" : "s", c.k);
    return 1;
  }
  switch (method) {
  case PART_UNIFORM: return part_uniform(&c);
  case PART_BALANCED: return part_balanced(&c);
  default: return part_explicit(&c);
  }
}

/* ---- Megatron's notations (layout.def) -------------------------------------------------------- */

/* One symbol of layout.def. */
static const struct {
  pass_layout_notation notation; /* which notation it belongs to */
  char symbol;                   /* its character */
  ir_layer_kind kind;            /* the layer kind it stands for */
} layout_symbols[] = {
#define LAYOUT_SYMBOL(N, C, K) {PASS_LAYOUT_##N, C, IR_KIND_##K},
#include "layout.def"
#undef LAYOUT_SYMBOL
};
enum { LAYOUT_NSYMBOLS = (int)(sizeof layout_symbols / sizeof layout_symbols[0]) };

int pass_layout_kind(pass_layout_notation n, char c) {
  for (int i = 0; i < LAYOUT_NSYMBOLS; i++)
    if (layout_symbols[i].notation == n && layout_symbols[i].symbol == c)
      return layout_symbols[i].kind;
  return -1;
}

char pass_layout_symbol(pass_layout_notation n, ir_layer_kind k) {
  for (int i = 0; i < LAYOUT_NSYMBOLS; i++)
    if (layout_symbols[i].notation == n && layout_symbols[i].kind == k)
      return layout_symbols[i].symbol;
  return 0;
}

pass_layout_notation pass_layout_notation_of(const ir_module *m) {
  for (int i = 0; i < m->nlayers; i++)
    if (m->layers[i].kind == IR_KIND_MAMBA2) return PASS_LAYOUT_HYBRID;
  return PASS_LAYOUT_MEGATRON;
}

bool pass_megatron_cut_ok(const ir_module *m, int i) {
  ir_layer_kind prev = m->layers[i - 1].kind, next = m->layers[i].kind;
  if (pass_layout_notation_of(m) == PASS_LAYOUT_HYBRID)
    return !(i == 1 && prev == IR_KIND_EMBEDDING) &&
           !(i == m->nlayers - 1 && next == IR_KIND_LM_HEAD);
  return !(pass_layout_symbol(PASS_LAYOUT_MEGATRON, prev) == 't' &&
           (next == IR_KIND_MLP || next == IR_KIND_MOE));
}

/* Whether row i of layout_symbols is the first of its notation with its symbol. */
static bool layout_first(int i) {
  for (int j = 0; j < i; j++)
    if (layout_symbols[j].notation == layout_symbols[i].notation &&
        layout_symbols[j].symbol == layout_symbols[i].symbol)
      return false;
  return true;
}

void pass_layout_symbols(pass_layout_notation n, strbuf *sb) {
  int count = 0, total = 0;
  for (int i = 0; i < LAYOUT_NSYMBOLS; i++) total += layout_symbols[i].notation == n && layout_first(i);
  for (int i = 0; i < LAYOUT_NSYMBOLS; i++)
    if (layout_symbols[i].notation == n && layout_first(i)) {
      count++;
      strbuf_printf(sb, "%s%c", count == 1 ? "" : count == total ? " and " : ", ",
                    layout_symbols[i].symbol);
    }
}

void pass_layout_kinds(pass_layout_notation n, char c, strbuf *sb) {
  bool any = false;
  for (int i = 0; i < LAYOUT_NSYMBOLS; i++)
    if (layout_symbols[i].notation == n && layout_symbols[i].symbol == c) {
      strbuf_printf(sb, "%s%s", any ? " or " : "", ir_kinds[layout_symbols[i].kind].name);
      any = true;
    }
}
